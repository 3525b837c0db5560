//! Iris templates: the open-iris serialisation, fixed-size bit arrays and validation.
//!
//! Interchange format: JSON `{"iris_codes": b64, "mask_codes": b64, "iris_code_version": str}`
//! where each b64 is `numpy.packbits` (most significant bit first) of the bool array of shape
//! (16, 200, 2, 2) in C order: 1,600 bytes, 2,136 base64 characters. Bit index
//! `800 row + 4 col + 2 wavelet + part`. A mask bit of 1 means usable.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::{BITS_PER_COLUMN, CODE_BITS, COLUMNS};

/// Bytes of one packed code or mask (`numpy.packbits`).
pub const PACKED_BYTES: usize = CODE_BITS / 8;
/// Base64 characters of one packed code or mask.
pub const BASE64_CHARS: usize = PACKED_BYTES.div_ceil(3) * 4;
/// Longest `iris_code_version` string kept.
pub const MAX_VERSION_LEN: usize = 32;
/// Default minimum fraction of usable mask bits.
pub const DEFAULT_MIN_USABLE_FRACTION: f64 = 0.70;

const WORDS: usize = CODE_BITS / 64;

/// 12,800 bits in plain order (`800 row + 4 col + 2 wavelet + part`).
///
/// Bit `i` lives in word `i / 64` at position `63 - i % 64`, so the words are the packbits
/// bytes read big-endian. Biometric data: zeroized on drop, hidden from `Debug`, compared in
/// constant time.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct IrisBits([u64; WORDS]);

impl IrisBits {
    /// The bits rotated by `k` columns (any `k`; taken mod 200): each 800-bit row shifted
    /// cyclically by `4 k` bits, as `numpy.roll(x, k, axis=1)` on the (16, 200, 4) view.
    pub fn rotated(&self, k: i32) -> IrisBits {
        const ROW_BITS: usize = COLUMNS * BITS_PER_COLUMN;
        let shift = (k.rem_euclid(COLUMNS as i32) as usize) * BITS_PER_COLUMN;
        let mut out = IrisBits::zero();
        for row_start in (0..CODE_BITS).step_by(ROW_BITS) {
            for p in 0..ROW_BITS {
                let src = row_start + (p + ROW_BITS - shift) % ROW_BITS;
                out.set(row_start + p, self.get(src));
            }
        }
        out
    }

    /// All bits zero.
    pub const fn zero() -> IrisBits {
        IrisBits([0; WORDS])
    }

    /// All bits one.
    pub const fn ones() -> IrisBits {
        IrisBits([u64::MAX; WORDS])
    }

    /// Bit `i`.
    ///
    /// # Panics
    /// If `i >= 12_800`.
    pub fn get(&self, i: usize) -> bool {
        (self.0[i / 64] >> (63 - i % 64)) & 1 == 1
    }

    /// Sets bit `i`.
    ///
    /// # Panics
    /// If `i >= 12_800`.
    pub fn set(&mut self, i: usize, value: bool) {
        let mask = 1u64 << (63 - i % 64);
        if value {
            self.0[i / 64] |= mask;
        } else {
            self.0[i / 64] &= !mask;
        }
    }

    /// The 64-bit words.
    pub fn words(&self) -> &[u64; WORDS] {
        &self.0
    }

    /// Number of set bits.
    pub fn count_ones(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Unpacks `numpy.packbits` output (most significant bit first).
    pub fn from_packed(bytes: &[u8; PACKED_BYTES]) -> IrisBits {
        let mut words = [0u64; WORDS];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            *w = u64::from_be_bytes(b);
        }
        IrisBits(words)
    }

    /// Packs as `numpy.packbits` does.
    pub fn to_packed(&self, out: &mut [u8; PACKED_BYTES]) {
        for (chunk, w) in out.chunks_exact_mut(8).zip(self.0) {
            chunk.copy_from_slice(&w.to_be_bytes());
        }
    }
}

impl TryFrom<&[u8]> for IrisBits {
    type Error = TemplateError;

    fn try_from(bytes: &[u8]) -> Result<IrisBits, TemplateError> {
        let packed: &[u8; PACKED_BYTES] = bytes.try_into().map_err(|_| TemplateError::Length {
            field: "bits",
            expected: PACKED_BYTES,
            actual: bytes.len(),
        })?;
        Ok(IrisBits::from_packed(packed))
    }
}

impl ConstantTimeEq for IrisBits {
    fn ct_eq(&self, other: &IrisBits) -> subtle::Choice {
        self.0.ct_eq(&other.0)
    }
}

impl PartialEq for IrisBits {
    fn eq(&self, other: &IrisBits) -> bool {
        self.ct_eq(other).into()
    }
}

impl Eq for IrisBits {}

impl core::fmt::Debug for IrisBits {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("IrisBits").finish_non_exhaustive()
    }
}

/// How strict template validation is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TemplatePolicy {
    /// Fewest usable mask bits accepted (of 12,800).
    pub min_usable_bits: usize,
}

impl TemplatePolicy {
    /// A policy requiring at least `fraction` of the bits to be usable (rounded up to whole
    /// bits; clamped to 0..=1).
    pub fn from_min_usable_fraction(fraction: f64) -> TemplatePolicy {
        let fraction = fraction.clamp(0.0, 1.0);
        let bits = fraction * CODE_BITS as f64;
        let mut min_usable_bits = bits as usize;
        if (min_usable_bits as f64) < bits {
            min_usable_bits += 1;
        }
        TemplatePolicy { min_usable_bits }
    }
}

impl Default for TemplatePolicy {
    /// At least 70 percent usable bits: two such templates share at least 40 percent of
    /// their bits under any rotation.
    fn default() -> TemplatePolicy {
        TemplatePolicy::from_min_usable_fraction(DEFAULT_MIN_USABLE_FRACTION)
    }
}

/// Why a template was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TemplateError {
    /// The input is not a JSON object with the three open-iris string fields.
    Json,
    /// A field is not valid standard base64.
    Base64 {
        /// `iris_codes` or `mask_codes`.
        field: &'static str,
    },
    /// A field has the wrong length.
    Length {
        /// The field.
        field: &'static str,
        /// Bytes expected.
        expected: usize,
        /// Bytes found.
        actual: usize,
    },
    /// `iris_code_version` is longer than [`MAX_VERSION_LEN`].
    VersionTooLong {
        /// Its length.
        len: usize,
    },
    /// The real and imaginary mask bits of one filter response differ.
    MaskPartsDiffer {
        /// The plain index of the real-part bit.
        bit: usize,
    },
    /// Too few usable bits.
    TooFewUsableBits {
        /// Usable bits found.
        usable: usize,
        /// Usable bits required by the policy.
        required: usize,
    },
    /// The output buffer is too small (caller misuse, not bad input).
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
    },
}

impl core::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            TemplateError::Json => f.write_str(
                "not an open-iris template: expected a JSON object with string fields \
                 iris_codes, mask_codes and iris_code_version",
            ),
            TemplateError::Base64 { field } => write!(f, "{field} is not valid base64"),
            TemplateError::Length {
                field,
                expected,
                actual,
            } => write!(f, "{field} has {actual} bytes, expected {expected}"),
            TemplateError::VersionTooLong { len } => write!(
                f,
                "iris_code_version has {len} bytes, at most {MAX_VERSION_LEN} allowed"
            ),
            TemplateError::MaskPartsDiffer { bit } => write!(
                f,
                "mask bits {bit} (real) and {} (imaginary) differ",
                bit + 1
            ),
            TemplateError::TooFewUsableBits { usable, required } => write!(
                f,
                "{usable} usable bits of {CODE_BITS}, at least {required} required"
            ),
            TemplateError::BufferTooSmall { needed } => {
                write!(f, "output buffer too small: {needed} bytes needed")
            }
        }
    }
}

impl core::error::Error for TemplateError {}

/// A validated iris template: code and mask bits plus the open-iris version string.
#[derive(Clone, PartialEq, Eq, Zeroize, ZeroizeOnDrop)]
pub struct IrisTemplate {
    // Crate-visible for the mirrored template (crate::mirror), which keeps validity.
    pub(crate) code: IrisBits,
    pub(crate) mask: IrisBits,
    #[zeroize(skip)]
    pub(crate) version: heapless::String<MAX_VERSION_LEN>,
}

impl core::fmt::Debug for IrisTemplate {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("IrisTemplate")
            .field("version", &self.version.as_str())
            .finish_non_exhaustive()
    }
}

#[derive(serde::Deserialize)]
struct OpenIrisJson<'a> {
    iris_codes: &'a str,
    mask_codes: &'a str,
    iris_code_version: &'a str,
}

/// The version string our synthetic and rotated templates carry.
pub const DEFAULT_VERSION: &str = "v2.1";

impl IrisTemplate {
    /// Validates code and mask bits against `policy`.
    ///
    /// # Errors
    /// [`TemplateError::MaskPartsDiffer`] if a real and an imaginary mask bit differ,
    /// [`TemplateError::TooFewUsableBits`] below the policy's minimum,
    /// [`TemplateError::VersionTooLong`] for an over-long version string.
    pub fn new(
        code: IrisBits,
        mask: IrisBits,
        version: &str,
        policy: &TemplatePolicy,
    ) -> Result<IrisTemplate, TemplateError> {
        // Real part at even bit indices, imaginary at the next: in each word, compare the
        // bits at even offsets from the MSB with their right neighbours.
        const EVEN_FROM_MSB: u64 = 0xAAAA_AAAA_AAAA_AAAA;
        for (wi, &w) in mask.words().iter().enumerate() {
            let diff = (w ^ (w << 1)) & EVEN_FROM_MSB;
            if diff != 0 {
                return Err(TemplateError::MaskPartsDiffer {
                    bit: wi * 64 + diff.leading_zeros() as usize,
                });
            }
        }
        let usable = mask.count_ones();
        if usable < policy.min_usable_bits {
            return Err(TemplateError::TooFewUsableBits {
                usable,
                required: policy.min_usable_bits,
            });
        }
        let version = heapless::String::try_from(version)
            .map_err(|_| TemplateError::VersionTooLong { len: version.len() })?;
        Ok(IrisTemplate {
            code,
            mask,
            version,
        })
    }

    /// Parses the open-iris JSON serialisation and validates it against `policy`.
    ///
    /// # Errors
    /// Every [`TemplateError`] that describes bad input.
    pub fn from_open_iris_json(
        json: &[u8],
        policy: &TemplatePolicy,
    ) -> Result<IrisTemplate, TemplateError> {
        let (fields, _) = serde_json_core::from_slice::<OpenIrisJson<'_>>(json)
            .map_err(|_| TemplateError::Json)?;
        let code = decode_bits(fields.iris_codes, "iris_codes")?;
        let mask = decode_bits(fields.mask_codes, "mask_codes")?;
        IrisTemplate::new(code, mask, fields.iris_code_version, policy)
    }

    /// Writes the open-iris JSON serialisation into `out`, as Python's `json.dumps` writes the
    /// dict of `IrisTemplate.serialize()`; returns the bytes written.
    ///
    /// # Errors
    /// [`TemplateError::BufferTooSmall`] if `out` is shorter than [`IrisTemplate::json_len`].
    pub fn to_open_iris_json(&self, out: &mut [u8]) -> Result<usize, TemplateError> {
        let needed = self.json_len();
        if out.len() < needed {
            return Err(TemplateError::BufferTooSmall { needed });
        }
        let mut packed = [0u8; PACKED_BYTES];
        let mut pos = 0;
        let mut put = |out: &mut [u8], s: &[u8]| {
            out[pos..pos + s.len()].copy_from_slice(s);
            pos += s.len();
        };
        put(out, b"{\"iris_codes\": \"");
        self.code.to_packed(&mut packed);
        let mut b64 = [0u8; BASE64_CHARS];
        encode_b64(&packed, &mut b64);
        put(out, &b64);
        put(out, b"\", \"mask_codes\": \"");
        self.mask.to_packed(&mut packed);
        encode_b64(&packed, &mut b64);
        put(out, &b64);
        put(out, b"\", \"iris_code_version\": \"");
        put(out, self.version.as_bytes());
        put(out, b"\"}");
        packed.zeroize();
        b64.zeroize();
        Ok(pos)
    }

    /// Length of [`IrisTemplate::to_open_iris_json`]'s output.
    pub fn json_len(&self) -> usize {
        // {"iris_codes": "…", "mask_codes": "…", "iris_code_version": "…"}
        16 + BASE64_CHARS + 18 + BASE64_CHARS + 25 + self.version.len() + 2
    }

    /// The code bits.
    pub fn code(&self) -> &IrisBits {
        &self.code
    }

    /// The mask bits (1 = usable).
    pub fn mask(&self) -> &IrisBits {
        &self.mask
    }

    /// The open-iris `iris_code_version` string.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Number of usable bits.
    pub fn usable_bits(&self) -> usize {
        self.mask.count_ones()
    }

    /// Code and mask rotated by `k` columns, as `numpy.roll(x, k, axis=1)` on the
    /// (16, 200, 2, 2) array. Rotation preserves validity.
    pub fn rotated(&self, k: i32) -> IrisTemplate {
        IrisTemplate {
            code: self.code.rotated(k),
            mask: self.mask.rotated(k),
            version: self.version.clone(),
        }
    }
}

/// A uniformly random code whose mask hides each (real, imaginary) pair independently with
/// probability `masked_fraction`. For tests and synthetic data, never for enrolment.
pub fn random<R: rand_core::RngCore + rand_core::CryptoRng>(
    rng: &mut R,
    masked_fraction: f64,
) -> IrisTemplate {
    let mut code = IrisBits::zero();
    for w in code.0.iter_mut() {
        *w = rng.next_u64();
    }
    let mut mask = IrisBits::ones();
    let threshold = (masked_fraction.clamp(0.0, 1.0) * u32::MAX as f64) as u32;
    for pair in (0..CODE_BITS).step_by(2) {
        if rng.next_u32() < threshold {
            mask.set(pair, false);
            mask.set(pair + 1, false);
        }
    }
    IrisTemplate {
        code,
        mask,
        version: heapless::String::try_from(DEFAULT_VERSION).unwrap_or_default(),
    }
}

fn encode_b64(packed: &[u8; PACKED_BYTES], out: &mut [u8; BASE64_CHARS]) {
    // The output length is exact, so this cannot fail.
    let written = BASE64.encode_slice(packed, out).unwrap_or(0);
    debug_assert_eq!(written, BASE64_CHARS);
}

fn decode_bits(b64: &str, field: &'static str) -> Result<IrisBits, TemplateError> {
    // One spare group so an over-long input is reported by length, not as a buffer error.
    let mut buf = [0u8; PACKED_BYTES + 3];
    if b64.len() > BASE64_CHARS + 4 {
        return Err(TemplateError::Length {
            field,
            expected: PACKED_BYTES,
            actual: b64.len() / 4 * 3,
        });
    }
    let n = BASE64
        .decode_slice(b64.as_bytes(), &mut buf)
        .map_err(|_| TemplateError::Base64 { field })?;
    let bits = IrisBits::try_from(&buf[..n]).map_err(|_| TemplateError::Length {
        field,
        expected: PACKED_BYTES,
        actual: n,
    });
    buf.zeroize();
    bits
}

#[cfg(test)]
mod tests;

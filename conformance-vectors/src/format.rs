//! The file format shared by every family: a versioned header, then vectors with an id, a
//! comment, closed-set flags and a family-specific case. Byte strings are lowercase hex;
//! arrays of u16 are the hex of their little-endian bytes (the share serialisation of the
//! payloads), arrays of u32 likewise with 4 bytes each; bit vectors are strings of `0` and
//! `1`; arrays too large to keep in full are [`Digest16`]s.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

use crate::Family;

/// The `format` field of every vector file.
pub const FORMAT: &str = "ocelli-conformance-vectors";
/// The `format_version` this crate reads and writes. A reader refuses any other.
pub const FORMAT_VERSION: u32 = 1;

/// One vector file: one family.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorFile<C> {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`FORMAT_VERSION`].
    pub format_version: u32,
    /// The family; must match the file name.
    pub family: Family,
    /// What the family checks, in a sentence or two.
    pub description: String,
    /// The command that regenerates the file byte for byte.
    pub generator: String,
    /// The vectors, ids increasing from 1.
    pub vectors: Vec<Vector<C>>,
}

/// One known-answer vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vector<C> {
    /// Unique within the file, increasing from 1.
    pub id: u32,
    /// What the vector exercises.
    pub comment: String,
    /// Properties of the vector, from a closed set.
    pub flags: Vec<Flag>,
    /// The inputs and expected outputs.
    pub case: C,
}

impl<C> Vector<C> {
    /// Vectors from `(comment, flags, case)` triples, with ids 1, 2, 3, ... in order.
    pub fn numbered(cases: Vec<(String, Vec<Flag>, C)>) -> Vec<Vector<C>> {
        cases
            .into_iter()
            .zip(1u32..)
            .map(|((comment, flags, case), id)| Vector {
                id,
                comment,
                flags,
                case,
            })
            .collect()
    }
}

/// Per-vector flags. The set is closed: a file with any other flag does not load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Flag {
    /// Input taken from the open-iris fixtures (`sdk-orb/testdata/open-iris/`).
    OpenIrisFixture,
    /// Input drawn from a seeded RNG.
    Synthetic,
    /// Input built by hand to hit an edge.
    EdgeCase,
    /// The input bytes are exactly what the serialiser writes back (checked).
    CanonicalInput,
    /// The input is accepted but re-serialises differently (checked).
    NonCanonicalInput,
    /// The input must be rejected.
    Invalid,
    /// The pair shares no usable bit.
    NoCommonBits,
    /// The pair matches at the default threshold.
    Match,
    /// An element that is not a unit (no inverse).
    NonUnit,
    /// Share randomness is zero: every party gets the encoded value.
    ZeroRandomness,
    /// A rotation outside -15..=15 (taken mod 200 columns).
    RotationOutOfRange,
    /// Validly signed by the orb, but a payload is bad.
    ValidSignature,
    /// Bytes changed after signing.
    Tampered,
    /// Built around caller-chosen payload plaintexts (`envelope::hazmat_seal_plaintexts`).
    HazmatSealed,
    /// A request matches an earlier request of its batch (checked).
    IntraBatch,
}

/// Bytes as a lowercase hex string.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Hex(pub Vec<u8>);

impl core::fmt::Debug for Hex {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Hex({} bytes)", self.0.len())
    }
}

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Hex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Hex, D::Error> {
        let s = String::deserialize(d)?;
        if s.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(serde::de::Error::custom("hex must be lowercase"));
        }
        hex::decode(&s).map(Hex).map_err(serde::de::Error::custom)
    }
}

impl Hex {
    /// Exactly `N` bytes.
    ///
    /// # Errors
    /// A description naming `what` if the length differs.
    pub fn array<const N: usize>(&self, what: &str) -> Result<[u8; N], String> {
        self.0
            .as_slice()
            .try_into()
            .map_err(|_| format!("{what}: {} bytes, expected {N}", self.0.len()))
    }
}

/// u16 values as the hex of their little-endian bytes.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct HexU16(pub Vec<u16>);

impl core::fmt::Debug for HexU16 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.0.len() <= 16 {
            write!(f, "{:?}", self.0)
        } else {
            write!(f, "HexU16({} values)", self.0.len())
        }
    }
}

/// Little-endian bytes of `values`.
pub fn le_bytes(values: &[u16]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

impl Serialize for HexU16 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(le_bytes(&self.0)))
    }
}

impl<'de> Deserialize<'de> for HexU16 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<HexU16, D::Error> {
        let bytes = Hex::deserialize(d)?.0;
        if bytes.len() % 2 != 0 {
            return Err(serde::de::Error::custom(
                "odd number of bytes for u16 values",
            ));
        }
        Ok(HexU16(
            bytes
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect(),
        ))
    }
}

impl HexU16 {
    /// Exactly `N` values.
    ///
    /// # Errors
    /// A description naming `what` if the length differs.
    pub fn array<const N: usize>(&self, what: &str) -> Result<[u16; N], String> {
        self.0
            .as_slice()
            .try_into()
            .map_err(|_| format!("{what}: {} values, expected {N}", self.0.len()))
    }
}

/// u32 values as the hex of their little-endian bytes (shares over Z_{2^32}).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct HexU32(pub Vec<u32>);

impl core::fmt::Debug for HexU32 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.0.len() <= 16 {
            write!(f, "{:?}", self.0)
        } else {
            write!(f, "HexU32({} values)", self.0.len())
        }
    }
}

impl Serialize for HexU32 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = self.0.iter().flat_map(|v| v.to_le_bytes()).collect();
        s.serialize_str(&hex::encode(bytes))
    }
}

impl<'de> Deserialize<'de> for HexU32 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<HexU32, D::Error> {
        let bytes = Hex::deserialize(d)?.0;
        if bytes.len() % 4 != 0 {
            return Err(serde::de::Error::custom(
                "byte count not a multiple of 4 for u32 values",
            ));
        }
        Ok(HexU32(
            bytes
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        ))
    }
}

/// Bits as a string of `0` and `1`, element 0 first.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Bits(pub Vec<bool>);

impl core::fmt::Debug for Bits {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let s: String = self.0.iter().map(|&b| if b { '1' } else { '0' }).collect();
        write!(f, "\"{s}\"")
    }
}

impl Serialize for Bits {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let text: String = self.0.iter().map(|&b| if b { '1' } else { '0' }).collect();
        s.serialize_str(&text)
    }
}

impl<'de> Deserialize<'de> for Bits {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Bits, D::Error> {
        String::deserialize(d)?
            .chars()
            .map(|c| match c {
                '0' => Ok(false),
                '1' => Ok(true),
                other => Err(serde::de::Error::custom(format!(
                    "bit string holds {other:?}, only 0 and 1 are allowed"
                ))),
            })
            .collect::<Result<Vec<bool>, D::Error>>()
            .map(Bits)
    }
}

/// Values shown as a count, the SHA-256 of their little-endian bytes and the first
/// [`Digest16::HEAD`] values: for 6,400- and 12,800-coefficient outputs whose inputs are in
/// the vector (or derivable from a stated seed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Digest16 {
    /// Number of u16 values.
    pub len: usize,
    /// SHA-256 of the little-endian bytes.
    pub sha256: Hex,
    /// The first values (at most [`Digest16::HEAD`]), to localise a mismatch.
    pub head: HexU16,
}

impl Digest16 {
    /// Values kept in `head`.
    pub const HEAD: usize = 16;

    /// The digest of `values`.
    pub fn of(values: &[u16]) -> Digest16 {
        Digest16 {
            len: values.len(),
            sha256: Hex(Sha256::digest(le_bytes(values)).to_vec()),
            head: HexU16(values[..values.len().min(Self::HEAD)].to_vec()),
        }
    }

    /// Checks `values` against the digest.
    ///
    /// # Errors
    /// Which part differs, naming `what`.
    pub fn check(&self, values: &[u16], what: &str) -> Result<(), String> {
        let got = Digest16::of(values);
        if got.len != self.len {
            return Err(format!("{what}: {} values, expected {}", got.len, self.len));
        }
        if got.head != self.head {
            return Err(format!(
                "{what}: first values {:?}, expected {:?}",
                got.head.0, self.head.0
            ));
        }
        if got.sha256 != self.sha256 {
            return Err(format!("{what}: SHA-256 differs"));
        }
        Ok(())
    }
}

/// Compares a computed value with the expected one.
///
/// # Errors
/// A description naming `what` with both values.
pub fn expect_eq<T: PartialEq + core::fmt::Debug + ?Sized>(
    what: &str,
    got: &T,
    expected: &T,
) -> Result<(), String> {
    if got == expected {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, expected {expected:?}"))
    }
}

/// Compares computed bytes with expected bytes, reporting the first differing offset.
///
/// # Errors
/// A description naming `what`.
pub fn expect_bytes(what: &str, got: &[u8], expected: &[u8]) -> Result<(), String> {
    if got == expected {
        return Ok(());
    }
    let at = got
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(expected.len()));
    Err(format!(
        "{what}: {} bytes, expected {}; first difference at byte {at}",
        got.len(),
        expected.len()
    ))
}

//! C interface to sdk-orb for orb firmware written in C: parse and validate open-iris
//! templates, build keys, size and seal envelopes. No allocator: every output goes into
//! caller memory. Randomness comes from a caller callback (`OcelliRngFn`) that must be a
//! cryptographically secure generator (the RNG contract of `docs/sdk-integration.md`).
//!
//! The header `include/ocelli_sdk.h` is generated from this file by cbindgen; `tests/header.rs`
//! fails when it is stale. Every pointer argument must be valid for the documented size and
//! not alias an output; a null pointer is reported as `OCELLI_STATUS_NULL_POINTER`.
#![no_std]
#![deny(missing_docs, clippy::unwrap_used)]

#[cfg(feature = "std")]
extern crate std;

use core::ffi::c_void;

#[cfg(feature = "test-rng")]
use rand_chacha::ChaCha20Rng;
#[cfg(feature = "test-rng")]
use rand_core::SeedableRng as _;
use rand_core::{CryptoRng, RngCore};
use sdk_orb::envelope::v2::{envelope_len_v2, seal_envelope_v2, MAX_ENVELOPE_LEN_V2};
use sdk_orb::envelope::{envelope_len, seal_envelope, EnvelopeError, RequestMeta};
use sdk_orb::keys::{
    NodeHybridPublicKeys, NodeHybridSecretKey, NodePublicKeys, NodeSecretKey, OrbSigningKey,
    HYBRID_PUBLIC_KEY_BYTES, KEY_BYTES,
};
use sdk_orb::template::{IrisBits, MAX_VERSION_LEN, PACKED_BYTES};
use sdk_orb::{IrisTemplate, RequestId, RequestType, TemplateError, TemplatePolicy};
use zeroize::Zeroize as _;

#[cfg(all(feature = "bare-metal", not(feature = "std")))]
mod bare_metal;

/// Bytes of one packed code or mask (`numpy.packbits` of 12,800 bits).
pub const OCELLI_PACKED_BYTES: usize = 1600;
/// Longest `iris_code_version` kept.
pub const OCELLI_MAX_VERSION_LEN: usize = 32;
/// Bytes of a key or a key seed.
pub const OCELLI_KEY_BYTES: usize = 32;
/// Bytes of the node public key bundle (three keys in party order).
pub const OCELLI_NODE_KEYS_BYTES: usize = 96;
/// The largest envelope; a buffer this long fits every request.
pub const OCELLI_MAX_ENVELOPE_LEN: usize = 230_854;
/// Bytes of a node's X-Wing public key (envelope version 2).
pub const OCELLI_HYBRID_PUBLIC_KEY_BYTES: usize = 1216;
/// Bytes of the X-Wing node public key bundle (three keys in party order).
pub const OCELLI_NODE_HYBRID_KEYS_BYTES: usize = 3648;
/// The largest version 2 envelope.
pub const OCELLI_MAX_ENVELOPE_LEN_V2: usize = 157_330;

// The header needs literals; these tie them to the SDK's definitions.
const _: () = assert!(OCELLI_PACKED_BYTES == PACKED_BYTES);
const _: () = assert!(OCELLI_MAX_VERSION_LEN == MAX_VERSION_LEN);
const _: () = assert!(OCELLI_KEY_BYTES == KEY_BYTES);
const _: () = assert!(OCELLI_NODE_KEYS_BYTES == NodePublicKeys::BYTES);
const _: () = assert!(OCELLI_MAX_ENVELOPE_LEN == sdk_orb::envelope::MAX_ENVELOPE_LEN);
const _: () = assert!(OCELLI_HYBRID_PUBLIC_KEY_BYTES == HYBRID_PUBLIC_KEY_BYTES);
const _: () = assert!(OCELLI_NODE_HYBRID_KEYS_BYTES == NodeHybridPublicKeys::BYTES);
const _: () = assert!(OCELLI_MAX_ENVELOPE_LEN_V2 == MAX_ENVELOPE_LEN_V2);

/// The result of every call.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OcelliStatus {
    /// Success.
    Ok = 0,
    /// A required pointer was null (caller misuse).
    NullPointer = 1,
    /// The output buffer is too small (caller misuse); `ocelli_envelope_len` says how long.
    BufferTooSmall = 2,
    /// Not an open-iris JSON object with string fields iris_codes, mask_codes, iris_code_version.
    TemplateJson = 3,
    /// A template field is not valid standard base64.
    TemplateBase64 = 4,
    /// A template field does not decode to 1,600 bytes.
    TemplateLength = 5,
    /// `iris_code_version` is longer than `OCELLI_MAX_VERSION_LEN`.
    TemplateVersionTooLong = 6,
    /// The real and imaginary mask bits of one filter response differ.
    TemplateMaskPartsDiffer = 7,
    /// Fewer usable mask bits than the caller's minimum.
    TemplateTooFewUsableBits = 8,
    /// A serial id is set for a request type without a target, or missing for one with.
    SerialId = 9,
    /// The request type is not 1 to 5.
    RequestType = 10,
    /// A key was rejected (a node public key of small order, or a bundle that does not parse).
    InvalidKey = 11,
    /// HPKE refused to seal to a node key.
    Encryption = 12,
    /// The RNG callback reported failure; the output buffer has been zeroed.
    Rng = 13,
    /// Any other SDK error.
    Other = 14,
}

/// A validated template as packed bits: written by `ocelli_template_parse`, read by
/// `ocelli_seal_envelope`. Biometric data: clear it with `ocelli_template_wipe` after use.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OcelliTemplate {
    /// Code bits, `numpy.packbits` order.
    pub code: [u8; OCELLI_PACKED_BYTES],
    /// Mask bits (1 = usable), `numpy.packbits` order.
    pub mask: [u8; OCELLI_PACKED_BYTES],
    /// The `iris_code_version` string, not NUL-terminated.
    pub version: [u8; OCELLI_MAX_VERSION_LEN],
    /// Bytes of `version` in use.
    pub version_len: u8,
}

/// What the orb asks the nodes to do, besides the irises.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OcelliRequest {
    /// Fresh random id (16 bytes from the RNG).
    pub request_id: [u8; 16],
    /// Capture time, milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// Target serial id for deletion, reauth and reset; 0 otherwise.
    pub serial_id: u64,
    /// 1 uniqueness, 2 uniqueness check, 3 deletion, 4 reauth, 5 reset.
    pub request_type: u8,
    /// Non-zero: one matching eye suffices.
    pub or_policy: u8,
}

impl core::fmt::Debug for OcelliTemplate {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OcelliTemplate").finish_non_exhaustive()
    }
}

/// The three nodes' X25519 public keys in party order, validated.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OcelliNodePublicKeys {
    /// Three 32-byte keys concatenated.
    pub bytes: [u8; OCELLI_NODE_KEYS_BYTES],
}

/// The three nodes' X-Wing public keys in party order, validated (envelope version 2).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OcelliNodeHybridPublicKeys {
    /// Three 1,216-byte keys concatenated.
    pub bytes: [u8; OCELLI_NODE_HYBRID_KEYS_BYTES],
}

/// The orb's Ed25519 signing key as its 32-byte seed. Secret: clear it after use.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OcelliOrbSigningKey {
    /// The seed.
    pub seed: [u8; OCELLI_KEY_BYTES],
}

impl core::fmt::Debug for OcelliOrbSigningKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OcelliOrbSigningKey")
            .finish_non_exhaustive()
    }
}

/// The caller's RNG: fill `out[0..len]` with cryptographically secure random bytes and return
/// 0, or return non-zero on failure.
pub type OcelliRngFn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, out: *mut u8, len: usize) -> i32>;

/// A deterministic generator for tests and known-answer checks, never for enrolment: the
/// ChaCha20 stream (`rand_chacha::ChaCha20Rng`) of `seed`, read from 32-bit word `word_pos`
/// on. `ocelli_test_rng_fill` has the `OcelliRngFn` signature; a seal through it equals a
/// seal from Rust with `ChaCha20Rng::from_seed(seed)`.
/// Only with the `test-rng` feature, so production firmware cannot link it.
#[cfg(feature = "test-rng")]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OcelliTestRng {
    /// The ChaCha20 key.
    pub seed: [u8; 32],
    /// 32-bit words of the stream consumed so far.
    pub word_pos: u64,
}

fn template_status(e: TemplateError) -> OcelliStatus {
    match e {
        TemplateError::Json => OcelliStatus::TemplateJson,
        TemplateError::Base64 { .. } => OcelliStatus::TemplateBase64,
        TemplateError::Length { .. } => OcelliStatus::TemplateLength,
        TemplateError::VersionTooLong { .. } => OcelliStatus::TemplateVersionTooLong,
        TemplateError::MaskPartsDiffer { .. } => OcelliStatus::TemplateMaskPartsDiffer,
        TemplateError::TooFewUsableBits { .. } => OcelliStatus::TemplateTooFewUsableBits,
        TemplateError::BufferTooSmall { .. } => OcelliStatus::BufferTooSmall,
        _ => OcelliStatus::Other,
    }
}

fn envelope_status(e: EnvelopeError) -> OcelliStatus {
    match e {
        EnvelopeError::SerialId => OcelliStatus::SerialId,
        EnvelopeError::BufferTooSmall { .. } => OcelliStatus::BufferTooSmall,
        EnvelopeError::Encryption => OcelliStatus::Encryption,
        _ => OcelliStatus::Other,
    }
}

fn request_meta(r: &OcelliRequest) -> Result<RequestMeta, OcelliStatus> {
    Ok(RequestMeta {
        request_id: RequestId(r.request_id),
        request_type: RequestType::from_wire(u64::from(r.request_type))
            .ok_or(OcelliStatus::RequestType)?,
        timestamp_ms: r.timestamp_ms,
        serial_id: r.serial_id,
        or_policy: r.or_policy != 0,
    })
}

fn iris_template(t: &OcelliTemplate) -> Result<IrisTemplate, OcelliStatus> {
    let version = t
        .version
        .get(..usize::from(t.version_len))
        .and_then(|v| core::str::from_utf8(v).ok())
        .ok_or(OcelliStatus::TemplateVersionTooLong)?;
    // The usable-bits minimum was applied when the template was parsed.
    IrisTemplate::new(
        IrisBits::from_packed(&t.code),
        IrisBits::from_packed(&t.mask),
        version,
        &TemplatePolicy { min_usable_bits: 0 },
    )
    .map_err(template_status)
}

/// Parses an open-iris JSON template (`json_len` bytes at `json`), validates it (mask parts
/// agree, at least `min_usable_bits` usable bits of 12,800) and writes it to `out`.
///
/// # Safety
/// `json` points to `json_len` readable bytes; `out` points to a writable `OcelliTemplate`.
#[no_mangle]
pub unsafe extern "C" fn ocelli_template_parse(
    json: *const u8,
    json_len: usize,
    min_usable_bits: u32,
    out: *mut OcelliTemplate,
) -> OcelliStatus {
    if json.is_null() || out.is_null() {
        return OcelliStatus::NullPointer;
    }
    // SAFETY: non-null, and the caller guarantees `json_len` readable bytes at `json`.
    let json = unsafe { core::slice::from_raw_parts(json, json_len) };
    // SAFETY: non-null, and the caller guarantees a writable, exclusive OcelliTemplate.
    let out = unsafe { &mut *out };
    let policy = TemplatePolicy {
        min_usable_bits: min_usable_bits as usize,
    };
    match IrisTemplate::from_open_iris_json(json, &policy) {
        Ok(t) => {
            t.code().to_packed(&mut out.code);
            t.mask().to_packed(&mut out.mask);
            let v = t.version().as_bytes();
            out.version = [0; OCELLI_MAX_VERSION_LEN];
            out.version[..v.len()].copy_from_slice(v);
            // At most OCELLI_MAX_VERSION_LEN (32) bytes, so it fits a u8.
            out.version_len = v.len() as u8;
            OcelliStatus::Ok
        }
        Err(e) => template_status(e),
    }
}

/// Zeroes a template.
///
/// # Safety
/// `template` is null or points to a writable `OcelliTemplate`.
#[no_mangle]
pub unsafe extern "C" fn ocelli_template_wipe(template: *mut OcelliTemplate) {
    // SAFETY: the caller guarantees null or a writable, exclusive OcelliTemplate.
    if let Some(t) = unsafe { template.as_mut() } {
        t.code.zeroize();
        t.mask.zeroize();
        t.version.zeroize();
        t.version_len = 0;
    }
}

/// Bytes of the envelope for `request`; 0 if `request` is null or its type is not 1 to 5.
///
/// # Safety
/// `request` is null or points to a readable `OcelliRequest`.
#[no_mangle]
pub unsafe extern "C" fn ocelli_envelope_len(request: *const OcelliRequest) -> usize {
    // SAFETY: the caller guarantees null or a readable OcelliRequest.
    match unsafe { request.as_ref() }.map(request_meta) {
        Some(Ok(meta)) => envelope_len(&meta),
        _ => 0,
    }
}

/// Bytes of the version 2 envelope for `request`; 0 if `request` is null or its type is not
/// 1 to 5.
///
/// # Safety
/// `request` is null or points to a readable `OcelliRequest`.
#[no_mangle]
pub unsafe extern "C" fn ocelli_envelope_len_v2(request: *const OcelliRequest) -> usize {
    // SAFETY: the caller guarantees null or a readable OcelliRequest.
    match unsafe { request.as_ref() }.map(request_meta) {
        Some(Ok(meta)) => envelope_len_v2(&meta),
        _ => 0,
    }
}

/// Validates the X-Wing node key bundle (`OCELLI_NODE_HYBRID_KEYS_BYTES` bytes at `bytes`)
/// into `out`.
///
/// # Safety
/// `bytes` points to 3,648 readable bytes; `out` to a writable `OcelliNodeHybridPublicKeys`.
#[no_mangle]
pub unsafe extern "C" fn ocelli_node_hybrid_public_keys_from_bytes(
    bytes: *const u8,
    out: *mut OcelliNodeHybridPublicKeys,
) -> OcelliStatus {
    // SAFETY: forwarded under the same contract.
    unsafe {
        validated_copy(
            bytes,
            out,
            |b| NodeHybridPublicKeys::from_bytes(b).is_ok(),
            |bytes| OcelliNodeHybridPublicKeys { bytes },
        )
    }
}

/// Writes the X-Wing public key (1,216 bytes) of a node's 32-byte X-Wing seed: for
/// provisioning tools and tests; orbs receive the bundle.
///
/// # Safety
/// `seed` points to 32 readable bytes; `public_out` to 1,216 writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ocelli_node_hybrid_public_key_from_seed(
    seed: *const u8,
    public_out: *mut u8,
) -> OcelliStatus {
    // SAFETY: forwarded under the same contract.
    unsafe {
        derived_public(seed, public_out, |s| {
            Some(NodeHybridSecretKey::from_seed(s).public_key().to_bytes())
        })
    }
}

/// Validates the node key bundle (`OCELLI_NODE_KEYS_BYTES` bytes at `bytes`) into `out`.
///
/// # Safety
/// `bytes` points to 96 readable bytes; `out` to a writable `OcelliNodePublicKeys`.
#[no_mangle]
pub unsafe extern "C" fn ocelli_node_public_keys_from_bytes(
    bytes: *const u8,
    out: *mut OcelliNodePublicKeys,
) -> OcelliStatus {
    // SAFETY: forwarded under the same contract.
    unsafe {
        validated_copy(
            bytes,
            out,
            |b| NodePublicKeys::from_bytes(b).is_ok(),
            |bytes| OcelliNodePublicKeys { bytes },
        )
    }
}

/// Writes the X25519 public key of a node secret key (32 bytes each): for provisioning tools
/// and tests; orbs receive the bundle.
///
/// # Safety
/// `secret` points to 32 readable bytes; `public_out` to 32 writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ocelli_node_public_key_from_secret(
    secret: *const u8,
    public_out: *mut u8,
) -> OcelliStatus {
    // SAFETY: forwarded under the same contract.
    unsafe {
        derived_public(secret, public_out, |s| {
            NodeSecretKey::from_bytes(s)
                .ok()
                .map(|k| k.public_key().to_bytes())
        })
    }
}

/// Writes `wrap(bytes)` to `*out` where `valid` accepts the `N` bytes at `bytes`.
///
/// # Safety
/// `bytes` is null or points to `N` readable bytes; `out` is null or points to a writable `T`.
unsafe fn validated_copy<const N: usize, T>(
    bytes: *const u8,
    out: *mut T,
    valid: impl FnOnce(&[u8; N]) -> bool,
    wrap: impl FnOnce([u8; N]) -> T,
) -> OcelliStatus {
    if bytes.is_null() || out.is_null() {
        return OcelliStatus::NullPointer;
    }
    // SAFETY: non-null, and the caller guarantees N readable bytes.
    let bytes = unsafe { &*bytes.cast::<[u8; N]>() };
    if !valid(bytes) {
        return OcelliStatus::InvalidKey;
    }
    // SAFETY: non-null, and the caller guarantees a writable T.
    unsafe { out.write(wrap(*bytes)) };
    OcelliStatus::Ok
}

/// Writes the `P`-byte public key `derive` makes of the `S` secret bytes at `secret`.
///
/// # Safety
/// `secret` is null or points to `S` readable bytes; `public_out` is null or points to `P`
/// writable bytes.
unsafe fn derived_public<const S: usize, const P: usize>(
    secret: *const u8,
    public_out: *mut u8,
    derive: impl FnOnce(&[u8; S]) -> Option<[u8; P]>,
) -> OcelliStatus {
    if secret.is_null() || public_out.is_null() {
        return OcelliStatus::NullPointer;
    }
    // SAFETY: non-null, and the caller guarantees S readable bytes.
    let Some(public) = derive(unsafe { &*secret.cast::<[u8; S]>() }) else {
        return OcelliStatus::InvalidKey;
    };
    // SAFETY: non-null, and the caller guarantees P writable bytes.
    unsafe { public_out.cast::<[u8; P]>().write(public) };
    OcelliStatus::Ok
}

/// The orb signing key for a 32-byte seed (every seed is valid).
///
/// # Safety
/// `seed` points to 32 readable bytes; `out` to a writable `OcelliOrbSigningKey`.
#[no_mangle]
pub unsafe extern "C" fn ocelli_orb_signing_key_from_seed(
    seed: *const u8,
    out: *mut OcelliOrbSigningKey,
) -> OcelliStatus {
    if seed.is_null() || out.is_null() {
        return OcelliStatus::NullPointer;
    }
    // SAFETY: non-null, and the caller guarantees 32 readable bytes.
    let seed = unsafe { *seed.cast::<[u8; OCELLI_KEY_BYTES]>() };
    // SAFETY: non-null, and the caller guarantees a writable OcelliOrbSigningKey.
    unsafe { out.write(OcelliOrbSigningKey { seed }) };
    OcelliStatus::Ok
}

/// Writes the orb's Ed25519 public key (32 bytes), as carried in every envelope.
///
/// # Safety
/// `key` points to a readable `OcelliOrbSigningKey`; `public_out` to 32 writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ocelli_orb_public_key(
    key: *const OcelliOrbSigningKey,
    public_out: *mut u8,
) -> OcelliStatus {
    if key.is_null() || public_out.is_null() {
        return OcelliStatus::NullPointer;
    }
    // SAFETY: non-null, and the caller guarantees a readable OcelliOrbSigningKey.
    let orb = OrbSigningKey::from_bytes(unsafe { &(*key).seed });
    // SAFETY: non-null, and the caller guarantees 32 writable bytes.
    unsafe {
        public_out
            .cast::<[u8; OCELLI_KEY_BYTES]>()
            .write(orb.verifying_key().to_bytes())
    };
    OcelliStatus::Ok
}

/// The caller's callback as an RNG; a failed call is remembered and its bytes zeroed, and
/// the seal that saw it is discarded.
struct CallbackRng {
    fill: unsafe extern "C" fn(*mut c_void, *mut u8, usize) -> i32,
    ctx: *mut c_void,
    failed: bool,
}

impl RngCore for CallbackRng {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.fill_bytes(&mut b);
        u32::from_le_bytes(b)
    }

    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.fill_bytes(&mut b);
        u64::from_le_bytes(b)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        // SAFETY: `dest` is valid for `dest.len()` writable bytes; `ctx` is passed through as
        // the caller gave it, under the caller's contract for its own callback.
        let rc = unsafe { (self.fill)(self.ctx, dest.as_mut_ptr(), dest.len()) };
        if rc != 0 {
            self.failed = true;
            dest.fill(0);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

// The caller's contract for `OcelliRngFn`: a cryptographically secure generator.
impl CryptoRng for CallbackRng {}

/// Seals a person (`left`, `right`) for the three nodes and signs the envelope, into
/// `out[0..out_len]`; the length written goes to `*written` (`ocelli_envelope_len(request)`,
/// at most `OCELLI_MAX_ENVELOPE_LEN`). Randomness comes from `rng(rng_ctx, ...)`. On any
/// failure nothing sealed is left in `out`. Uses about 5 KB of stack.
///
/// # Safety
/// Every pointer is valid for its type (`out` for `out_len` writable bytes) and `out` does not
/// overlap the inputs; `rng` honours the `OcelliRngFn` contract for `rng_ctx`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ocelli_seal_envelope(
    rng: OcelliRngFn,
    rng_ctx: *mut c_void,
    request: *const OcelliRequest,
    left: *const OcelliTemplate,
    right: *const OcelliTemplate,
    nodes: *const OcelliNodePublicKeys,
    orb: *const OcelliOrbSigningKey,
    out: *mut u8,
    out_len: usize,
    written: *mut usize,
) -> OcelliStatus {
    // SAFETY: forwarded under the same contract.
    unsafe {
        seal_extern(
            rng, rng_ctx, request, left, right, nodes, orb, out, out_len, written,
        )
    }
}

/// Seals a person as [`ocelli_seal_envelope`] does, as envelope version 2: hybrid
/// post-quantum HPKE (X-Wing) to `nodes`, one party's shares sent as a seed. The length
/// written is `ocelli_envelope_len_v2(request)`, at most `OCELLI_MAX_ENVELOPE_LEN_V2`.
///
/// # Safety
/// As [`ocelli_seal_envelope`], with `nodes` a readable `OcelliNodeHybridPublicKeys`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ocelli_seal_envelope_v2(
    rng: OcelliRngFn,
    rng_ctx: *mut c_void,
    request: *const OcelliRequest,
    left: *const OcelliTemplate,
    right: *const OcelliTemplate,
    nodes: *const OcelliNodeHybridPublicKeys,
    orb: *const OcelliOrbSigningKey,
    out: *mut u8,
    out_len: usize,
    written: *mut usize,
) -> OcelliStatus {
    // SAFETY: forwarded under the same contract.
    unsafe {
        seal_extern(
            rng, rng_ctx, request, left, right, nodes, orb, out, out_len, written,
        )
    }
}

/// The pointer checks and output handling of both sealers.
///
/// # Safety
/// As [`ocelli_seal_envelope`].
#[allow(clippy::too_many_arguments)]
unsafe fn seal_extern<K: NodeKeys>(
    rng: OcelliRngFn,
    rng_ctx: *mut c_void,
    request: *const OcelliRequest,
    left: *const OcelliTemplate,
    right: *const OcelliTemplate,
    nodes: *const K,
    orb: *const OcelliOrbSigningKey,
    out: *mut u8,
    out_len: usize,
    written: *mut usize,
) -> OcelliStatus {
    let Some(fill) = rng else {
        return OcelliStatus::NullPointer;
    };
    if [
        request.cast::<u8>(),
        left.cast(),
        right.cast(),
        nodes.cast(),
        orb.cast(),
        out.cast_const(),
    ]
    .iter()
    .any(|p| p.is_null())
        || written.is_null()
    {
        return OcelliStatus::NullPointer;
    }
    // SAFETY: each pointer is non-null, and the caller guarantees it points to a readable
    // value of its type that no output overlaps.
    let (request, left, right, nodes, orb) =
        unsafe { (&*request, &*left, &*right, &*nodes, &*orb) };
    // SAFETY: non-null, and the caller guarantees `out_len` writable bytes, overlapping no
    // input.
    let out = unsafe { core::slice::from_raw_parts_mut(out, out_len) };
    let result = seal(fill, rng_ctx, request, left, right, nodes, orb, out);
    let n = match result {
        Ok(n) => n,
        Err(_) => {
            out.zeroize();
            0
        }
    };
    // SAFETY: non-null, and the caller guarantees a writable size_t.
    unsafe { written.write(n) };
    match result {
        Ok(_) => OcelliStatus::Ok,
        Err(status) => status,
    }
}

/// The node keys of one envelope version, and that version's sealer.
trait NodeKeys {
    fn seal(
        &self,
        rng: &mut CallbackRng,
        meta: &RequestMeta,
        eyes: [&IrisTemplate; 2],
        orb: &OrbSigningKey,
        out: &mut [u8],
    ) -> Result<usize, OcelliStatus>;
}

impl NodeKeys for OcelliNodePublicKeys {
    fn seal(
        &self,
        rng: &mut CallbackRng,
        meta: &RequestMeta,
        [left, right]: [&IrisTemplate; 2],
        orb: &OrbSigningKey,
        out: &mut [u8],
    ) -> Result<usize, OcelliStatus> {
        let nodes =
            NodePublicKeys::from_bytes(&self.bytes).map_err(|_| OcelliStatus::InvalidKey)?;
        seal_envelope(rng, meta, left, right, &nodes, orb, out).map_err(envelope_status)
    }
}

impl NodeKeys for OcelliNodeHybridPublicKeys {
    fn seal(
        &self,
        rng: &mut CallbackRng,
        meta: &RequestMeta,
        [left, right]: [&IrisTemplate; 2],
        orb: &OrbSigningKey,
        out: &mut [u8],
    ) -> Result<usize, OcelliStatus> {
        let nodes =
            NodeHybridPublicKeys::from_bytes(&self.bytes).map_err(|_| OcelliStatus::InvalidKey)?;
        seal_envelope_v2(rng, meta, left, right, &nodes, orb, out).map_err(envelope_status)
    }
}

#[allow(clippy::too_many_arguments)]
fn seal(
    fill: unsafe extern "C" fn(*mut c_void, *mut u8, usize) -> i32,
    ctx: *mut c_void,
    request: &OcelliRequest,
    left: &OcelliTemplate,
    right: &OcelliTemplate,
    nodes: &impl NodeKeys,
    orb: &OcelliOrbSigningKey,
    out: &mut [u8],
) -> Result<usize, OcelliStatus> {
    let meta = request_meta(request)?;
    let (left, right) = (iris_template(left)?, iris_template(right)?);
    let orb = OrbSigningKey::from_bytes(&orb.seed);
    let mut rng = CallbackRng {
        fill,
        ctx,
        failed: false,
    };
    let n = nodes.seal(&mut rng, &meta, [&left, &right], &orb, out)?;
    if rng.failed {
        return Err(OcelliStatus::Rng);
    }
    Ok(n)
}

/// Starts the test generator at the beginning of the stream of `seed` (32 bytes).
///
/// # Safety
/// `rng` points to a writable `OcelliTestRng`; `seed` to 32 readable bytes.
#[cfg(feature = "test-rng")]
#[no_mangle]
pub unsafe extern "C" fn ocelli_test_rng_init(
    rng: *mut OcelliTestRng,
    seed: *const u8,
) -> OcelliStatus {
    if rng.is_null() || seed.is_null() {
        return OcelliStatus::NullPointer;
    }
    // SAFETY: non-null, and the caller guarantees 32 readable bytes.
    let seed = unsafe { *seed.cast::<[u8; 32]>() };
    // SAFETY: non-null, and the caller guarantees a writable OcelliTestRng.
    unsafe { rng.write(OcelliTestRng { seed, word_pos: 0 }) };
    OcelliStatus::Ok
}

/// An `OcelliRngFn` over an `OcelliTestRng` (`ctx`): the next `len` bytes of its stream.
/// Deterministic; for tests and known-answer checks only. Returns 0, or -1 for a null pointer.
///
/// # Safety
/// `ctx` points to a writable `OcelliTestRng`; `out` to `len` writable bytes.
#[cfg(feature = "test-rng")]
#[no_mangle]
pub unsafe extern "C" fn ocelli_test_rng_fill(ctx: *mut c_void, out: *mut u8, len: usize) -> i32 {
    if ctx.is_null() || out.is_null() {
        return -1;
    }
    // SAFETY: non-null, and the caller guarantees `ctx` is a writable OcelliTestRng.
    let state = unsafe { &mut *ctx.cast::<OcelliTestRng>() };
    // SAFETY: non-null, and the caller guarantees `len` writable bytes.
    let out = unsafe { core::slice::from_raw_parts_mut(out, len) };
    let mut rng = ChaCha20Rng::from_seed(state.seed);
    rng.set_word_pos(u128::from(state.word_pos));
    rng.fill_bytes(out);
    // The stream position fits u64 for any realistic use (2^64 words).
    state.word_pos = rng.get_word_pos() as u64;
    0
}

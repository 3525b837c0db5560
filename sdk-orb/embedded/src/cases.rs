//! The vector cases as the firmware sees them; `build.rs` writes the values (`vectors.rs`).

use sdk_orb::envelope::RequestMeta;
use sdk_orb::{RequestId, RequestType};

/// One vector: its family, its id in that family's file, and what to check.
pub struct Vector {
    pub family: &'static str,
    pub id: u32,
    pub case: Case,
}

/// A template as packed code and mask bits (`numpy.packbits`).
pub struct Packed {
    pub code: &'static [u8; 1600],
    pub mask: &'static [u8; 1600],
}

/// The vectors' `Digest16`: length and SHA-256 of the little-endian u16 values.
pub struct Digest16 {
    pub len: usize,
    pub sha256: [u8; 32],
}

pub struct Keys {
    pub node_secret: [[u8; 32]; 3],
    pub node_public: [u8; 96],
    pub orb_seed: [u8; 32],
    pub orb_public: [u8; 32],
}

pub struct Dots {
    pub cd: i32,
    pub md: u32,
    pub distance: Option<f64>,
    pub matches: bool,
}

pub struct MaskedPair {
    pub probe: Packed,
    pub gallery: Packed,
    pub a: u32,
    pub probe_bitvector: Digest16,
    pub unrotated: Dots,
    pub rotated: [Dots; 31],
    pub min_over_rotations: Option<(f64, i32)>,
    pub matches: bool,
    pub flag_match: bool,
    pub flag_no_common_bits: bool,
}

pub struct Seal {
    pub rng_seed: [u8; 32],
    pub request: RequestMeta,
    pub left: Packed,
    pub right: Packed,
    pub keys: Keys,
    pub encapsulated_keys: [[u8; 32]; 3],
    pub digest: [u8; 32],
    pub signature: [u8; 64],
    pub envelope: &'static [u8],
}

/// An `envelope_sealing_v2` vector: the node keys are X-Wing seeds.
pub struct SealV2 {
    pub rng_seed: [u8; 32],
    pub request: RequestMeta,
    pub left: Packed,
    pub right: Packed,
    pub node_seeds: [[u8; 32]; 3],
    pub orb_seed: [u8; 32],
    pub digest: [u8; 32],
    pub envelope: &'static [u8],
}

pub struct EnvelopeBase {
    pub request: RequestMeta,
    pub keys: Keys,
    pub envelope: &'static [u8],
}

/// An `envelope_rejections_v2` base: X-Wing node seeds, and per party the SHA-256 of the shares
/// it opens (left code, left mask, right code, right mask; little-endian u16).
pub struct EnvelopeBaseV2 {
    pub request: RequestMeta,
    pub node_seeds: [[u8; 32]; 3],
    pub envelope: &'static [u8],
    pub opened_sha256: [[u8; 32]; 3],
}

#[derive(Clone, Copy)]
pub enum RingOp {
    Add,
    Sub,
    Mul,
    MulX,
    Inverse,
    FromBasisA,
    ToBasisA,
    ToBasisB,
}

/// Expected errors are the `Debug` text of the SDK's error; stage outcomes are `"accept"` or
/// that text.
pub enum Case {
    TemplateAccept {
        input: &'static [u8],
        min_usable_bits: usize,
        code_mask: &'static [u8; 3200],
        version: &'static str,
        usable_bits: usize,
        serialised: &'static [u8],
        canonical: bool,
        non_canonical: bool,
    },
    TemplateReject {
        input: &'static [u8],
        min_usable_bits: usize,
        error: &'static str,
    },
    MaskedValue {
        code: bool,
        mask: bool,
        value: u16,
    },
    Threshold {
        threshold: f64,
        a: u32,
    },
    MaskedPair(&'static MaskedPair),
    RotationsAll {
        input: &'static [u8; 1600],
        rotations: &'static [u8; 31 * 1600],
    },
    RotationBits {
        input: &'static [u8; 1600],
        k: i32,
        expected: &'static [u8; 1600],
    },
    RotationCoefs {
        template: Packed,
        k: i32,
        code: Digest16,
        mask: Digest16,
    },
    RingConstants {
        s: [[u16; 4]; 4],
        s_inv: [[u16; 4]; 4],
        m: [[u16; 4]; 4],
        evaluation_points: [[u16; 4]; 3],
        lagrange_at_zero: [[u16; 4]; 3],
    },
    Ring {
        op: RingOp,
        a: [u16; 4],
        b: [u16; 4],
        expected: Option<[u16; 4]>,
        non_unit: bool,
    },
    ShamirElement {
        plain: [u16; 4],
        randomness: [u16; 4],
        shares: [[u16; 4]; 3],
        zero_randomness: bool,
    },
    ShamirEye {
        template: Packed,
        rng_seed: [u8; 32],
        plain_code: Digest16,
        plain_mask: Digest16,
        code_shares: [Digest16; 3],
        mask_shares: [Digest16; 3],
    },
    PreprocessElement {
        party: u8,
        share: [u16; 4],
        expected: [u16; 4],
    },
    PreprocessEye {
        template: Packed,
        rng_seed: [u8; 32],
        code: [Digest16; 3],
        mask: [Digest16; 3],
    },
    Seal(&'static Seal),
    SealV2(&'static SealV2),
    EnvelopeBase(&'static EnvelopeBase),
    EnvelopeReject {
        base: u32,
        length: usize,
        patches: &'static [(usize, &'static [u8])],
        party: u8,
        parse: Option<&'static str>,
        signature: Option<&'static str>,
        open: Option<&'static str>,
        valid_signature: bool,
    },
    PayloadReject {
        party: u8,
        request_id: [u8; 16],
        payload: &'static [u8],
        error: &'static str,
    },
    EnvelopeBaseV2(&'static EnvelopeBaseV2),
    EnvelopeRejectV2 {
        base: u32,
        length: usize,
        patches: &'static [(usize, &'static [u8])],
        party: u8,
        parse: Option<&'static str>,
        signature: Option<&'static str>,
        open: Option<&'static str>,
    },
    PayloadRejectV2 {
        party: u8,
        request_id: [u8; 16],
        payload: &'static [u8],
        error: &'static str,
    },
}

include!(concat!(env!("OUT_DIR"), "/vectors.rs"));

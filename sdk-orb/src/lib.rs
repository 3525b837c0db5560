#![doc = include_str!("../README.md")]
//!
//! ## Contract
//!
//! - `#![no_std]`; the core needs no allocator. Functions that produce large outputs write into
//!   caller-provided buffers. The `alloc` feature adds boxed convenience versions.
//! - Every function that samples takes the caller's RNG (`RngCore + CryptoRng`): plug the orb's
//!   hardware RNG in there; seeded RNGs make the conformance vectors reproducible.
//! - Templates and shares are zeroized on drop and never printed by `Debug`.
//! - Every encoding formula of the design lives here once; the node depends on this crate for
//!   the ring, the share layout, the rotations and the query preprocessing.
//!
//! The pipeline, in module order: [`template`] (open-iris codec and validation), [`plaintext`]
//! (masked bitvectors and fractional Hamming distance), [`rotation`], [`ring`] (GR(2^16,4)),
//! [`layout`] (plain bit order to ring coefficients), [`mirror`] (the mirrored capture, on bits and
//! on shares), [`shamir`] (degree-1 sharing for three
//! parties), [`preprocess`] (node-side query preprocessing and the share dot product),
//! [`keys`], [`envelope`] (sealing, signing, opening).
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs, clippy::unwrap_used)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(any(feature = "std", test))]
extern crate std;

pub mod envelope;
pub mod keys;
pub mod layout;
pub mod mirror;
pub mod plaintext;
pub mod preprocess;
pub mod ring;
pub mod rotation;
pub mod shamir;
pub mod template;

mod pb;

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "measure-steps")]
#[doc(hidden)]
pub mod steps;

pub use envelope::{EnvelopeError, RequestMeta};
pub use shamir::{CodeShare, EyeShares, MaskShare, PartyShares};
pub use template::{IrisBits, IrisTemplate, TemplateError, TemplatePolicy};

/// Bits in one iris code (and in one mask): 16 rows x 200 columns x 2 wavelets x 2 parts.
pub const CODE_BITS: usize = 12_800;
/// Rows of an iris code.
pub const ROWS: usize = 16;
/// Columns of an iris code; rotations shift along this axis.
pub const COLUMNS: usize = 200;
/// Bits per column of one row: 2 wavelets x (real, imaginary).
pub const BITS_PER_COLUMN: usize = 4;
/// Ring coefficients in a code share (one per code bit).
pub const CODE_COEFS: usize = CODE_BITS;
/// Ring coefficients kept in a trimmed mask share (the real-part half).
pub const MASK_COEFS: usize = CODE_BITS / 2;
/// Number of nodes (parties) sharing every iris code.
pub const PARTIES: usize = 3;
/// Protocol version carried in envelopes and payloads.
pub const PROTOCOL_VERSION: u32 = 1;

/// A party (node) id: 0, 1 or 2. Party `id` holds the Shamir evaluation point `alpha_{id+1}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartyId(u8);

impl PartyId {
    /// All three parties in order.
    pub const ALL: [PartyId; PARTIES] = [PartyId(0), PartyId(1), PartyId(2)];

    /// The id as an index into per-party arrays.
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// The id as a byte.
    pub const fn get(self) -> u8 {
        self.0
    }

    /// The next party in the ring 0 -> 1 -> 2 -> 0.
    pub const fn next(self) -> PartyId {
        PartyId((self.0 + 1) % 3)
    }

    /// The previous party in the ring 0 -> 2 -> 1 -> 0.
    pub const fn prev(self) -> PartyId {
        PartyId((self.0 + 2) % 3)
    }
}

impl TryFrom<u8> for PartyId {
    type Error = InvalidPartyId;

    fn try_from(id: u8) -> Result<Self, InvalidPartyId> {
        if (id as usize) < PARTIES {
            Ok(PartyId(id))
        } else {
            Err(InvalidPartyId(id))
        }
    }
}

impl TryFrom<u32> for PartyId {
    type Error = InvalidPartyId;

    fn try_from(id: u32) -> Result<Self, InvalidPartyId> {
        u8::try_from(id)
            .map_err(|_| InvalidPartyId(u8::MAX))
            .and_then(PartyId::try_from)
    }
}

impl core::fmt::Display for PartyId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "party {}", self.0)
    }
}

/// Serialized as its number: configs and files write `party_id = 1`.
impl serde::Serialize for PartyId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u8(self.0)
    }
}

/// A number outside 0..=2 is refused while deserializing, not left for a later check.
impl<'de> serde::Deserialize<'de> for PartyId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let id = u8::deserialize(deserializer)?;
        PartyId::try_from(id).map_err(serde::de::Error::custom)
    }
}

/// A party id outside 0..=2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidPartyId(pub u8);

impl core::fmt::Display for InvalidPartyId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "party id {} is not 0, 1 or 2", self.0)
    }
}

impl core::error::Error for InvalidPartyId {}

/// What a request asks the nodes to do. The numbers are the protobuf enum values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RequestType {
    /// Match against everyone enrolled; enrol if unique.
    Uniqueness = 1,
    /// Match only; never enrol.
    UniquenessCheck = 2,
    /// Overwrite the shares of one serial id and remove it from matching.
    Deletion = 3,
    /// Match against one serial id alone.
    Reauth = 4,
    /// Replace the shares of one serial id.
    Reset = 5,
}

impl RequestType {
    /// All request types.
    pub const ALL: [RequestType; 5] = [
        RequestType::Uniqueness,
        RequestType::UniquenessCheck,
        RequestType::Deletion,
        RequestType::Reauth,
        RequestType::Reset,
    ];

    /// Whether the request names a target serial id.
    pub const fn has_target(self) -> bool {
        matches!(
            self,
            RequestType::Deletion | RequestType::Reauth | RequestType::Reset
        )
    }

    /// Short names, in the order of [`RequestType::ALL`].
    pub const NAMES: [&'static str; 5] = ["uniqueness", "check", "deletion", "reauth", "reset"];

    /// The short name (`uniqueness`, `check`, `deletion`, `reauth`, `reset`).
    pub const fn name(self) -> &'static str {
        match self {
            RequestType::Uniqueness => "uniqueness",
            RequestType::UniquenessCheck => "check",
            RequestType::Deletion => "deletion",
            RequestType::Reauth => "reauth",
            RequestType::Reset => "reset",
        }
    }

    /// Parses a short name.
    pub fn from_name(name: &str) -> Option<RequestType> {
        RequestType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Parses the protobuf enum value.
    pub fn from_wire(value: u64) -> Option<RequestType> {
        RequestType::ALL.into_iter().find(|t| *t as u64 == value)
    }
}

/// A request id: 16 random bytes chosen by the orb.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub [u8; 16]);

impl RequestId {
    /// Draws a fresh id.
    pub fn random<R: rand_core::RngCore + rand_core::CryptoRng>(rng: &mut R) -> RequestId {
        let mut id = [0u8; 16];
        rng.fill_bytes(&mut id);
        RequestId(id)
    }

    /// Parses exactly 16 bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<RequestId> {
        <[u8; 16]>::try_from(bytes).ok().map(RequestId)
    }
}

impl envelope::EnvelopeDigest {
    /// Parses exactly 32 bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<envelope::EnvelopeDigest> {
        <[u8; 32]>::try_from(bytes)
            .ok()
            .map(envelope::EnvelopeDigest)
    }
}

impl core::fmt::Display for RequestId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_party_id_is_written_as_its_number_and_read_only_from_0_to_2() {
        for p in PartyId::ALL {
            let json = serde_json::to_string(&p).expect("serializes");
            assert_eq!(json, std::format!("{}", p.get()));
            assert_eq!(serde_json::from_str::<PartyId>(&json).ok(), Some(p));
        }
        let e = serde_json::from_str::<PartyId>("3").expect_err("3 is no party");
        assert!(
            std::string::ToString::to_string(&e).contains("party id 3 is not 0, 1 or 2"),
            "{e}"
        );
        assert!(serde_json::from_str::<PartyId>("256").is_err());
    }
}

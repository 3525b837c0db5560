//! Identifiers the node keys its state by.

use std::fmt;

/// A request id: 16 random bytes chosen by the orb.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub [u8; 16]);

impl RequestId {
    /// Parses exactly 16 bytes.
    pub fn from_slice(b: &[u8]) -> Option<Self> {
        <[u8; 16]>::try_from(b).ok().map(Self)
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestId({})", hex::encode(self.0))
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

/// SHA-256 digest of an envelope, as computed by the SDK.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct EnvelopeDigest(pub [u8; 32]);

impl EnvelopeDigest {
    /// Parses exactly 32 bytes.
    pub fn from_slice(b: &[u8]) -> Option<Self> {
        <[u8; 32]>::try_from(b).ok().map(Self)
    }
}

impl fmt::Debug for EnvelopeDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EnvelopeDigest({})", hex::encode(self.0))
    }
}

/// An enrolment serial id (assigned identically by all three nodes, from 1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct SerialId(pub u64);

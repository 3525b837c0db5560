//! Node HPKE keys (X25519 for envelope version 1, X-Wing for version 2) and the orb's Ed25519
//! device key.

use ed25519_dalek::{SigningKey, VerifyingKey};
use hpke::kem::X25519HkdfSha256;
use hpke::{Deserializable, Kem as _, Serializable};
use rand_core::{CryptoRng, RngCore};
use zeroize::Zeroizing;

use crate::PARTIES;

mod hybrid;

pub(crate) use self::hybrid::{HybridKem, PqRng};
pub use self::hybrid::{
    NodeHybridPublicKey, NodeHybridPublicKeys, NodeHybridSecretKey, HYBRID_PUBLIC_KEY_BYTES,
};

pub(crate) type Kem = X25519HkdfSha256;

/// Bytes of every key here.
pub const KEY_BYTES: usize = 32;

/// A key given as bytes was not valid (caller misuse or a corrupt key file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidKey(pub &'static str);

impl core::fmt::Display for InvalidKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "invalid {}", self.0)
    }
}

impl core::error::Error for InvalidKey {}

/// A node's HPKE private key (X25519). Zeroized on drop.
#[derive(Clone)]
pub struct NodeSecretKey(pub(crate) <Kem as hpke::Kem>::PrivateKey);

impl NodeSecretKey {
    /// Draws a fresh key.
    pub fn generate<R: RngCore + CryptoRng>(rng: &mut R) -> NodeSecretKey {
        NodeSecretKey(Kem::gen_keypair(rng).0)
    }

    /// Parses the 32 key bytes.
    ///
    /// # Errors
    /// Never for 32 bytes (every string is a valid X25519 scalar after clamping); kept
    /// fallible for other KEMs.
    pub fn from_bytes(bytes: &[u8; KEY_BYTES]) -> Result<NodeSecretKey, InvalidKey> {
        <Kem as hpke::Kem>::PrivateKey::from_bytes(bytes)
            .map(NodeSecretKey)
            .map_err(|_| InvalidKey("node secret key"))
    }

    /// The key bytes, zeroized when dropped.
    pub fn to_bytes(&self) -> Zeroizing<[u8; KEY_BYTES]> {
        let mut out = Zeroizing::new([0u8; KEY_BYTES]);
        self.0.write_exact(out.as_mut());
        out
    }

    /// The matching public key.
    pub fn public_key(&self) -> NodePublicKey {
        NodePublicKey(Kem::sk_to_pk(&self.0))
    }
}

impl core::fmt::Debug for NodeSecretKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NodeSecretKey").finish_non_exhaustive()
    }
}

/// A node's HPKE public key (X25519).
#[derive(Clone, PartialEq, Eq)]
pub struct NodePublicKey(pub(crate) <Kem as hpke::Kem>::PublicKey);

impl NodePublicKey {
    /// Parses the 32 key bytes.
    ///
    /// # Errors
    /// [`InvalidKey`] if the bytes are rejected by the KEM.
    pub fn from_bytes(bytes: &[u8; KEY_BYTES]) -> Result<NodePublicKey, InvalidKey> {
        <Kem as hpke::Kem>::PublicKey::from_bytes(bytes)
            .map(NodePublicKey)
            .map_err(|_| InvalidKey("node public key"))
    }

    /// The key bytes.
    pub fn to_bytes(&self) -> [u8; KEY_BYTES] {
        let mut out = [0u8; KEY_BYTES];
        self.0.write_exact(&mut out);
        out
    }
}

impl core::fmt::Debug for NodePublicKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "NodePublicKey(")?;
        for b in self.to_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// The three nodes' public keys, in party order: the bundle an orb is provisioned with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePublicKeys(pub [NodePublicKey; PARTIES]);

impl NodePublicKeys {
    /// Bytes of [`NodePublicKeys::to_bytes`].
    pub const BYTES: usize = PARTIES * KEY_BYTES;

    /// The three keys concatenated in party order.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        concat_keys(self.0.each_ref().map(NodePublicKey::to_bytes))
    }

    /// Parses three concatenated keys.
    ///
    /// # Errors
    /// [`InvalidKey`] if any key is rejected.
    pub fn from_bytes(bytes: &[u8; Self::BYTES]) -> Result<NodePublicKeys, InvalidKey> {
        split_keys(bytes, NodePublicKey::from_bytes).map(NodePublicKeys)
    }
}

/// Three keys of `K` bytes concatenated in party order.
pub(crate) fn concat_keys<const K: usize, const N: usize>(keys: [[u8; K]; PARTIES]) -> [u8; N] {
    let mut out = [0u8; N];
    for (chunk, key) in out.chunks_exact_mut(K).zip(keys) {
        chunk.copy_from_slice(&key);
    }
    out
}

/// Parses three concatenated keys of `K` bytes with `parse`.
pub(crate) fn split_keys<const K: usize, T>(
    bytes: &[u8],
    parse: impl Fn(&[u8; K]) -> Result<T, InvalidKey>,
) -> Result<[T; PARTIES], InvalidKey> {
    let key = |i: usize| {
        let mut k = [0u8; K];
        k.copy_from_slice(&bytes[i * K..(i + 1) * K]);
        parse(&k)
    };
    Ok([key(0)?, key(1)?, key(2)?])
}

/// The orb's Ed25519 device key. Zeroized on drop.
pub struct OrbSigningKey(pub(crate) SigningKey);

impl OrbSigningKey {
    /// Draws a fresh key.
    pub fn generate<R: RngCore + CryptoRng>(rng: &mut R) -> OrbSigningKey {
        OrbSigningKey(SigningKey::generate(rng))
    }

    /// From the 32-byte seed.
    pub fn from_bytes(seed: &[u8; KEY_BYTES]) -> OrbSigningKey {
        OrbSigningKey(SigningKey::from_bytes(seed))
    }

    /// The 32-byte seed, zeroized when dropped.
    pub fn to_bytes(&self) -> Zeroizing<[u8; KEY_BYTES]> {
        Zeroizing::new(self.0.to_bytes())
    }

    /// The public key nodes put on their allow-list.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.0.verifying_key()
    }
}

impl core::fmt::Debug for OrbSigningKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OrbSigningKey")
            .field("verifying_key", &self.verifying_key())
            .finish_non_exhaustive()
    }
}

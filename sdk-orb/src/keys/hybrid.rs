//! Node keys for envelope version 2: X-Wing (MLKEM768-X25519, HPKE KEM id 0x647a).
//!
//! The secret key is X-Wing's 32-byte seed (the standard's private key form); the public key
//! is the 1,216-byte X-Wing encapsulation key (ML-KEM-768 key then X25519 key).

use hpke_pq::kem::XWing;
use hpke_pq::{Deserializable, Serializable};
use rand_core::{CryptoRng, RngCore};
use zeroize::Zeroizing;

use super::{concat_keys, split_keys, InvalidKey, KEY_BYTES};
use crate::PARTIES;

pub(crate) type HybridKem = XWing;

/// Bytes of an X-Wing public key.
pub const HYBRID_PUBLIC_KEY_BYTES: usize = 1216;

/// A node's X-Wing private key: its 32-byte seed. Zeroized on drop.
#[derive(Clone)]
pub struct NodeHybridSecretKey(pub(crate) <HybridKem as hpke_pq::Kem>::PrivateKey);

impl NodeHybridSecretKey {
    /// Draws a fresh key (a uniform 32-byte seed).
    pub fn generate<R: RngCore + CryptoRng>(rng: &mut R) -> NodeHybridSecretKey {
        let mut seed = Zeroizing::new([0u8; KEY_BYTES]);
        rng.fill_bytes(seed.as_mut());
        NodeHybridSecretKey::from_seed(&seed)
    }

    /// The key of a 32-byte seed (every seed is a valid key).
    pub fn from_seed(seed: &[u8; KEY_BYTES]) -> NodeHybridSecretKey {
        match <HybridKem as hpke_pq::Kem>::PrivateKey::from_bytes(seed) {
            Ok(k) => NodeHybridSecretKey(k),
            // The only failure is a length other than 32.
            Err(_) => unreachable!("an X-Wing seed is 32 bytes"),
        }
    }

    /// The seed, zeroized when dropped.
    pub fn to_seed(&self) -> Zeroizing<[u8; KEY_BYTES]> {
        let mut out = Zeroizing::new([0u8; KEY_BYTES]);
        self.0.write_exact(out.as_mut());
        out
    }

    /// The matching public key.
    pub fn public_key(&self) -> NodeHybridPublicKey {
        NodeHybridPublicKey(<HybridKem as hpke_pq::Kem>::sk_to_pk(&self.0))
    }
}

impl core::fmt::Debug for NodeHybridSecretKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NodeHybridSecretKey")
            .finish_non_exhaustive()
    }
}

/// A node's X-Wing public key.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeHybridPublicKey(pub(crate) <HybridKem as hpke_pq::Kem>::PublicKey);

impl NodeHybridPublicKey {
    /// Parses the 1,216 key bytes.
    ///
    /// # Errors
    /// [`InvalidKey`] if the ML-KEM part is not canonical.
    pub fn from_bytes(
        bytes: &[u8; HYBRID_PUBLIC_KEY_BYTES],
    ) -> Result<NodeHybridPublicKey, InvalidKey> {
        <HybridKem as hpke_pq::Kem>::PublicKey::from_bytes(bytes)
            .map(NodeHybridPublicKey)
            .map_err(|_| InvalidKey("node hybrid public key"))
    }

    /// The key bytes.
    pub fn to_bytes(&self) -> [u8; HYBRID_PUBLIC_KEY_BYTES] {
        let mut out = [0u8; HYBRID_PUBLIC_KEY_BYTES];
        self.0.write_exact(&mut out);
        out
    }
}

impl core::fmt::Debug for NodeHybridPublicKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // The X25519 part (the last 32 bytes) is enough to tell keys apart in logs.
        write!(f, "NodeHybridPublicKey(..")?;
        for b in &self.to_bytes()[HYBRID_PUBLIC_KEY_BYTES - KEY_BYTES..] {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// The three nodes' X-Wing public keys, in party order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeHybridPublicKeys(pub [NodeHybridPublicKey; PARTIES]);

impl NodeHybridPublicKeys {
    /// Bytes of [`NodeHybridPublicKeys::to_bytes`].
    pub const BYTES: usize = PARTIES * HYBRID_PUBLIC_KEY_BYTES;

    /// The three keys concatenated in party order.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        concat_keys(self.0.each_ref().map(NodeHybridPublicKey::to_bytes))
    }

    /// Parses three concatenated keys.
    ///
    /// # Errors
    /// [`InvalidKey`] if any key is rejected.
    pub fn from_bytes(bytes: &[u8; Self::BYTES]) -> Result<NodeHybridPublicKeys, InvalidKey> {
        split_keys(bytes, NodeHybridPublicKey::from_bytes).map(NodeHybridPublicKeys)
    }
}

/// The caller's RNG (rand_core 0.6) as the RNG the X-Wing HPKE stack takes (rand_core 0.10).
pub(crate) struct PqRng<'a, R>(pub(crate) &'a mut R);

impl<R: RngCore + CryptoRng> hpke_pq::rand_core::TryRng for PqRng<'_, R> {
    type Error = core::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok(self.0.next_u32())
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        Ok(self.0.next_u64())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        self.0.fill_bytes(dst);
        Ok(())
    }
}

impl<R: RngCore + CryptoRng> hpke_pq::rand_core::TryCryptoRng for PqRng<'_, R> {}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest as _, Sha256};

    fn hex<const N: usize>(s: &str) -> [u8; N] {
        let mut out = [0u8; N];
        for (o, pair) in out.iter_mut().zip(s.as_bytes().chunks_exact(2)) {
            let text = core::str::from_utf8(pair).expect("ascii");
            *o = u8::from_str_radix(text, 16).expect("hex");
        }
        out
    }

    /// Replays the first known-answer vector of the X-Wing specification
    /// (draft-connolly-cfrg-xwing-kem, Appendix C): seed to public key, then encapsulation with
    /// the vector's randomness to its ciphertext, through the HPKE stack the envelope uses.
    #[test]
    fn the_kem_is_x_wing_with_id_0x647a_and_replays_the_specification_vector() {
        assert_eq!(<HybridKem as hpke_pq::Kem>::KEM_ID, 0x647a);
        let seed = hex::<32>("7f9c2ba4e88f827d616045507605853ed73b8093f6efbc88eb1a6eacfa66ef26");
        let eseed = hex::<64>(
            "3cb1eea988004b93103cfb0aeefd2a686e01fa4a58e8a3639ca8a1e3f9ae57e2\
             35b8cc873c23dc62b8d260169afa2f75ab916a58d974918835d25e6a435085b2",
        );
        let ss = hex::<32>("d2df0522128f09dd8e2c92b1e905c793d8f57a54c3da25861f10bf4ca613e384");
        // The vector's pk (1,216 bytes) and ct (1,120 bytes), by SHA-256 and first bytes.
        let pk_sha = hex::<32>("2e816deebcd76c5c80d0cd2d174478871658e8e2ff42bc9d4a6e486372e856bb");
        let pk_head = hex::<16>("e2236b35a8c24b39b10aa1323a96a919");
        let ct_head = hex::<16>("b83aa828d4d62b9a83ceffe1d3d3bb1e");
        let ct_sha = hex::<32>("17cd532d657e44c897ca6583e548a5424fc70bf54f99515a4d2bcf99e3469f33");

        let sk = NodeHybridSecretKey::from_seed(&seed);
        let pk = sk.public_key().to_bytes();
        assert_eq!(pk[..16], pk_head);
        assert_eq!(<[u8; 32]>::from(Sha256::digest(pk)), pk_sha);

        let mut given = FixedBytes(&eseed);
        let mut rng = PqRng(&mut given);
        let (shared, encapped) =
            <HybridKem as hpke_pq::Kem>::encap_with_rng(&sk.public_key().0, None, &mut rng)
                .expect("encapsulates");
        assert_eq!(shared.0.as_slice(), &ss[..]);
        let mut ct = [0u8; 1120];
        encapped.write_exact(&mut ct);
        assert_eq!(ct[..16], ct_head);
        assert_eq!(<[u8; 32]>::from(Sha256::digest(ct)), ct_sha);
        let opened = <HybridKem as hpke_pq::Kem>::decap(&sk.0, None, &encapped).expect("decaps");
        assert_eq!(opened.0.as_slice(), &ss[..]);
    }

    /// An RNG that hands out given bytes once (known-answer replays).
    struct FixedBytes<'a>(&'a [u8]);

    impl RngCore for FixedBytes<'_> {
        fn next_u32(&mut self) -> u32 {
            unimplemented!("bytes only")
        }
        fn next_u64(&mut self) -> u64 {
            unimplemented!("bytes only")
        }
        fn fill_bytes(&mut self, dst: &mut [u8]) {
            let (now, rest) = self.0.split_at(dst.len());
            dst.copy_from_slice(now);
            self.0 = rest;
        }
        fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), rand_core::Error> {
            self.fill_bytes(dst);
            Ok(())
        }
    }

    impl CryptoRng for FixedBytes<'_> {}

    #[test]
    fn keys_round_trip_through_their_bytes() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
        let keys: [NodeHybridPublicKey; PARTIES] =
            core::array::from_fn(|_| NodeHybridSecretKey::generate(&mut rng).public_key());
        let bundle = NodeHybridPublicKeys(keys);
        let again = NodeHybridPublicKeys::from_bytes(&bundle.to_bytes()).expect("parses");
        assert_eq!(again, bundle);
        let sk = NodeHybridSecretKey::generate(&mut rng);
        assert_eq!(
            NodeHybridSecretKey::from_seed(&sk.to_seed()).public_key(),
            sk.public_key()
        );
    }

    use rand_core::SeedableRng as _;
}

//! Correlated randomness: one PRF stream shared with each neighbour.
//!
//! The seed a pair of nodes shares comes from a fresh ephemeral X25519 exchange on their
//! mutually authenticated MPC link at every session ([`PairKeyExchange`]), bound to the
//! session and both public keys, and confirmed by both ends before any round runs
//! ([`PairKeys::confirm`]): no long-term key enters a seed, so rotating a node's HPKE key never
//! touches the MPC, and two ends that derived different seeds stop instead of opening garbage.
//! Streams are ChaCha12 keyed by the seed. Both holders of a stream draw the same amounts in
//! the same order: every protocol step documents what it draws.

use hkdf::Hkdf;
use rand_chacha::ChaCha12Rng;
use rand_core::{CryptoRng, RngCore, SeedableRng};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zerocopy::IntoBytes;
use zeroize::Zeroizing;

use crate::share::{swap_to_le, Word};

use sdk_orb::PartyId;

/// HKDF info prefix of pairwise seeds: `|| low id || high id`.
pub const SEED_INFO: &[u8] = b"ocelli/prf-seed/v2";

/// HKDF info prefix of the key confirmation tags: `|| sender id`.
pub const CONFIRM_INFO: &[u8] = b"ocelli/prf-confirm/v2";

/// Domain of the transcript hash, the HKDF salt of a pair's keys.
pub const TRANSCRIPT_DOMAIN: &[u8] = b"ocelli/prf-transcript/v2";

/// Why a pair's key agreement failed. Carries no key bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyAgreementError {
    /// The peer's public key gives a non-contributory shared secret (a low-order point).
    #[error("the peer's ephemeral key is of low order")]
    LowOrder,
    /// The peer's confirmation tag does not match: the two ends hold different seeds (a key or
    /// transcript differs between them).
    #[error("key confirmation failed: the two ends derived different seeds")]
    Mismatch,
}

/// One party's side of the key agreement with one neighbour for one MPC session: an ephemeral
/// X25519 key whose public half goes to the neighbour on their link.
pub struct PairKeyExchange {
    me: PartyId,
    peer: PartyId,
    secret: x25519_dalek::EphemeralSecret,
    public: x25519_dalek::PublicKey,
}

impl core::fmt::Debug for PairKeyExchange {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PairKeyExchange")
            .field("me", &self.me)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

impl PairKeyExchange {
    /// A fresh ephemeral key for the pair (`me`, `peer`).
    pub fn new(me: PartyId, peer: PartyId, rng: &mut (impl RngCore + CryptoRng)) -> Self {
        let secret = x25519_dalek::EphemeralSecret::random_from_rng(rng);
        let public = x25519_dalek::PublicKey::from(&secret);
        Self {
            me,
            peer,
            secret,
            public,
        }
    }

    /// The public key to send the neighbour.
    pub fn public_key(&self) -> [u8; 32] {
        self.public.to_bytes()
    }

    /// The pair's keys for MPC session `session`, from the neighbour's public key: HKDF-SHA256
    /// with the X25519 shared secret as input key material and the transcript hash (SHA-256 of
    /// [`TRANSCRIPT_DOMAIN`], the session as big-endian u64, the low and high party ids, and
    /// the low and high parties' public keys) as salt. Either end computes the same keys from
    /// the same transcript.
    ///
    /// # Errors
    /// [`KeyAgreementError::LowOrder`] for a public key that contributes nothing.
    pub fn finish(
        self,
        session: u64,
        peer_public: &[u8; 32],
    ) -> Result<PairKeys, KeyAgreementError> {
        let theirs = x25519_dalek::PublicKey::from(*peer_public);
        let shared = self.secret.diffie_hellman(&theirs);
        if !shared.was_contributory() {
            return Err(KeyAgreementError::LowOrder);
        }
        let (low, high) = if self.me < self.peer {
            ((self.me, self.public.to_bytes()), (self.peer, *peer_public))
        } else {
            ((self.peer, *peer_public), (self.me, self.public.to_bytes()))
        };
        let mut t = Sha256::new();
        t.update(TRANSCRIPT_DOMAIN);
        t.update(session.to_be_bytes());
        t.update([low.0.get(), high.0.get()]);
        t.update(low.1);
        t.update(high.1);
        let transcript: [u8; 32] = t.finalize().into();
        let hk = Hkdf::<Sha256>::new(Some(&transcript), shared.as_bytes());
        let expand = |prefix: &[u8], suffix: &[u8]| {
            let mut info = Vec::with_capacity(prefix.len() + suffix.len());
            info.extend_from_slice(prefix);
            info.extend_from_slice(suffix);
            let mut out = Zeroizing::new([0u8; 32]);
            // 32 bytes is far below HKDF-SHA256's output limit.
            hk.expand(&info, out.as_mut())
                .expect("32 bytes is a valid HKDF-SHA256 output length");
            out
        };
        Ok(PairKeys {
            seed: expand(SEED_INFO, &[low.0.get(), high.0.get()]),
            own_tag: expand(CONFIRM_INFO, &[self.me.get()]),
            peer_tag: expand(CONFIRM_INFO, &[self.peer.get()]),
        })
    }
}

/// A pair's derived keys, not yet confirmed: the seed is released only against the
/// neighbour's matching confirmation tag.
pub struct PairKeys {
    seed: Zeroizing<[u8; 32]>,
    own_tag: Zeroizing<[u8; 32]>,
    peer_tag: Zeroizing<[u8; 32]>,
}

impl core::fmt::Debug for PairKeys {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PairKeys").finish_non_exhaustive()
    }
}

impl PairKeys {
    /// This end's confirmation tag, to send the neighbour.
    pub fn confirmation(&self) -> [u8; 32] {
        *self.own_tag
    }

    /// The pair's seed, if `theirs` is the neighbour's confirmation tag for the same keys.
    ///
    /// # Errors
    /// [`KeyAgreementError::Mismatch`] when the tag differs (compared in constant time).
    pub fn confirm(self, theirs: &[u8]) -> Result<Zeroizing<[u8; 32]>, KeyAgreementError> {
        if theirs.len() == 32 && bool::from(self.peer_tag.as_slice().ct_eq(theirs)) {
            Ok(self.seed)
        } else {
            Err(KeyAgreementError::Mismatch)
        }
    }
}

/// One party's two PRF streams: shared with the next party and with the previous one.
pub struct CorrelatedRandomness {
    next: ChaCha12Rng,
    prev: ChaCha12Rng,
}

impl core::fmt::Debug for CorrelatedRandomness {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CorrelatedRandomness")
            .finish_non_exhaustive()
    }
}

mod keystream;

pub use keystream::Keystream;

/// `n` words of a type from a stream: `n * T::BYTES` bytes, each word little-endian.
fn draw<T: Word>(rng: &mut ChaCha12Rng, n: usize) -> Vec<T> {
    let mut words = vec![T::default(); n];
    let bytes = words.as_mut_bytes();
    fill(rng, bytes);
    swap_to_le::<T>(bytes);
    words
}

/// [`fill_stream`] with [`Keystream::current`].
fn fill(rng: &mut ChaCha12Rng, bytes: &mut [u8]) {
    fill_stream(Keystream::current(), rng, bytes);
}

/// Fills `bytes` from a stream exactly as `rng.fill_bytes` would (`ceil(len / 4)` words): the
/// generator up to the next block, `version` for the whole blocks after it, the generator
/// again for what is left.
///
/// # Panics
/// Past 2^64 blocks of one stream, or if this CPU does not run `version`.
pub fn fill_stream(version: Keystream, rng: &mut ChaCha12Rng, bytes: &mut [u8]) {
    const BLOCK_WORDS: u128 = (keystream::BLOCK_BYTES / 4) as u128;
    let pos = rng.get_word_pos();
    let head = ((BLOCK_WORDS - pos % BLOCK_WORDS) % BLOCK_WORDS) as usize * 4;
    if bytes.len() < head + keystream::MAX_LANES * keystream::BLOCK_BYTES {
        rng.fill_bytes(bytes);
        return;
    }
    let (head_bytes, rest) = bytes.split_at_mut(head);
    // A whole number of words: the generator leaves no part of one unused.
    rng.fill_bytes(head_bytes);
    let key = key_words(rng);
    let block = u64::try_from((pos + (head / 4) as u128) / BLOCK_WORDS)
        .expect("a stream shorter than 2^64 blocks");
    let done = keystream::fill_blocks(version, &key, block, rest);
    rng.set_word_pos(pos + ((head + done) / 4) as u128);
    rng.fill_bytes(&mut rest[done..]);
}

/// A stream's ChaCha12 key: its seed as eight little-endian u32 words.
fn key_words(rng: &ChaCha12Rng) -> Zeroizing<[u32; 8]> {
    let seed = Zeroizing::new(rng.get_seed());
    let mut key = Zeroizing::new([0u32; 8]);
    for (k, bytes) in key.iter_mut().zip(seed.chunks_exact(4)) {
        *k = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    }
    key
}

/// One of a party's two streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Neighbour {
    /// The stream shared with the next party.
    Next,
    /// The stream shared with the previous party.
    Prev,
}

/// A run of a stream that a kernel device draws itself: the ChaCha12 key and the word (u32)
/// position where the run starts.
pub struct StreamRun {
    /// The key, as eight little-endian u32 words.
    pub key: Zeroizing<[u32; 8]>,
    /// The position of the run's first word in the stream.
    pub word_pos: u64,
}

impl core::fmt::Debug for StreamRun {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StreamRun")
            .field("word_pos", &self.word_pos)
            .finish_non_exhaustive()
    }
}

impl CorrelatedRandomness {
    /// The next `words` u32 words of a stream, for a device to draw: the stream moves past
    /// them as if they had been drawn here, so host and device draws interleave exactly.
    /// A draw here of `n` bytes takes `ceil(n / 4)` words.
    ///
    /// # Panics
    /// Past 2^64 words of one stream (2^66 bytes).
    pub fn take_words(&mut self, which: Neighbour, words: u64) -> StreamRun {
        let rng = match which {
            Neighbour::Next => &mut self.next,
            Neighbour::Prev => &mut self.prev,
        };
        let start = rng.get_word_pos();
        let word_pos = u64::try_from(start).expect("a stream shorter than 2^64 words");
        rng.set_word_pos(start + u128::from(words));
        StreamRun {
            key: key_words(rng),
            word_pos,
        }
    }

    /// From the seed shared with the next party and the one shared with the previous party.
    pub fn from_seeds(next: &[u8; 32], prev: &[u8; 32]) -> CorrelatedRandomness {
        CorrelatedRandomness {
            next: ChaCha12Rng::from_seed(*next),
            prev: ChaCha12Rng::from_seed(*prev),
        }
    }

    /// `n` u16 from the stream shared with the next party.
    pub fn next_u16(&mut self, n: usize) -> Vec<u16> {
        draw(&mut self.next, n)
    }

    /// `n` u16 from the stream shared with the previous party.
    pub fn prev_u16(&mut self, n: usize) -> Vec<u16> {
        draw(&mut self.prev, n)
    }

    /// `n` u32 from the stream shared with the next party.
    pub fn next_u32(&mut self, n: usize) -> Vec<u32> {
        draw(&mut self.next, n)
    }

    /// `n` u32 from the stream shared with the previous party.
    pub fn prev_u32(&mut self, n: usize) -> Vec<u32> {
        draw(&mut self.prev, n)
    }

    /// An additive zero-sharing of `n` words over Z_{2^32}: `next - prev`, which sums to zero
    /// over the three parties. Draws `n` u32 from each stream.
    pub fn zero_u32(&mut self, n: usize) -> Vec<u32> {
        let next = self.next_u32(n);
        let prev = self.prev_u32(n);
        next.iter()
            .zip(&prev)
            .map(|(a, b)| a.wrapping_sub(*b))
            .collect()
    }

    /// `n` u64 words of bits from the stream shared with the next party.
    pub fn next_bits(&mut self, n: usize) -> Vec<u64> {
        draw(&mut self.next, n)
    }

    /// `n` u64 words of bits from the stream shared with the previous party.
    pub fn prev_bits(&mut self, n: usize) -> Vec<u64> {
        draw(&mut self.prev, n)
    }

    /// An XOR zero-sharing of `n` words: `next ^ prev`. Draws `n` u64 from each stream.
    pub fn zero_bits(&mut self, n: usize) -> Vec<u64> {
        // The previous party's words are drawn into a stack buffer a piece at a time and
        // folded in, so an AND round allocates one vector, not three: whole u64 draws read a
        // stream exactly as one draw of all of them would. 16 KB pieces: each fill that takes
        // the vector path leaves the generator to remake its four-block buffer.
        const CHUNK: usize = 2048;
        let mut out = self.next_bits(n);
        let mut chunk = [0u64; CHUNK];
        for part in out.chunks_mut(CHUNK) {
            let drawn = &mut chunk[..part.len()];
            fill(&mut self.prev, drawn.as_mut_bytes());
            swap_to_le::<u64>(drawn.as_mut_bytes());
            part.iter_mut().zip(drawn.iter()).for_each(|(o, r)| *o ^= r);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(
        rng: &mut rand_chacha::ChaCha20Rng,
        a: PartyId,
        b: PartyId,
        session: u64,
    ) -> (PairKeys, PairKeys) {
        let x = PairKeyExchange::new(a, b, rng);
        let y = PairKeyExchange::new(b, a, rng);
        let (px, py) = (x.public_key(), y.public_key());
        (
            x.finish(session, &py).expect("contributory"),
            y.finish(session, &px).expect("contributory"),
        )
    }

    #[test]
    fn both_ends_of_a_pair_confirm_the_same_seed_and_sessions_differ() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let [p0, p1, p2] = PartyId::ALL;
        let (a, b) = exchange(&mut rng, p0, p1, 7);
        let (ta, tb) = (a.confirmation(), b.confirmation());
        assert_ne!(ta, tb, "each end's tag names its sender");
        let (sa, sb) = (a.confirm(&tb).expect("tags"), b.confirm(&ta).expect("tags"));
        assert_eq!(*sa, *sb);
        let (c, d) = exchange(&mut rng, p1, p2, 7);
        let (tc, td) = (c.confirmation(), d.confirmation());
        assert_ne!(*c.confirm(&td).expect("tags"), *sa);
        assert!(d.confirm(&tc).is_ok());
        // A fresh exchange for the same pair gives a fresh seed.
        let (e, f) = exchange(&mut rng, p0, p1, 7);
        let te = e.confirmation();
        assert_ne!(*f.confirm(&te).expect("tags"), *sa);
    }

    #[test]
    fn ends_with_different_views_of_a_key_or_session_fail_confirmation() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(2);
        let [p0, p1, _] = PartyId::ALL;
        // Party 1 holds another public key for party 0 than party 0's own (a substituted or
        // stale key): both ends refuse.
        let x = PairKeyExchange::new(p0, p1, &mut rng);
        let y = PairKeyExchange::new(p1, p0, &mut rng);
        let other = PairKeyExchange::new(p0, p1, &mut rng);
        let (a, b) = (
            x.finish(3, &y.public_key()).expect("contributory"),
            y.finish(3, &other.public_key()).expect("contributory"),
        );
        let (ta, tb) = (a.confirmation(), b.confirmation());
        assert_eq!(a.confirm(&tb).err(), Some(KeyAgreementError::Mismatch));
        assert_eq!(b.confirm(&ta).err(), Some(KeyAgreementError::Mismatch));
        // The same keys under two session names.
        let x = PairKeyExchange::new(p0, p1, &mut rng);
        let y = PairKeyExchange::new(p1, p0, &mut rng);
        let (px, py) = (x.public_key(), y.public_key());
        let (a, b) = (
            x.finish(3, &py).expect("contributory"),
            y.finish(4, &px).expect("contributory"),
        );
        let tb = b.confirmation();
        assert_eq!(a.confirm(&tb).err(), Some(KeyAgreementError::Mismatch));
        // A truncated tag.
        let (a, b) = exchange(&mut rng, p0, p1, 5);
        assert_eq!(
            a.confirm(&b.confirmation()[..31]).err(),
            Some(KeyAgreementError::Mismatch)
        );
    }

    #[test]
    fn a_low_order_key_is_refused() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        let [p0, p1, _] = PartyId::ALL;
        let x = PairKeyExchange::new(p0, p1, &mut rng);
        assert_eq!(
            x.finish(1, &[0u8; 32]).err(),
            Some(KeyAgreementError::LowOrder)
        );
    }

    #[test]
    fn draws_read_the_stream_as_fills_of_all_their_bytes() {
        let mut r = CorrelatedRandomness::from_seeds(&[4; 32], &[5; 32]);
        let mut plain = ChaCha12Rng::from_seed([4; 32]);
        // An odd number of u16 leaves half a stream word unused; the next draw skips it.
        for n in [5_001, 3, 2_048, 1] {
            let mut bytes = vec![0u8; n * 2];
            plain.fill_bytes(&mut bytes);
            let words: Vec<u16> = bytes
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            assert_eq!(r.next_u16(n), words);
        }
        let mut bytes = vec![0u8; 777 * 8];
        plain.fill_bytes(&mut bytes);
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        assert_eq!(r.next_bits(777), words);
    }

    #[test]
    fn fills_read_the_stream_as_the_generator_does() {
        let mut plain = ChaCha12Rng::from_seed([8; 32]);
        let mut rng = ChaCha12Rng::from_seed([8; 32]);
        // Whole blocks behind a partial one, then odd tails that leave part of a word unused.
        for len in [1, 1_030, 7, 4_096 + 13, 3, 20_000, 2_048, 1_024] {
            let mut expected = vec![0u8; len];
            plain.fill_bytes(&mut expected);
            for version in Keystream::supported() {
                let mut version_rng = rng.clone();
                let mut out = vec![0u8; len];
                fill_stream(version, &mut version_rng, &mut out);
                assert_eq!(out, expected, "a fill of {len} bytes by {version:?}");
                assert_eq!(version_rng.get_word_pos(), plain.get_word_pos());
            }
            let mut out = vec![0u8; len];
            fill(&mut rng, &mut out);
            assert_eq!(out, expected, "a fill of {len} bytes");
        }
    }

    #[test]
    fn a_zero_sharing_is_the_two_streams_drawn_whole() {
        let mut r = CorrelatedRandomness::from_seeds(&[6; 32], &[7; 32]);
        let mut plain = CorrelatedRandomness::from_seeds(&[6; 32], &[7; 32]);
        // Longer than the stack buffer, then not a multiple of it, then one word.
        for n in [5_000, 2_049, 1] {
            let next = plain.next_bits(n);
            let prev = plain.prev_bits(n);
            let expected: Vec<u64> = next.iter().zip(&prev).map(|(x, y)| x ^ y).collect();
            assert_eq!(r.zero_bits(n), expected);
        }
    }

    #[test]
    fn zero_sharings_sum_to_zero() {
        let seeds = [[1u8; 32], [2u8; 32], [3u8; 32]]; // seeds[i]: pair (i, i+1)
        let mut r: Vec<CorrelatedRandomness> = (0..3)
            .map(|i| CorrelatedRandomness::from_seeds(&seeds[i], &seeds[(i + 2) % 3]))
            .collect();
        let b: Vec<Vec<u64>> = r.iter_mut().map(|r| r.zero_bits(10)).collect();
        for ((x, y), z) in b[0].iter().zip(&b[1]).zip(&b[2]) {
            assert_eq!(x ^ y ^ z, 0);
        }
        assert!(b[0].iter().any(|&v| v != 0));
    }
}

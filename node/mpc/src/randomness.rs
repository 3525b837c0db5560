//! Correlated randomness: one PRF stream shared with each neighbour.
//!
//! The seed a pair of nodes shares comes from their static X25519 keys and fresh nonces both
//! contribute at every start ([`pair_seed`]), so restarting a node never replays a stream.
//! Streams are ChaCha12 keyed by the seed. Both holders of a stream draw the same amounts in
//! the same order: every protocol step documents what it draws.

use hkdf::Hkdf;
use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};
use sha2::Sha256;
use zerocopy::IntoBytes;
use zeroize::Zeroizing;

use crate::share::{swap_to_le, Word};

use sdk_orb::PartyId;

/// HKDF info prefix of pairwise seeds.
pub const SEED_INFO: &[u8] = b"ocelli/prf-seed/v1";

/// The seed shared by parties `a` and `b`: HKDF-SHA256 with the X25519 shared secret of their
/// static keys as input key material, both parties' per-start nonces (lower id first) as salt,
/// and the pair's ids as info. Either party computes the same value.
pub fn pair_seed(
    me: PartyId,
    my_secret: &x25519_dalek::StaticSecret,
    peer: PartyId,
    peer_public: &x25519_dalek::PublicKey,
    my_nonce: &[u8; 32],
    peer_nonce: &[u8; 32],
) -> Zeroizing<[u8; 32]> {
    let shared = my_secret.diffie_hellman(peer_public);
    let (low, high) = if me < peer {
        ((me, my_nonce), (peer, peer_nonce))
    } else {
        ((peer, peer_nonce), (me, my_nonce))
    };
    let mut salt = [0u8; 64];
    salt[..32].copy_from_slice(low.1);
    salt[32..].copy_from_slice(high.1);
    let hk = Hkdf::<Sha256>::new(Some(&salt), shared.as_bytes());
    let mut info = [0u8; SEED_INFO.len() + 2];
    info[..SEED_INFO.len()].copy_from_slice(SEED_INFO);
    info[SEED_INFO.len()] = low.0.get();
    info[SEED_INFO.len() + 1] = high.0.get();
    let mut seed = Zeroizing::new([0u8; 32]);
    // 32 bytes is far below HKDF-SHA256's output limit.
    hk.expand(&info, seed.as_mut())
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    seed
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

    #[test]
    fn both_ends_of_a_pair_derive_the_same_seed_and_other_pairs_differ() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let keys: Vec<x25519_dalek::StaticSecret> = (0..3)
            .map(|_| x25519_dalek::StaticSecret::random_from_rng(&mut rng))
            .collect();
        let public: Vec<x25519_dalek::PublicKey> = keys.iter().map(Into::into).collect();
        let nonces = [[1u8; 32], [2u8; 32], [3u8; 32]];
        let p = PartyId::ALL;
        let seed = |a: usize, b: usize| {
            pair_seed(p[a], &keys[a], p[b], &public[b], &nonces[a], &nonces[b])
        };
        assert_eq!(*seed(0, 1), *seed(1, 0));
        assert_eq!(*seed(1, 2), *seed(2, 1));
        assert_ne!(*seed(0, 1), *seed(1, 2));
        // A fresh nonce gives a fresh seed.
        let fresh = pair_seed(p[0], &keys[0], p[1], &public[1], &[9; 32], &nonces[1]);
        assert_ne!(*fresh, *seed(0, 1));
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

//! ChaCha12 keystream in whole 64-byte blocks, many blocks side by side: word `i` of 16 (AVX-512)
//! or 8 (AVX2) consecutive blocks in one vector register. rand_chacha's generator makes four
//! blocks at a time with each block's rows in registers and shuffles between half-rounds; the
//! comparison phase draws tens of megabytes per pass, and its draws were a third of the
//! phase's time.
//!
//! The words are those of rand_chacha's `ChaCha12Rng` (key from the seed's little-endian
//! words, stream 0, a 64-bit block counter in words 12 and 13), as the device kernel's are
//! (`kernels/compare.cu`, `chacha12`); the tests hold every version to the generator itself.

pub(super) use ocelli_simd::chacha::BLOCK_BYTES;

/// The most blocks one step of any version makes: a draw needs at least this many whole
/// blocks for a vector version to take part.
pub(super) const MAX_LANES: usize = 16;

use std::sync::atomic::{AtomicU8, Ordering};

/// The version a benchmark chose for every draw of its process ([`Keystream::choose`]): its
/// discriminant plus one; 0: none, the widest.
static CHOSEN: AtomicU8 = AtomicU8::new(0);

/// Who makes a draw's whole blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keystream {
    /// 16 blocks per step in `zmm` registers (`avx512f`).
    Avx512,
    /// 8 blocks per step in `ymm` registers (`avx2`).
    Avx2,
    /// rand_chacha's generator alone.
    Generator,
}

impl Keystream {
    /// Every version, widest first, in the order of their discriminants.
    const ALL: [Keystream; 3] = [Keystream::Avx512, Keystream::Avx2, Keystream::Generator];

    /// The versions this CPU runs, widest first; the generator always.
    pub fn supported() -> Vec<Keystream> {
        Keystream::ALL
            .into_iter()
            .filter(|version| version.runs())
            .collect()
    }

    /// Whether this CPU runs it.
    pub fn runs(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Keystream::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Keystream::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            Keystream::Generator => true,
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The widest version this CPU runs: what draws use unless a benchmark chose another.
    pub fn widest() -> Keystream {
        Keystream::ALL
            .into_iter()
            .find(|version| version.runs())
            .unwrap_or(Keystream::Generator)
    }

    /// Makes every later draw in this process use `version`: a benchmark that measures one
    /// instruction set, as a machine without the wider ones would run. Every version draws the
    /// same bytes.
    ///
    /// # Panics
    /// If this CPU does not run `version`.
    pub fn choose(version: Keystream) {
        assert!(version.runs(), "{version:?} unsupported");
        CHOSEN.store(version as u8 + 1, Ordering::Relaxed);
    }

    /// The version draws use: the one a benchmark chose, else the widest.
    pub fn current() -> Keystream {
        match CHOSEN.load(Ordering::Relaxed) {
            0 => Keystream::widest(),
            chosen => Keystream::ALL[usize::from(chosen - 1)],
        }
    }

    /// Its name in benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            Keystream::Avx512 => "avx512",
            Keystream::Avx2 => "avx2",
            Keystream::Generator => "generator",
        }
    }
}

/// Writes blocks `first..` of the stream under `key` into the front of `out` with `version`,
/// as many whole steps as fit; returns the bytes written (0 for the generator, or where fewer
/// blocks than a step fit).
///
/// # Panics
/// If this CPU does not run `version` (it is not in [`Keystream::supported`]).
pub(super) fn fill_blocks(version: Keystream, key: &[u32; 8], first: u64, out: &mut [u8]) -> usize {
    assert!(version.runs(), "{version:?} unsupported");
    match version {
        Keystream::Avx512 => ocelli_simd::chacha::fill_avx512(key, first, out).unwrap_or(0),
        Keystream::Avx2 => ocelli_simd::chacha::fill_avx2(key, first, out).unwrap_or(0),
        Keystream::Generator => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha12Rng;
    use rand_core::{RngCore, SeedableRng};

    /// Every vector version this CPU runs writes the generator's own blocks, from block
    /// counters that carry into the high word too.
    #[test]
    fn every_version_writes_the_generators_blocks() {
        let seed = [0x5Au8; 32];
        let key = crate::randomness::key_words(&ChaCha12Rng::from_seed(seed));
        for first in [0u64, 3, (1 << 32) - 5] {
            let mut rng = ChaCha12Rng::from_seed(seed);
            rng.set_word_pos(u128::from(first) * 16);
            let mut expected = vec![0u8; 5 * MAX_LANES * BLOCK_BYTES + 100];
            rng.fill_bytes(&mut expected);
            let versions: Vec<(&str, usize, Vec<u8>)> = Keystream::supported()
                .into_iter()
                .map(|version| {
                    let mut out = vec![0u8; expected.len()];
                    let n = fill_blocks(version, &key, first, &mut out);
                    (version.name(), n, out)
                })
                .collect();
            for (name, n, out) in versions {
                assert!(n.is_multiple_of(BLOCK_BYTES) && n <= out.len(), "{name}");
                assert_eq!(out[..n], expected[..n], "{name} from block {first}");
                assert!(
                    out[n..].iter().all(|&b| b == 0),
                    "{name} wrote past its blocks"
                );
            }
        }
    }
}

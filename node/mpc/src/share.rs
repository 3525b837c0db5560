//! Replicated shares of vectors.

use zerocopy::{FromBytes, Immutable, IntoBytes};

/// A word type shares are made of: `u16`, `u32` (arithmetic) or `u64` (bit-sliced bits).
pub trait Word: Copy + Default + Send + Sync + FromBytes + IntoBytes + Immutable + 'static {
    /// Bytes of one word on the wire: its size in memory.
    const BYTES: usize = core::mem::size_of::<Self>();
}

impl Word for u16 {}
impl Word for u32 {}
impl Word for u64 {}

/// Turns words' bytes in memory into little-endian ones, or back: nothing to do on a
/// little-endian target.
pub fn swap_to_le<T: Word>(bytes: &mut [u8]) {
    if cfg!(target_endian = "big") {
        for word in bytes.chunks_exact_mut(T::BYTES) {
            word.reverse();
        }
    }
}

/// Serialises words for the wire (little-endian): one copy, as every round's messages pass
/// through here.
pub fn encode<T: Word>(words: &[T]) -> Vec<u8> {
    let mut out = words.as_bytes().to_vec();
    swap_to_le::<T>(&mut out);
    out
}

/// Parses words from the wire; `None` if the length is not a whole number of words.
pub fn decode<T: Word>(bytes: &[u8]) -> Option<Vec<T>> {
    if !bytes.len().is_multiple_of(T::BYTES) {
        return None;
    }
    let mut words = vec![T::default(); bytes.len() / T::BYTES];
    let out = words.as_mut_bytes();
    out.copy_from_slice(bytes);
    swap_to_le::<T>(out);
    Some(words)
}

/// One party's replicated share of a vector: components `own = x_i` and `prev = x_{i-1}`.
#[derive(Clone, PartialEq, Eq)]
pub struct Replicated<T> {
    /// This party's component.
    pub own: Vec<T>,
    /// The previous party's component.
    pub prev: Vec<T>,
}

impl<T> core::fmt::Debug for Replicated<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Replicated")
            .field("len", &self.own.len())
            .finish_non_exhaustive()
    }
}

impl<T: Word> Replicated<T> {
    /// Builds a share from its two components.
    ///
    /// # Panics
    /// If the lengths differ.
    pub fn new(own: Vec<T>, prev: Vec<T>) -> Replicated<T> {
        assert_eq!(own.len(), prev.len());
        Replicated { own, prev }
    }

    /// The all-zero sharing of `n` zero words.
    pub fn zeros(n: usize) -> Replicated<T> {
        Replicated::new(vec![T::default(); n], vec![T::default(); n])
    }

    /// Number of words.
    pub fn len(&self) -> usize {
        self.own.len()
    }

    /// Whether there are no words.
    pub fn is_empty(&self) -> bool {
        self.own.is_empty()
    }

    /// Words `range` of both components.
    pub fn slice(&self, range: core::ops::Range<usize>) -> Replicated<T> {
        Replicated::new(self.own[range.clone()].to_vec(), self.prev[range].to_vec())
    }

    /// Concatenation.
    pub fn concat(parts: &[&Replicated<T>]) -> Replicated<T> {
        let n = parts.iter().map(|p| p.len()).sum();
        let mut own = Vec::with_capacity(n);
        let mut prev = Vec::with_capacity(n);
        for p in parts {
            own.extend_from_slice(&p.own);
            prev.extend_from_slice(&p.prev);
        }
        Replicated::new(own, prev)
    }

    /// Applies `f` to both components word by word (a linear map on the shared value when `f`
    /// is linear).
    pub fn map<U: Word>(&self, f: impl Fn(T) -> U) -> Replicated<U> {
        Replicated::new(
            self.own.iter().map(|&w| f(w)).collect(),
            self.prev.iter().map(|&w| f(w)).collect(),
        )
    }
}

impl<T: Word> Replicated<T> {
    /// Both components as bytes, to keep a share at rest: `own` then `prev`, each word
    /// little-endian.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = encode(&self.own);
        out.extend_from_slice(&encode(&self.prev));
        out
    }

    /// Parses [`Replicated::to_bytes`]; `None` unless `bytes` is two equal runs of whole words.
    pub fn from_bytes(bytes: &[u8]) -> Option<Replicated<T>> {
        if !bytes.len().is_multiple_of(2 * T::BYTES) {
            return None;
        }
        let (own, prev) = bytes.split_at(bytes.len() / 2);
        Some(Replicated::new(decode(own)?, decode(prev)?))
    }
}

impl Replicated<u64> {
    /// XOR of two shared bit vectors (local).
    pub fn xor(&self, other: &Replicated<u64>) -> Replicated<u64> {
        assert_eq!(self.len(), other.len());
        Replicated::new(
            self.own
                .iter()
                .zip(&other.own)
                .map(|(a, b)| a ^ b)
                .collect(),
            self.prev
                .iter()
                .zip(&other.prev)
                .map(|(a, b)| a ^ b)
                .collect(),
        )
    }

    /// AND with a public bit vector (local): masking a linear sharing with a public constant
    /// masks every component.
    ///
    /// # Panics
    /// If `mask` has another length.
    pub fn and_public(&self, mask: &[u64]) -> Replicated<u64> {
        assert_eq!(self.len(), mask.len());
        let and = |words: &[u64]| words.iter().zip(mask).map(|(w, m)| w & m).collect();
        Replicated::new(and(&self.own), and(&self.prev))
    }

    /// XOR with a public constant vector: only component 0 changes, so party 0 flips `own` and
    /// party 1 flips `prev`.
    pub fn xor_public(&self, party: sdk_orb::PartyId, constant: &[u64]) -> Replicated<u64> {
        let mut out = self.clone();
        match party.index() {
            0 => out.own.iter_mut().zip(constant).for_each(|(w, c)| *w ^= c),
            1 => out.prev.iter_mut().zip(constant).for_each(|(w, c)| *w ^= c),
            _ => {}
        }
        out
    }
}

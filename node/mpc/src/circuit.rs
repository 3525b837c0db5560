//! What the comparison phase's circuits need of the place their shares live: shared bit
//! vectors with local word operations ([`SharedBits`]), and a party that can AND and open them
//! and turn dot-product shares into match bits ([`Circuit`]). The carry, the OR trees, the eye
//! rule and the opening are written once against these; a [`crate::Session`] runs them on shares in
//! host memory, a backend's own circuit ([`crate::Backend::circuit`]) where it keeps them,
//! e.g. in a kernel device's memory.

use sdk_orb::PartyId;

use crate::bits::words_for;
use crate::network::NetworkError;
use crate::share::Replicated;

/// A party's replicated share of a bit-sliced vector, `words()` u64 words long. Every
/// operation is local.
pub trait SharedBits: Clone {
    /// Length in words.
    fn words(&self) -> usize;
    /// Words `range`.
    fn slice(&self, range: core::ops::Range<usize>) -> Self;
    /// XOR of two equally long vectors.
    fn xor(&self, other: &Self) -> Self;
    /// Concatenation; `parts` is not empty.
    fn concat(parts: &[&Self]) -> Self;
    /// AND with a public vector of the same length.
    fn and_public(&self, mask: &[u64]) -> Self;
    /// A vector of `positions.len()` bits whose bit `i` is bit `positions[i]` of this one, or
    /// a shared zero where `None`.
    fn gather(&self, positions: &[Option<usize>]) -> Self;
}

/// One party's side of the comparison phase's circuits.
pub trait Circuit {
    /// Where the shared bits live.
    type Bits: SharedBits;

    /// This party.
    fn party(&self) -> PartyId;

    /// The all-zero sharing of `words` words.
    fn zeros(&mut self, words: usize) -> Self::Bits;

    /// AND of equally long shared bit vectors. One round.
    ///
    /// # Errors
    /// Transport failures.
    fn and(&mut self, x: &Self::Bits, y: &Self::Bits) -> Result<Self::Bits, NetworkError>;

    /// ANDs several pairs of equally long shared bit vectors in one round; the products in
    /// the order of `pairs`. The same messages and randomness as one [`Circuit::and`] of the
    /// pairs' concatenations, which is how this default runs it.
    ///
    /// # Errors
    /// Transport failures.
    fn and_pairs(
        &mut self,
        pairs: &[(&Self::Bits, &Self::Bits)],
    ) -> Result<Vec<Self::Bits>, NetworkError> {
        let left: Vec<&Self::Bits> = pairs.iter().map(|p| p.0).collect();
        let right: Vec<&Self::Bits> = pairs.iter().map(|p| p.1).collect();
        let product = self.and(&Self::Bits::concat(&left), &Self::Bits::concat(&right))?;
        let mut at = 0;
        Ok(pairs
            .iter()
            .map(|p| {
                let len = p.0.words();
                at += len;
                product.slice(at - len..at)
            })
            .collect())
    }

    /// Opens shared bit words to all three parties. One round.
    ///
    /// # Errors
    /// Transport failures.
    fn open(&mut self, x: &Self::Bits) -> Result<Vec<u64>, NetworkError>;

    /// Shared match bits (one plane) for additive dot-product shares over Z_{2^16}:
    /// `2^16 cd > A md` ([`crate::compare::compare`]).
    ///
    /// # Errors
    /// Transport failures.
    fn match_bits(&mut self, cd: &[u16], md: &[u16], a: u32) -> Result<Self::Bits, NetworkError>;
}

impl<C: Circuit + ?Sized> Circuit for &mut C {
    type Bits = C::Bits;

    fn party(&self) -> PartyId {
        (**self).party()
    }

    fn zeros(&mut self, words: usize) -> C::Bits {
        (**self).zeros(words)
    }

    fn and(&mut self, x: &C::Bits, y: &C::Bits) -> Result<C::Bits, NetworkError> {
        (**self).and(x, y)
    }

    fn and_pairs(&mut self, pairs: &[(&C::Bits, &C::Bits)]) -> Result<Vec<C::Bits>, NetworkError> {
        (**self).and_pairs(pairs)
    }

    fn open(&mut self, x: &C::Bits) -> Result<Vec<u64>, NetworkError> {
        (**self).open(x)
    }

    fn match_bits(&mut self, cd: &[u16], md: &[u16], a: u32) -> Result<C::Bits, NetworkError> {
        (**self).match_bits(cd, md, a)
    }
}

impl SharedBits for Replicated<u64> {
    fn words(&self) -> usize {
        self.len()
    }

    fn slice(&self, range: core::ops::Range<usize>) -> Self {
        Replicated::slice(self, range)
    }

    fn xor(&self, other: &Self) -> Self {
        Replicated::xor(self, other)
    }

    fn concat(parts: &[&Self]) -> Self {
        Replicated::concat(parts)
    }

    fn and_public(&self, mask: &[u64]) -> Self {
        Replicated::and_public(self, mask)
    }

    fn gather(&self, positions: &[Option<usize>]) -> Self {
        let pick = |words: &[u64]| -> Vec<u64> {
            let mut out = vec![0u64; words_for(positions.len())];
            for (i, p) in positions.iter().enumerate() {
                if let Some(p) = p {
                    out[i / 64] |= ((words[p / 64] >> (p % 64)) & 1) << (i % 64);
                }
            }
            out
        };
        Replicated::new(pick(&self.own), pick(&self.prev))
    }
}

//! The comparison phase: from additive dot-product shares `(cd, md)` over Z_{2^16} to a shared
//! match bit per comparison, and the OR/AND trees over rotations, eyes and the database.
//!
//! Per comparison: reshare (1 round); MPCLift of `md` to Z_{2^32}: full adder (1), carry tree
//! over 15 positions (5), bit injection of two carry bits (2); `x = A md - 2^16 cd` locally;
//! MSB of `x`: full adder (1), carry tree over 30 positions (6). `MSB(x) = 1` iff
//! `2^16 cd > A md`: strict, so `md = 0` never matches.

use crate::binary::{carry_into, carry_save};
use crate::bits::words_for;
use crate::inject::inject_bits;
use crate::network::{NetworkError, Transport};
use crate::session::Session;
use crate::share::Replicated;

/// Lifts replicated shares of `md` from Z_{2^16} to Z_{2^32} (MPCLift). The components summed
/// as integers give `S = md + 2^16 (c_15 + C_16)`, where `c_15` is the top carry of the full
/// adder and `C_16` the carry into bit 16; both bits are injected and subtracted.
///
/// # Errors
/// Transport failures.
pub fn lift<T: Transport>(
    session: &mut Session<'_, T>,
    md: &Replicated<u16>,
) -> Result<Replicated<u32>, NetworkError> {
    let n = md.len();
    let w = words_for(n);
    let cs = carry_save(session, md, 16)?;
    let c16 = carry_into(session, &cs, 16)?;
    let c15 = cs.c(15);
    let injected = inject_bits(session, &Replicated::concat(&[&c15, &c16]))?;
    let overflow = |comp: &[u16]| -> Vec<u32> {
        (0..n)
            .map(|e| u32::from(comp[e].wrapping_add(comp[64 * w + e])) << 16)
            .collect()
    };
    let (o_own, o_prev) = (overflow(&injected.own), overflow(&injected.prev));
    Ok(Replicated::new(
        (0..n)
            .map(|e| u32::from(md.own[e]).wrapping_sub(o_own[e]))
            .collect(),
        (0..n)
            .map(|e| u32::from(md.prev[e]).wrapping_sub(o_prev[e]))
            .collect(),
    ))
}

/// The most significant bit of shared 32-bit values, as one bit plane.
///
/// # Errors
/// Transport failures.
pub fn msb<T: Transport>(
    session: &mut Session<'_, T>,
    x: &Replicated<u32>,
) -> Result<Replicated<u64>, NetworkError> {
    let cs = carry_save(session, x, 32)?;
    let carry = carry_into(session, &cs, 31)?;
    Ok(cs.s(31).xor(&cs.c(30)).xor(&carry))
}

/// One party's share of everything the comparison phase computes for a batch of comparisons,
/// in the order it computes them. The conformance vectors record these; the pipeline keeps
/// only [`Comparison::matches`].
#[derive(Debug)]
pub struct Comparison {
    /// `cd` over Z_{2^16}, reshared from the additive inputs. Its lift to Z_{2^32} is
    /// `2^16 cd`, computed locally.
    pub cd: Replicated<u16>,
    /// `md` over Z_{2^16}, reshared from the additive inputs.
    pub md: Replicated<u16>,
    /// `md` lifted to Z_{2^32} (MPCLift): the integer `md`, not reduced mod 2^16.
    pub lifted_md: Replicated<u32>,
    /// `x = A md - 2^16 cd` in Z_{2^32}.
    pub x: Replicated<u32>,
    /// `MSB(x)`, one bit plane: 1 iff `2^16 cd > A md`.
    pub matches: Replicated<u64>,
}

/// The comparison phase for additive dot-product shares `(cd, md)` over Z_{2^16}: reshare,
/// lift `md`, form `x = A md - 2^16 cd`, extract its MSB. Draws from the streams in that
/// order: the resharing (`2n` u16 each), then the lift and the MSB (see [`lift`], [`msb`]).
///
/// # Errors
/// Transport failures.
///
/// # Panics
/// If the two inputs differ in length.
pub fn compare<T: Transport>(
    session: &mut Session<'_, T>,
    cd: &[u16],
    md: &[u16],
    a: u32,
) -> Result<Comparison, NetworkError> {
    assert_eq!(cd.len(), md.len());
    let n = cd.len();
    let (cd, md) = {
        let both: Vec<u16> = cd.iter().chain(md).copied().collect();
        let shared = session.reshare_u16(&both)?;
        (shared.slice(0..n), shared.slice(n..2 * n))
    };
    let lifted_md = lift(session, &md)?;
    let x = |m: &[u32], c: &[u16]| -> Vec<u32> {
        m.iter()
            .zip(c)
            .map(|(&m, &c)| a.wrapping_mul(m).wrapping_sub(u32::from(c) << 16))
            .collect()
    };
    let x = Replicated::new(x(&lifted_md.own, &cd.own), x(&lifted_md.prev, &cd.prev));
    let matches = msb(session, &x)?;
    Ok(Comparison {
        cd,
        md,
        lifted_md,
        x,
        matches,
    })
}

/// Shared match bits (one plane) for additive dot-product shares: `2^16 cd > A md`. The
/// [`compare`] run, keeping only the bits.
///
/// # Errors
/// Transport failures.
///
/// # Panics
/// If the two inputs differ in length.
pub fn match_bits<T: Transport>(
    session: &mut Session<'_, T>,
    cd: &[u16],
    md: &[u16],
    a: u32,
) -> Result<Replicated<u64>, NetworkError> {
    Ok(compare(session, cd, md, a)?.matches)
}

/// OR of shared bit vectors: `x ^ y ^ (x & y)`. One round.
///
/// # Errors
/// Transport failures.
pub fn or<T: Transport>(
    session: &mut Session<'_, T>,
    x: &Replicated<u64>,
    y: &Replicated<u64>,
) -> Result<Replicated<u64>, NetworkError> {
    Ok(x.xor(y).xor(&session.and(x, y)?))
}

/// ORs `groups` equal-length blocks of `x` together (block `g` = words `g*w..(g+1)*w`) with a
/// balanced tree, one round per level; returns one block.
///
/// # Errors
/// Transport failures.
///
/// # Panics
/// If `x` is not `groups` blocks long.
pub fn or_blocks<T: Transport>(
    session: &mut Session<'_, T>,
    x: &Replicated<u64>,
    groups: usize,
) -> Result<Replicated<u64>, NetworkError> {
    assert!(groups > 0 && x.len().is_multiple_of(groups));
    let w = x.len() / groups;
    let mut current = x.clone();
    let mut count = groups;
    while count > 1 {
        let half = count / 2;
        let lo = current.slice(0..half * w);
        let hi = current.slice(half * w..2 * half * w);
        let mut merged = or(session, &lo, &hi)?;
        if count % 2 == 1 {
            merged = Replicated::concat(&[&merged, &current.slice(2 * half * w..count * w)]);
        }
        current = merged;
        count = half + count % 2;
    }
    Ok(current)
}

#[cfg(test)]
mod tests;

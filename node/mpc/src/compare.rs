//! The comparison phase: from additive dot-product shares `(cd, md)` over Z_{2^16} to a shared
//! match bit per comparison, and the OR/AND trees over rotations, eyes and the database.
//!
//! Two-part form. [`split`] turns the additive shares into `v = a + b` (mod 2^16) with `a` held
//! by party 1 alone and `b` by parties 0 and 2 together (one round). Everything up to the
//! binary adder then works on the two parts:
//!
//! - Lift of `md` (genuine pairs have `md <= 12,800 < 2^15`): `a + b` wraps 2^16 exactly when
//!   `a >= 2^15` or `b >= 2^15` (if it wraps, one part is at least 2^15; if not, both are below
//!   `md`). With `u`, `v` those top bits, known to party 1 and to parties 0 and 2, the integer
//!   `md = a + b - 2^16 (u + v - u v)`.
//! - `x = A md - 2^16 cd` in Z_{2^32}; `2^16 cd` lifts `cd` for free. Everything but the cross
//!   term `2^16 A u v` splits by holder. The cross term's Z_{2^16} factor `A u v` is split by
//!   one three-party OT (sender party 1, choice `v`): 2 bytes from each party.
//! - `MSB(x)`: party 1 inputs its 32-bit part as a binary sharing, parties 0 and 2 hold theirs
//!   as a component already, and [`crate::binary::carry_into`] adds them.
//!
//! `MSB(x) = 1` iff `2^16 cd > A md`: strict, so `md = 0` never matches. Rounds: split 1,
//! cross term 1, exchange of the parts 1, carry 7: 10. Bytes each party sends per
//! comparison: 13.75 (party 0: split 4, cross term 2, AND gates 7.75; party 1: cross term 2,
//! binary input 4, gates 7.75; party 2: split 4, forwarding `q` 2, gates 7.75).

use crate::binary::{carry_into, plane};
use crate::bits::{to_planes_u32, words_for};
use crate::circuit::{Circuit, SharedBits};
use crate::network::{NetworkError, Peer, Transport};
use crate::session::Session;
use crate::share::Replicated;

/// Bits of `x`; its MSB is the sign of `A md - 2^16 cd` for every pair in the domain.
const X_BITS: usize = 32;

/// Turns additive shares `s_i` over Z_{2^16} into two parts `a + b = s_0 + s_1 + s_2`: party 1
/// gets `a = (s_0 + r) + s_1 - t`, parties 0 and 2 get `b = s_2 + t - r`, with `r` from the
/// stream of parties 2 and 0 and `t` from the stream of parties 1 and 2. Party 0 sends
/// `s_0 + r` to party 1 and party 2 sends `b` to party 0, each masked by a pad its receiver
/// lacks. One round; draws `n` u16 from each of those two streams. Returns this party's part.
///
/// # Errors
/// Transport failures.
pub fn split<T: Transport>(
    session: &mut Session<'_, T>,
    additive: &[u16],
) -> Result<Vec<u16>, NetworkError> {
    let n = additive.len();
    session.round();
    match session.party().index() {
        0 => {
            let r = session.randomness().prev_u16(n);
            session.send(Peer::Next, &add(additive, &r))?;
            session.recv(Peer::Prev, n)
        }
        1 => {
            let t = session.randomness().next_u16(n);
            let masked: Vec<u16> = session.recv(Peer::Prev, n)?;
            Ok(sub(&add(&masked, additive), &t))
        }
        _ => {
            let r = session.randomness().next_u16(n);
            let t = session.randomness().prev_u16(n);
            let b = sub(&add(additive, &t), &r);
            session.send(Peer::Next, &b)?;
            Ok(b)
        }
    }
}

fn add(x: &[u16], y: &[u16]) -> Vec<u16> {
    x.iter().zip(y).map(|(a, b)| a.wrapping_add(*b)).collect()
}

fn sub(x: &[u16], y: &[u16]) -> Vec<u16> {
    x.iter().zip(y).map(|(a, b)| a.wrapping_sub(*b)).collect()
}

/// The top bit of each part: `u` at party 1, `v` at parties 0 and 2.
fn top_bits(md: &[u16]) -> Vec<u16> {
    md.iter().map(|m| m >> 15).collect()
}

/// This party's part of `A u v` over Z_{2^16}, by a three-party OT in which party 1 sends,
/// party 2 receives with choice `v` and party 0, which knows `v` too, helps. Pads `W_0, W_1`
/// come from the stream of parties 0 and 1, `p_2` from the stream of parties 1 and 2. Party 1
/// keeps `p = W_0 + p_2`, so neither party that ends up with `q = A u v - p` can unmask it.
/// Party 1's message for `v = 0` would be `W_0 - p = -p_2`, which party 2 already knows, so it
/// sends only `k_1 = W_1 + A u - p`; party 0 sends `W_v`; party 2 takes `q = k_v - W_v`.
/// Returns `p` at party 1, `q` at party 2 and nothing at party 0, which gets `q` in
/// [`exchange_parts`]. One round; draws `n` u16 `W_0`, then `n` u16 `W_1` from the stream of
/// parties 0 and 1, and `n` u16 `p_2` from the stream of parties 1 and 2.
fn cross_term<T: Transport>(
    session: &mut Session<'_, T>,
    md: &[u16],
    a: Coefficients<'_>,
) -> Result<Vec<u16>, NetworkError> {
    let n = md.len();
    let top = top_bits(md);
    session.round();
    match session.party().index() {
        0 => {
            let w0 = session.randomness().next_u16(n);
            let w1 = session.randomness().next_u16(n);
            let chosen: Vec<u16> = (0..n)
                .map(|e| if top[e] == 1 { w1[e] } else { w0[e] })
                .collect();
            session.send(Peer::Prev, &chosen)?;
            Ok(Vec::new())
        }
        1 => {
            let w0 = session.randomness().prev_u16(n);
            let w1 = session.randomness().prev_u16(n);
            let p2 = session.randomness().next_u16(n);
            let p = add(&w0, &p2);
            let k1: Vec<u16> = (0..n)
                .map(|e| {
                    w1[e]
                        .wrapping_add((a.at(e) as u16).wrapping_mul(top[e]))
                        .wrapping_sub(p[e])
                })
                .collect();
            session.send(Peer::Next, &k1)?;
            Ok(p)
        }
        _ => {
            let p2 = session.randomness().prev_u16(n);
            let k1: Vec<u16> = session.recv(Peer::Prev, n)?;
            let chosen: Vec<u16> = session.recv(Peer::Next, n)?;
            Ok((0..n)
                .map(|e| {
                    let k = if top[e] == 1 {
                        k1[e]
                    } else {
                        0u16.wrapping_sub(p2[e])
                    };
                    k.wrapping_sub(chosen[e])
                })
                .collect())
        }
    }
}

/// This party's parts after the exchange.
struct XParts {
    /// Its part of the cross term (`q` now also at party 0).
    cross: Vec<u16>,
    /// Its part of `x`.
    x: Vec<u32>,
    /// Party 1's part of `x` as an XOR sharing.
    single: Replicated<u64>,
    /// The part of parties 0 and 2 as an XOR sharing.
    pair: Replicated<u64>,
}

/// Each party's part of `x` as a binary sharing of two values: party 1's part as components
/// `(R, x_1 ^ R, 0)` with planes `R` from the stream of parties 0 and 1 (party 1 sends
/// `x_1 ^ R` to party 2), and the part of parties 0 and 2 as component 2 (party 2 forwards
/// `q` to party 0 first, which completes its part). One round; draws `X_BITS * words_for(n)`
/// u64 from the stream of parties 0 and 1.
fn exchange_parts<T: Transport>(
    session: &mut Session<'_, T>,
    cd: &[u16],
    md: &[u16],
    mut cross: Vec<u16>,
    a: Coefficients<'_>,
) -> Result<XParts, NetworkError> {
    let n = md.len();
    let planes = X_BITS * words_for(n);
    let zeros = || vec![0u64; planes];
    session.round();
    let x_of = |cross: &[u16]| x_part(md, cd, &top_bits(md), cross, a);
    match session.party().index() {
        0 => {
            let r = session.randomness().next_bits(planes);
            cross = session.recv(Peer::Prev, n)?;
            let x = x_of(&cross);
            let pair = Replicated::new(zeros(), to_planes_u32(&x, X_BITS));
            let single = Replicated::new(r, zeros());
            Ok(XParts {
                cross,
                x,
                single,
                pair,
            })
        }
        1 => {
            let r = session.randomness().prev_bits(planes);
            let x = x_of(&cross);
            let masked: Vec<u64> = to_planes_u32(&x, X_BITS)
                .iter()
                .zip(&r)
                .map(|(x, r)| x ^ r)
                .collect();
            session.send(Peer::Next, &masked)?;
            let single = Replicated::new(masked, r);
            let pair = Replicated::zeros(planes);
            Ok(XParts {
                cross,
                x,
                single,
                pair,
            })
        }
        _ => {
            session.send(Peer::Next, &cross)?;
            let masked: Vec<u64> = session.recv(Peer::Prev, planes)?;
            let x = x_of(&cross);
            let pair = Replicated::new(to_planes_u32(&x, X_BITS), zeros());
            let single = Replicated::new(zeros(), masked);
            Ok(XParts {
                cross,
                x,
                single,
                pair,
            })
        }
    }
}

/// A holder's part of `x = A md - 2^16 cd` in Z_{2^32}: `A m - 2^16 (c + A t - k)` for its
/// parts `m`, `c`, top bit `t` and cross-term part `k`. `2^16 y` in Z_{2^32} depends only on
/// `y` mod 2^16, so the bracket is formed over Z_{2^16}.
fn x_part(md: &[u16], cd: &[u16], top: &[u16], cross: &[u16], a: Coefficients<'_>) -> Vec<u32> {
    (0..md.len())
        .map(|e| {
            let a = a.at(e);
            let high = cd[e]
                .wrapping_add((a as u16).wrapping_mul(top[e]))
                .wrapping_sub(cross[e]);
            a.wrapping_mul(u32::from(md[e]))
                .wrapping_sub(u32::from(high) << 16)
        })
        .collect()
}

/// One party's share of everything the comparison phase computes for a batch of comparisons,
/// in the order it computes them. The conformance vectors record these; the pipeline keeps
/// only [`Comparison::matches`].
#[derive(Debug)]
pub struct Comparison {
    /// This party's part of `cd` after [`split`]: `a` at party 1, `b` at parties 0 and 2.
    pub cd: Vec<u16>,
    /// This party's part of `md` after [`split`].
    pub md: Vec<u16>,
    /// This party's part of `A u v` over Z_{2^16}: `p` at party 1, `q` at parties 0 and 2.
    pub cross: Vec<u16>,
    /// This party's part of `x = A md - 2^16 cd` in Z_{2^32}: the integer `md`, lifted.
    pub x: Vec<u32>,
    /// `MSB(x)`, one replicated bit plane: 1 iff `2^16 cd > A md`.
    pub matches: Replicated<u64>,
}

/// The comparison phase for additive dot-product shares `(cd, md)` over Z_{2^16}, for pairs
/// with `md < 2^15` and `A md - 2^16 cd` in `[-2^31, 2^31)` (every genuine pair: `|cd| <= md
/// <= 12,800`). Draws from the streams in this order: [`split`] of `cd` then `md` as one
/// vector of `2n`, the cross term, party 1's binary input, then one
/// XOR zero-sharing per AND round of the adder ([`Session::and`]).
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
    compare_with(session, cd, md, Coefficients::One(a))
}

/// [`compare`] with a coefficient per comparison: `a[e]` for comparison `e`, e.g. a bucket
/// edge each. The same rounds, messages and draws as [`compare`]; `A` enters only local
/// arithmetic and party 1's cross-term message.
///
/// # Errors
/// Transport failures.
///
/// # Panics
/// If the inputs and `a` differ in length.
pub fn compare_each<T: Transport>(
    session: &mut Session<'_, T>,
    cd: &[u16],
    md: &[u16],
    a: &[u32],
) -> Result<Comparison, NetworkError> {
    assert_eq!(cd.len(), a.len());
    compare_with(session, cd, md, Coefficients::Each(a))
}

/// The coefficient `A` of each comparison.
#[derive(Clone, Copy)]
enum Coefficients<'a> {
    /// One for all.
    One(u32),
    /// One per comparison.
    Each(&'a [u32]),
}

impl Coefficients<'_> {
    fn at(self, e: usize) -> u32 {
        match self {
            Coefficients::One(a) => a,
            Coefficients::Each(a) => a[e],
        }
    }
}

fn compare_with<T: Transport>(
    session: &mut Session<'_, T>,
    cd: &[u16],
    md: &[u16],
    a: Coefficients<'_>,
) -> Result<Comparison, NetworkError> {
    assert_eq!(cd.len(), md.len());
    let n = cd.len();
    let w = words_for(n);
    let (cd, md) = {
        let both: Vec<u16> = cd.iter().chain(md).copied().collect();
        let mut parts = split(session, &both)?;
        let md = parts.split_off(n);
        (parts, md)
    };
    let cross = cross_term(session, &md, a)?;
    let XParts {
        cross,
        x,
        single,
        pair,
    } = exchange_parts(session, &cd, &md, cross, a)?;
    let carry = carry_into(session, &single, &pair, w, X_BITS - 1)?;
    let top = X_BITS - 1;
    let matches = plane(&single, w, top)
        .xor(&plane(&pair, w, top))
        .xor(&carry);
    Ok(Comparison {
        cd,
        md,
        cross,
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
pub fn or<C: Circuit>(circuit: &mut C, x: &C::Bits, y: &C::Bits) -> Result<C::Bits, NetworkError> {
    Ok(x.xor(y).xor(&circuit.and(x, y)?))
}

/// ORs `groups` equal-length blocks of `x` together (block `g` = words `g*w..(g+1)*w`) with a
/// balanced tree, one round per level; returns one block.
///
/// # Errors
/// Transport failures.
///
/// # Panics
/// If `x` is not `groups` blocks long.
pub fn or_blocks<C: Circuit>(
    circuit: &mut C,
    x: &C::Bits,
    groups: usize,
) -> Result<C::Bits, NetworkError> {
    assert!(groups > 0 && x.words().is_multiple_of(groups));
    let w = x.words() / groups;
    let mut current = x.clone();
    let mut count = groups;
    while count > 1 {
        let half = count / 2;
        let lo = current.slice(0..half * w);
        let hi = current.slice(half * w..2 * half * w);
        let mut merged = or(circuit, &lo, &hi)?;
        if count % 2 == 1 {
            merged = C::Bits::concat(&[&merged, &current.slice(2 * half * w..count * w)]);
        }
        current = merged;
        count = half + count % 2;
    }
    Ok(current)
}

/// The host-memory circuit: shares in [`Replicated`] vectors, rounds through the session.
impl<T: Transport> Circuit for Session<'_, T> {
    type Bits = Replicated<u64>;

    fn party(&self) -> sdk_orb::PartyId {
        Session::party(self)
    }

    fn zeros(&mut self, words: usize) -> Replicated<u64> {
        Replicated::zeros(words)
    }

    fn and(
        &mut self,
        x: &Replicated<u64>,
        y: &Replicated<u64>,
    ) -> Result<Replicated<u64>, NetworkError> {
        Session::and(self, x, y)
    }

    fn and_pairs(
        &mut self,
        pairs: &[(&Replicated<u64>, &Replicated<u64>)],
    ) -> Result<Vec<Replicated<u64>>, NetworkError> {
        Session::and_pairs(self, pairs)
    }

    fn open(&mut self, x: &Replicated<u64>) -> Result<Vec<u64>, NetworkError> {
        self.open_bits(x)
    }

    fn match_bits(
        &mut self,
        cd: &[u16],
        md: &[u16],
        a: u32,
    ) -> Result<Replicated<u64>, NetworkError> {
        match_bits(self, cd, md, a)
    }
}

#[cfg(test)]
mod tests;

//! Binary circuits on bit-sliced replicated shares: the arithmetic-to-binary adder and the
//! carry tree behind MSB extraction and MPCLift.

use crate::bits::{to_planes, words_for};
use crate::network::{NetworkError, Transport};
use crate::session::Session;
use crate::share::{Replicated, Word};

/// The sum of a value's three arithmetic components, as bit planes of the carry-save pair
/// `(s, c)` with `x_0 + x_1 + x_2 = s + 2 c` over the integers (no modular reduction).
#[derive(Debug)]
pub struct CarrySave {
    /// Words per plane.
    pub words: usize,
    /// `k` planes of `s = x_0 ^ x_1 ^ x_2`.
    pub sum: Replicated<u64>,
    /// `k` planes of `c = maj(x_0, x_1, x_2)`.
    pub carry: Replicated<u64>,
}

impl CarrySave {
    /// Plane `j` of `s`.
    pub fn s(&self, j: usize) -> Replicated<u64> {
        self.sum.slice(j * self.words..(j + 1) * self.words)
    }

    /// Plane `j` of `c`.
    pub fn c(&self, j: usize) -> Replicated<u64> {
        self.carry.slice(j * self.words..(j + 1) * self.words)
    }
}

/// The full-adder layer of the arithmetic-to-binary conversion for `k`-bit components. Each
/// arithmetic component `x_j` is known to parties `j` and `j+1`, so it is a binary sharing with
/// component `j` set and the others zero; no communication is needed to input it.
/// One round (`k * words` AND gates).
///
/// # Errors
/// Transport failures.
pub fn carry_save<T: Transport, W: Word + Into<u64>>(
    session: &mut Session<'_, T>,
    x: &Replicated<W>,
    k: usize,
) -> Result<CarrySave, NetworkError> {
    let words = words_for(x.len());
    let own = to_planes(&x.own, k);
    let prev = to_planes(&x.prev, k);
    let zero = vec![0u64; own.len()];
    let i = session.party().index();
    // Input j at party i: own component if i == j, prev component if i - 1 == j.
    let input = |j: usize| {
        Replicated::new(
            if i == j { own.clone() } else { zero.clone() },
            if (i + 2) % 3 == j {
                prev.clone()
            } else {
                zero.clone()
            },
        )
    };
    let (a, b, c) = (input(0), input(1), input(2));
    // maj(a, b, c) = ((a ^ c) & (b ^ c)) ^ c.
    let carry = session.and(&a.xor(&c), &b.xor(&c))?.xor(&c);
    Ok(CarrySave {
        words,
        sum: Replicated::new(own, prev),
        carry,
    })
}

/// The carry into position `top` of `s + 2 c`: the group generate over positions `1..top`,
/// with `g_j = s_j & c_{j-1}` and `p_j = s_j ^ c_{j-1}` (position 0 never generates since
/// `(2c)_0 = 0`). `1 + ceil(log2(top - 1))` rounds.
///
/// # Errors
/// Transport failures.
pub fn carry_into<T: Transport>(
    session: &mut Session<'_, T>,
    cs: &CarrySave,
    top: usize,
) -> Result<Replicated<u64>, NetworkError> {
    let w = cs.words;
    // Planes s_1..s_{top-1} and c_0..c_{top-2} are contiguous.
    let s = cs.sum.slice(w..top * w);
    let c = cs.carry.slice(0..(top - 1) * w);
    let g = session.and(&s, &c)?;
    let p = s.xor(&c);
    let planes = top - 1;
    let nodes: Vec<(Replicated<u64>, Option<Replicated<u64>>)> = (0..planes)
        .map(|j| {
            let gj = g.slice(j * w..(j + 1) * w);
            // The lowest position's propagate is never needed.
            let pj = (j > 0).then(|| p.slice(j * w..(j + 1) * w));
            (gj, pj)
        })
        .collect();
    group_generate(session, nodes, w)
}

/// Reduces `(generate, propagate)` nodes, lowest position first, to the generate of the whole
/// range with a balanced tree; all gates of one level share a round.
fn group_generate<T: Transport>(
    session: &mut Session<'_, T>,
    mut nodes: Vec<(Replicated<u64>, Option<Replicated<u64>>)>,
    w: usize,
) -> Result<Replicated<u64>, NetworkError> {
    if nodes.is_empty() {
        return Ok(Replicated::zeros(w));
    }
    while nodes.len() > 1 {
        // For each pair (lo, hi): P_hi & G_lo, and P_hi & P_lo where lo has a P.
        let mut left = Vec::new();
        let mut right = Vec::new();
        for pair in nodes.chunks(2) {
            if let [lo, hi] = pair {
                let p_hi = hi.1.as_ref().expect("only the lowest node lacks P");
                left.push(p_hi);
                right.push(&lo.0);
                if let Some(p_lo) = &lo.1 {
                    left.push(p_hi);
                    right.push(p_lo);
                }
            }
        }
        let products = session.and(&Replicated::concat(&left), &Replicated::concat(&right))?;
        let mut at = 0;
        let mut next = Vec::with_capacity(nodes.len().div_ceil(2));
        for pair in nodes.chunks(2) {
            match pair {
                [lo, hi] => {
                    let g = hi.0.xor(&products.slice(at * w..(at + 1) * w));
                    at += 1;
                    let p = if lo.1.is_some() {
                        at += 1;
                        Some(products.slice((at - 1) * w..at * w))
                    } else {
                        None
                    };
                    next.push((g, p));
                }
                [single] => next.push(single.clone()),
                _ => unreachable!("chunks of two"),
            }
        }
        nodes = next;
    }
    Ok(nodes.remove(0).0)
}

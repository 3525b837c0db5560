//! Binary circuits on bit-sliced replicated shares: the carry of a two-input adder, behind
//! the MSB extraction of the comparison phase.
//!
//! A `k`-bit shared value is `k` planes of `w` words, plane `j` at words `j*w..(j+1)*w`.

use crate::circuit::{Circuit, SharedBits};
use crate::network::NetworkError;

/// Positions per ripple block of [`carry_into`]: four AND rounds of ripple, then a tree over
/// the blocks. Four balances gates against rounds for 31 positions: 62 AND gates in 7
/// rounds, where a tree over single positions takes 86 gates in 6 rounds.
pub const RIPPLE_BLOCK: usize = 4;

/// Plane `j` of a `w`-word-per-plane value.
pub fn plane<B: SharedBits>(x: &B, w: usize, j: usize) -> B {
    x.slice(j * w..(j + 1) * w)
}

/// The carry into position `top` of `a + b`, for `a` and `b` given as bit planes of `w`
/// words (at least `top` planes each).
///
/// Positions `0..top` are cut into blocks of [`RIPPLE_BLOCK`]. Within each block the carry
/// out (with no carry in) ripples one position per round, `c' = c ^ ((a_j ^ c) & (b_j ^ c))`
/// (one AND gate per position; the first is `a_j & b_j`), while the block's propagate, the
/// AND of its `a_j ^ b_j`, is formed by a tree in the same rounds. A balanced tree of
/// (generate, propagate) pairs then combines the blocks, lowest first; the lowest block needs
/// no propagate. Rounds: `RIPPLE_BLOCK + ceil(log2(blocks))`; AND gates: `top` for the
/// ripple, `RIPPLE_BLOCK - 1` per block above the lowest, and about two per block merge.
///
/// # Errors
/// Transport failures.
pub fn carry_into<C: Circuit>(
    circuit: &mut C,
    a: &C::Bits,
    b: &C::Bits,
    w: usize,
    top: usize,
) -> Result<C::Bits, NetworkError> {
    if top == 0 {
        return Ok(circuit.zeros(w));
    }
    let blocks: Vec<core::ops::Range<usize>> = (0..top)
        .step_by(RIPPLE_BLOCK)
        .map(|start| start..(start + RIPPLE_BLOCK).min(top))
        .collect();
    let a_planes: Vec<C::Bits> = (0..top).map(|j| plane(a, w, j)).collect();
    let b_planes: Vec<C::Bits> = (0..top).map(|j| plane(b, w, j)).collect();
    let mut carry: Vec<Option<C::Bits>> = vec![None; blocks.len()];
    // Each block's propagate, as the factors of the AND tree still to be multiplied.
    let mut propagate: Vec<Vec<C::Bits>> = blocks
        .iter()
        .enumerate()
        .map(|(index, range)| {
            if index == 0 {
                Vec::new()
            } else {
                range
                    .clone()
                    .map(|j| a_planes[j].xor(&b_planes[j]))
                    .collect()
            }
        })
        .collect();

    let mut step = 0;
    while step < RIPPLE_BLOCK || propagate.iter().any(|f| f.len() > 1) {
        // The ripple gate's inputs where a carry is folded in; the planes themselves where
        // not (the first position of a block).
        let folded: Vec<Option<(C::Bits, C::Bits)>> = blocks
            .iter()
            .zip(&carry)
            .map(|(range, c)| {
                let j = range.start + step;
                c.as_ref()
                    .filter(|_| j < range.end)
                    .map(|c| (a_planes[j].xor(c), b_planes[j].xor(c)))
            })
            .collect();
        let mut pairs: Vec<(&C::Bits, &C::Bits)> = Vec::new();
        for (range, folded) in blocks.iter().zip(&folded) {
            let j = range.start + step;
            if j < range.end {
                pairs.push(match folded {
                    Some((x, y)) => (x, y),
                    None => (&a_planes[j], &b_planes[j]),
                });
            }
        }
        for factors in &propagate {
            for two in factors.chunks_exact(2) {
                pairs.push((&two[0], &two[1]));
            }
        }
        if pairs.is_empty() {
            break;
        }
        let mut products = circuit.and_pairs(&pairs)?.into_iter();
        for (index, range) in blocks.iter().enumerate() {
            if range.start + step < range.end {
                let product = products.next().expect("one product per ripple gate");
                carry[index] = Some(match carry[index].take() {
                    None => product,
                    Some(c) => c.xor(&product),
                });
            }
        }
        for factors in &mut propagate {
            let odd = (factors.len() % 2 == 1).then(|| factors.pop()).flatten();
            let mut next: Vec<C::Bits> = (0..factors.len() / 2)
                .map(|_| products.next().expect("one product per propagate gate"))
                .collect();
            next.extend(odd);
            *factors = next;
        }
        step += 1;
    }

    let nodes = carry
        .into_iter()
        .zip(propagate)
        .map(|(g, mut p)| (g.expect("every block has a position"), p.pop()))
        .collect();
    group_generate(circuit, nodes, w)
}

/// Reduces `(generate, propagate)` nodes, lowest position first, to the generate of the whole
/// range with a balanced tree; all gates of one level share a round. Only the lowest node may
/// lack a propagate. `G = G_hi ^ (P_hi & G_lo)`: XOR, since a block that propagates everything
/// generates nothing.
fn group_generate<C: Circuit>(
    circuit: &mut C,
    mut nodes: Vec<(C::Bits, Option<C::Bits>)>,
    w: usize,
) -> Result<C::Bits, NetworkError> {
    if nodes.is_empty() {
        return Ok(circuit.zeros(w));
    }
    while nodes.len() > 1 {
        // For each pair (lo, hi): P_hi & G_lo, and P_hi & P_lo where lo has a P.
        let mut pairs = Vec::new();
        for pair in nodes.chunks(2) {
            if let [lo, hi] = pair {
                let p_hi = hi.1.as_ref().expect("only the lowest node lacks P");
                pairs.push((p_hi, &lo.0));
                if let Some(p_lo) = &lo.1 {
                    pairs.push((p_hi, p_lo));
                }
            }
        }
        let mut products = circuit.and_pairs(&pairs)?.into_iter();
        let mut next = Vec::with_capacity(nodes.len().div_ceil(2));
        for pair in nodes.chunks(2) {
            match pair {
                [lo, hi] => {
                    let g = hi.0.xor(&products.next().expect("a product per merge"));
                    let p =
                        lo.1.as_ref()
                            .map(|_| products.next().expect("a P per merge"));
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

//! The 31 rotations of a query by fast correlation.
//!
//! A rotation by `k` moves whole ring elements (four coefficients) `k` places along each
//! chunk of 200 elements ([`sdk_orb::rotation::rotate_coefs`]). Against one database row `y`,
//! the rotations of a query `x` are therefore a cyclic cross-correlation, one per chunk and
//! coefficient position: `out[k] = sum_e y[e] x[e - k]`.
//!
//! Two outputs `out[2j]`, `out[2j + 1]` over a pair of elements are a 2 x 2 Toeplitz product,
//! which takes three multiplications instead of four (Karatsuba; no division, so exact mod
//! 2^16). With `xe`, `xo` the even and odd elements of `x` (likewise `y`) and `xs[m] =
//! xo[m - 1]`, each of the three is again a correlation at lag `j` over half as many
//! elements:
//!
//! ```text
//! out[2j]     = A[j] + B[j]      A: y = ye + yo,  x = xe
//! out[2j + 1] = A[j] + C[j]      B: y = yo,       x = xo - xe
//!                                C: y = ye,       x = xs - xe
//! ```
//!
//! Two levels give nine leaves of a quarter of the length, each needing the eight lags
//! `-4..=3` (which cover `k` in `-16..=15`): 18 dot products of the full length for the 31
//! rotations, 58 % of the multiply-adds. The query's leaves are built once per batch; a
//! database row's leaves are sums of its elements four apart, made block by block as the
//! rows are scanned, so nothing more is kept resident.

use sdk_orb::rotation::{rotate_elements, CHUNK_COEFS, MAX_ROTATION, ROTATION_COUNT};

use crate::kernels::{leaves_avx2, Avx2};
use zerocopy::{FromBytes, IntoBytes};

/// Coefficients per ring element: a rotation moves whole elements.
const ELEMENT: usize = 4;
/// Elements per chunk: the cycle a rotation runs along.
const ELEMENTS: usize = CHUNK_COEFS / ELEMENT;
/// Leaves of the two levels, in the order `(first, second)` over `[A, B, C]`.
pub const LEAVES: usize = 9;
/// Lags each leaf needs: `-4..=3`.
pub const LEAF_LAGS: usize = 8;
const LOWEST_LEAF_LAG: i32 = -4;

/// Length of a leaf of a `len`-long vector.
pub const fn leaf_len(len: usize) -> usize {
    len / 4
}

/// One level on a query sequence set (chunks of `n` elements): the three halves `A`, `B`,
/// `C` of the module's table, each in chunks of `n / 2` elements, into `out` (each half as
/// long as `x`).
fn split_query(x: &[u16], n: usize, out: [&mut [u16]; 3]) {
    let groups = <[[u16; ELEMENT]]>::ref_from_bytes(x.as_bytes()).expect("aligned as u16");
    let [a, b, c] = out.map(|v| {
        assert_eq!(v.len(), x.len() / 2);
        <[[u16; ELEMENT]]>::mut_from_bytes(v.as_mut_bytes()).expect("aligned as u16")
    });
    let halves = a
        .chunks_exact_mut(n / 2)
        .zip(b.chunks_exact_mut(n / 2))
        .zip(c.chunks_exact_mut(n / 2));
    for (chunk, ((a, b), c)) in groups.chunks_exact(n).zip(halves) {
        for m in 0..n / 2 {
            let even = chunk[2 * m];
            let odd = chunk[2 * m + 1];
            let shifted = chunk[if m == 0 { n - 1 } else { 2 * m - 1 }];
            a[m] = even;
            b[m] = core::array::from_fn(|t| odd[t].wrapping_sub(even[t]));
            c[m] = core::array::from_fn(|t| shifted[t].wrapping_sub(even[t]));
        }
    }
}

/// The nine leaves of a query vector (a whole number of chunks) into `out`, leaf `s` at
/// `s * leaf_len(x.len())`.
pub fn query_leaves(x: &[u16], out: &mut [u16]) {
    assert_eq!(x.len() % CHUNK_COEFS, 0);
    let n = leaf_len(x.len());
    assert_eq!(out.len(), LEAVES * n);
    let mut first = zeroize::Zeroizing::new(vec![0u16; 3 * 2 * n]);
    split_query(x, ELEMENTS, three(&mut first));
    for (parent, leaves) in first.chunks_exact(2 * n).zip(out.chunks_exact_mut(3 * n)) {
        split_query(parent, ELEMENTS / 2, three(leaves));
    }
}

/// `v` in three equal parts.
fn three(v: &mut [u16]) -> [&mut [u16]; 3] {
    let (a, rest) = v.split_at_mut(v.len() / 3);
    let (b, c) = rest.split_at_mut(a.len());
    [a, b, c]
}

/// `leaf` rotated by `lag` elements along each of its chunks (`ELEMENTS / 4` elements):
/// `dst[e] = src[e - lag]`, as the rotations of the whole vector are.
pub fn rotate_leaf(src: &[u16], lag: i32, dst: &mut [u16]) {
    rotate_elements(src, ELEMENTS / 4, lag, dst);
}

/// The lag of leaf row `i` (`0..LEAF_LAGS`).
pub fn leaf_lag(i: usize) -> i32 {
    LOWEST_LEAF_LAG + i as i32
}

/// One panel of lagged leaf rows, written as the engine's panels lay rows out (coefficient
/// pair `k` of every row side by side, `p` rows, then pair `k + 1`): row `r` is
/// `leaf(r / LEAF_LAGS)` rotated by `leaf_lag(r % LEAF_LAGS)` ([`rotate_leaf`]), for `r` in
/// `0..rows`; the rows after `rows` are left as they are (the zero padding). The rotations
/// are read straight from the leaves, without rotated copies in between.
pub fn lagged_panel<'a>(
    leaf: impl Fn(usize) -> &'a [u16],
    rows: usize,
    p: usize,
    panel: &mut [u16],
) {
    assert!(rows <= p && rows.is_multiple_of(LEAF_LAGS) && p.is_multiple_of(LEAF_LAGS));
    // In coefficient pairs: a rotation runs along cycles of `CYCLE` pairs and moves `HALF`
    // pairs per element of lag.
    const HALF: usize = ELEMENT / 2;
    const CYCLE: usize = ELEMENTS / 4 * HALF;
    // Row `i` of a leaf's eight is `src[k - HALF * lag_i]`: from `src[k - TRAIL]` (the
    // highest lag) to `src[k + LEAD]` (the lowest), a window of `SPAN` pairs.
    const LEAD: usize = HALF * LOWEST_LEAF_LAG.unsigned_abs() as usize;
    const TRAIL: usize = HALF * (LEAF_LAGS - 1) - LEAD;
    const SPAN: usize = LEAD + TRAIL + 1;
    // A cycle with the pairs its windows read past either end.
    const EXTENDED: usize = TRAIL + CYCLE + LEAD;
    let pairs = <[[u16; 2]]>::mut_from_bytes(panel.as_mut_bytes()).expect("aligned as u16");
    assert_eq!(pairs.len() % (CYCLE * p), 0, "whole cycles");
    let bases = rows / LEAF_LAGS;
    // Each base's cycle, extended on both sides so that every window is one run:
    // `ext[j] = src[j - TRAIL]` along the cycle.
    let mut ext = vec![[0u16; 2]; bases * (EXTENDED)];
    for (c, block) in pairs.chunks_exact_mut(CYCLE * p).enumerate() {
        for (b, e) in ext.chunks_exact_mut(EXTENDED).enumerate() {
            let src = <[[u16; 2]]>::ref_from_bytes(leaf(b).as_bytes()).expect("aligned as u16");
            let src = &src[CYCLE * c..CYCLE * (c + 1)];
            e[..TRAIL].copy_from_slice(&src[CYCLE - TRAIL..]);
            e[TRAIL..TRAIL + CYCLE].copy_from_slice(src);
            e[TRAIL + CYCLE..].copy_from_slice(&src[..LEAD]);
        }
        // Written in order: pair `k` of the eight rows of each base, side by side.
        for (k, step) in block.chunks_exact_mut(p).enumerate() {
            for (group, e) in step
                .chunks_exact_mut(LEAF_LAGS)
                .zip(ext.chunks_exact(EXTENDED))
            {
                let window: &[[u16; 2]; SPAN] =
                    e[k..k + SPAN].try_into().expect("a window of the cycle");
                let group: &mut [[u16; 2]; LEAF_LAGS] = group.try_into().expect("eight rows");
                *group = core::array::from_fn(|i| window[SPAN - 1 - HALF * i]);
            }
        }
    }
    zeroize::Zeroize::zeroize(ext.as_mut_bytes());
}

pub use crate::kernels::DIRECT_LEAVES;

/// Couple width ([`crate::kernels`]) of a direct leaf read in place: a leaf element's
/// two pairs sit side by side, and the next element of the leaf is a group further on.
pub const DIRECT_COUPLE: usize = 4 * ELEMENT;

/// Writes the nine leaves of database row `y` (a whole number of chunks), or where `all` is
/// false only the five that are sums (not [`DIRECT_LEAVES`]): leaf `s` to
/// `out[s * stride..][..leaf_len]`. Two levels over elements four apart: with `z_r[m] =
/// y[4m + r]`, the leaves are `z0+z1+z2+z3, z2+z3, z0+z1, z1+z3, z3, z1, z0+z2, z2, z0`.
///
/// Each group of four elements gives the leaves' element at its place and nothing else, so
/// `y` may also be a run of whole groups from inside a row (the leaves of that run).
pub fn db_leaves(y: &[u16], out: &mut [u16], stride: usize, all: bool) {
    assert_eq!(y.len() % (4 * ELEMENT), 0, "whole groups of four elements");
    let len = leaf_len(y.len());
    assert!(stride >= len && out.len() >= (LEAVES - 1) * stride + len);
    // Groups of four elements are independent: SIMD takes them four at a time.
    let simd = match Avx2::detect() {
        Some(cpu) => {
            let whole = y.len() / 64 * 64;
            leaves_avx2(cpu, &y[..whole], out, stride, all);
            whole
        }
        None => 0,
    };
    db_leaves_portable(&y[simd..], out, stride, simd / 4, all);
}

/// [`db_leaves`] without SIMD for the groups `y`, written from `at` on in each leaf.
fn db_leaves_portable(y: &[u16], out: &mut [u16], stride: usize, at: usize, all: bool) {
    for (m, group) in y.chunks_exact(4 * ELEMENT).enumerate() {
        let at = at + m * ELEMENT;
        for t in 0..ELEMENT {
            let [z0, z1, z2, z3] = [group[t], group[4 + t], group[8 + t], group[12 + t]];
            let (z01, z23) = (z0.wrapping_add(z1), z2.wrapping_add(z3));
            let (z13, z02) = (z1.wrapping_add(z3), z0.wrapping_add(z2));
            let values = [z01.wrapping_add(z23), z23, z01, z13, z3, z1, z02, z2, z0];
            for (s, v) in values.into_iter().enumerate() {
                if all || DIRECT_LEAVES[s].is_none() {
                    out[s * stride + at + t] = v;
                }
            }
        }
    }
}

/// The 31 rotations' results from the leaves', for `width` database rows at once:
/// `leaf(s, i)` is leaf `s`'s results at leaf lag row `i` (`width` of them); row `r` of `out`
/// (`ROTATION_COUNT` rows of `width`) gets rotation `r - 15`.
pub fn combine<'a>(leaf: impl Fn(usize, usize) -> &'a [u16], width: usize, out: &mut [u16]) {
    assert_eq!(out.len(), ROTATION_COUNT * width);
    let add = |a: &[u16], b: &[u16], dst: &mut [u16]| {
        for ((d, &x), &y) in dst.iter_mut().zip(a).zip(b) {
            *d = x.wrapping_add(y);
        }
    };
    // One level up: lags -8..=7 (rows 0..16) of the first level's three branches.
    let mut upper = vec![0u16; 3 * 2 * LEAF_LAGS * width];
    for (branch, lags) in upper.chunks_exact_mut(2 * LEAF_LAGS * width).enumerate() {
        for (i, v) in lags.chunks_exact_mut(width).enumerate() {
            let (row, odd) = (i / 2, i % 2);
            add(leaf(3 * branch, row), leaf(3 * branch + 1 + odd, row), v);
        }
    }
    let upper = |branch: usize, row: usize| {
        let at = (branch * 2 * LEAF_LAGS + row) * width;
        &upper[at..at + width]
    };
    for (r, v) in out.chunks_exact_mut(width).enumerate() {
        // Rotation k = r - 15 is level-one lag j = k div 2 (row j + 8), k mod 2.
        let k = r as i32 - MAX_ROTATION;
        let row = (k.div_euclid(2) + LEAF_LAGS as i32) as usize;
        let odd = k.rem_euclid(2) as usize;
        add(upper(0, row), upper(1 + odd, row), v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    use sdk_orb::rotation::{rotate_coefs, rotations};

    fn dot(a: &[u16], b: &[u16]) -> u16 {
        a.iter()
            .zip(b)
            .fold(0u16, |s, (&x, &y)| s.wrapping_add(x.wrapping_mul(y)))
    }

    fn random(rng: &mut rand_chacha::ChaCha8Rng, n: usize) -> Vec<u16> {
        (0..n).map(|_| rng.next_u32() as u16).collect()
    }

    /// A panel written from the leaves holds the leaves' rotations as `rotate_leaf` makes
    /// them, interleaved as the engine lays out rows; whole and part panels of every kernel's
    /// width, the padding left untouched.
    #[test]
    fn lagged_panels_are_the_rotated_leaves_interleaved() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
        for (len, p, rows) in [
            (CHUNK_COEFS, 8, 8),
            (sdk_orb::MASK_COEFS, 16, 8),
            (sdk_orb::CODE_COEFS, 32, 32),
            (sdk_orb::CODE_COEFS, 32, 24),
        ] {
            let n = leaf_len(len);
            let leaves: Vec<Vec<u16>> =
                (0..rows / LEAF_LAGS).map(|_| random(&mut rng, n)).collect();
            let mut panel = vec![0xA5A5u16; p * n];
            lagged_panel(|b| &leaves[b], rows, p, &mut panel);
            let mut row = vec![0u16; n];
            for r in 0..p {
                if r < rows {
                    rotate_leaf(&leaves[r / LEAF_LAGS], leaf_lag(r % LEAF_LAGS), &mut row);
                } else {
                    row.fill(0xA5A5);
                }
                for k in 0..n / 2 {
                    let at = 2 * (k * p + r);
                    assert_eq!(
                        panel[at..at + 2],
                        row[2 * k..2 * k + 2],
                        "{len}, {p}, row {r}, pair {k}"
                    );
                }
            }
        }
    }

    /// Both ways of making a database row's leaves agree.
    #[test]
    fn database_leaves_agree() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        for len in [CHUNK_COEFS, sdk_orb::CODE_COEFS] {
            let y = random(&mut rng, len);
            let n = leaf_len(len);
            for all in [true, false] {
                let mut simd = vec![1u16; LEAVES * n + 5];
                let mut portable = simd.clone();
                db_leaves(&y, &mut simd, n, all);
                db_leaves_portable(&y, &mut portable, n, 0, all);
                assert_eq!(simd, portable, "length {len}");
            }
        }
    }

    /// The leaves left to be read in place are the row's elements four apart, from the
    /// element `DIRECT_LEAVES` names on, and only those are left unwritten.
    #[test]
    fn direct_leaves_are_the_rows_own_elements() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let y = random(&mut rng, CHUNK_COEFS);
        let n = leaf_len(y.len());
        let mut all = vec![0u16; LEAVES * n];
        db_leaves(&y, &mut all, n, true);
        let mut sums = vec![7u16; LEAVES * n];
        db_leaves(&y, &mut sums, n, false);
        for (s, direct) in DIRECT_LEAVES.into_iter().enumerate() {
            let (leaf, unwritten) = (&all[s * n..][..n], &sums[s * n..][..n]);
            match direct {
                Some(r) => {
                    for (m, element) in leaf.chunks_exact(ELEMENT).enumerate() {
                        let at = DIRECT_COUPLE * m + ELEMENT * r;
                        assert_eq!(element, &y[at..at + ELEMENT], "leaf {s} element {m}");
                    }
                    assert!(unwritten.iter().all(|&v| v == 7), "leaf {s} written");
                }
                None => assert_eq!(leaf, unwritten, "leaf {s}"),
            }
        }
    }

    /// The leaves' dot products, combined, equal the 31 rotations' dot products.
    #[test]
    fn leaves_give_every_rotation() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(31);
        for len in [CHUNK_COEFS, sdk_orb::MASK_COEFS, sdk_orb::CODE_COEFS] {
            let x = random(&mut rng, len);
            let y = random(&mut rng, len);
            let mut rotated = vec![0u16; len];
            let expected: Vec<u16> = rotations()
                .map(|k| {
                    rotate_coefs(&x, k, &mut rotated);
                    dot(&y, &rotated)
                })
                .collect();

            let n = leaf_len(len);
            let mut leaves = vec![0u16; LEAVES * n];
            query_leaves(&x, &mut leaves);
            let q: Vec<&[u16]> = leaves.chunks_exact(n).collect();
            let mut d = vec![0u16; LEAVES * n];
            db_leaves(&y, &mut d, n, true);
            let mut lagged = vec![0u16; n];
            let mut results = [[0u16; LEAF_LAGS]; LEAVES];
            for (s, row) in results.iter_mut().enumerate() {
                for (i, v) in row.iter_mut().enumerate() {
                    rotate_leaf(q[s], leaf_lag(i), &mut lagged);
                    *v = dot(&d[s * n..(s + 1) * n], &lagged);
                }
            }
            let mut got = [0u16; ROTATION_COUNT];
            combine(|s, i| core::slice::from_ref(&results[s][i]), 1, &mut got);
            assert_eq!(got.as_slice(), expected.as_slice(), "length {len}");
        }
    }
}

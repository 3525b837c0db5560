//! u16 dot products mod 2^16 from int8 products with i32 accumulation, the arithmetic the GPU
//! engine's tensor-core GEMMs run.
//!
//! Each u16 `v` splits into bytes `lo = v mod 256` and `hi = v div 256`, each shifted by -128
//! into i8 (`lo' = lo - 128`, `hi' = hi - 128`). For a database vector `a` and a query `b` of
//! length `len`:
//!
//! ```text
//! sum a*b = sum lo_a lo_b + 256 (lo_a hi_b + hi_a lo_b) + 65536 hi_a hi_b
//!         = G(lo'_a, lo'_b) + 256 (G(lo'_a, hi'_b) + G(hi'_a, lo'_b))
//!           + c(a) + c(b) + 16384 len                                     (mod 2^16)
//! c(v)    = 128 S(lo'_v) + 32768 (S(lo'_v) + S(hi'_v))
//! ```
//!
//! where `G` is the i8 dot product (|G| < 2^14 len, exact in i32 for every length here) and
//! `S` a sum of shifted bytes. The hi*hi term vanishes mod 2^16, and each vector's correction
//! `c` is computed once, when it is uploaded. The CUDA `combine` kernel (`kernels/dot.cu`)
//! evaluates the second line; the tests here check the identity bit for bit on the CPU.

/// Splits `v` into shifted low and high bytes; returns the vector's correction `c(v)`.
///
/// # Panics
/// If the output slices are not as long as `v`.
pub fn split_bytes(v: &[u16], lo: &mut [i8], hi: &mut [i8]) -> u16 {
    assert!(lo.len() == v.len() && hi.len() == v.len());
    let (mut s_lo, mut s_hi) = (0i32, 0i32);
    for ((&x, l), h) in v.iter().zip(lo.iter_mut()).zip(hi.iter_mut()) {
        *l = ((x & 0xff) as i32 - 128) as i8;
        *h = ((x >> 8) as i32 - 128) as i8;
        s_lo += *l as i32;
        s_hi += *h as i32;
    }
    correction(s_lo, s_hi)
}

/// `c(v)` from the sums of a vector's shifted low and high bytes.
pub fn correction(s_lo: i32, s_hi: i32) -> u16 {
    let (s_lo, s_hi) = (s_lo as u32, s_hi as u32);
    128u32
        .wrapping_mul(s_lo)
        .wrapping_add(32768u32.wrapping_mul(s_lo.wrapping_add(s_hi))) as u16
}

/// The length term `16384 len` (zero for every length that is a multiple of 4).
pub fn length_term(len: usize) -> u16 {
    (16384u32.wrapping_mul(len as u32)) as u16
}

/// One dot product mod 2^16 from the two GEMM outputs and the corrections.
pub fn combine(g_ll: i32, g_cross: i32, c_db: u16, c_query: u16, length_term: u16) -> u16 {
    (g_ll as u32)
        .wrapping_add((g_cross as u32) << 8)
        .wrapping_add(c_db as u32)
        .wrapping_add(c_query as u32)
        .wrapping_add(length_term as u32) as u16
}

/// The three GEMMs' outputs, as the GPU forms them, computed on the CPU: for query `q` and
/// database vector `d` (row-major, `q * m + d`) the i32 products `lo*lo` and
/// `lo*hi + hi*lo`, and each vector's correction. The tests run the formula and the `combine`
/// kernel on these.
/// The i8 dot product with i32 accumulation, as a tensor-core GEMM forms each entry.
#[cfg(test)]
fn i8_dot(a: &[i8], b: &[i8]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum()
}

#[cfg(test)]
pub(crate) struct ReferenceProducts {
    pub(crate) ll: Vec<i32>,
    pub(crate) cross: Vec<i32>,
    pub(crate) c_query: Vec<u16>,
    pub(crate) c_db: Vec<u16>,
}

#[cfg(test)]
impl ReferenceProducts {
    pub(crate) fn of(queries: &[u16], db: &[u16], len: usize) -> ReferenceProducts {
        let split = |v: &[u16]| {
            v.chunks_exact(len)
                .map(|row| {
                    let (mut lo, mut hi) = (vec![0i8; len], vec![0i8; len]);
                    let c = split_bytes(row, &mut lo, &mut hi);
                    (lo, hi, c)
                })
                .collect::<Vec<_>>()
        };
        let (q, d) = (split(queries), split(db));
        let mut r = ReferenceProducts {
            ll: Vec::with_capacity(q.len() * d.len()),
            cross: Vec::with_capacity(q.len() * d.len()),
            c_query: q.iter().map(|v| v.2).collect(),
            c_db: d.iter().map(|v| v.2).collect(),
        };
        for (q_lo, q_hi, _) in &q {
            for (d_lo, d_hi, _) in &d {
                r.ll.push(i8_dot(d_lo, q_lo));
                r.cross
                    .push(i8_dot(d_lo, q_hi).wrapping_add(i8_dot(d_hi, q_lo)));
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use rand_chacha::ChaCha20Rng;
    use rand_core::{RngCore, SeedableRng};

    use super::*;
    use ocelli_mpc::backend::{RowBackend, RowDot};

    /// The GPU engine's arithmetic on the CPU: byte split, three i8 GEMMs with i32
    /// accumulation, corrections, combine.
    struct SplitReference;

    impl RowDot for SplitReference {
        fn name(&self) -> String {
            "split-reference".into()
        }

        fn dot(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]) {
            let r = ReferenceProducts::of(queries, db, len);
            assert_eq!(out.len(), r.ll.len());
            let m = r.c_db.len();
            for (i, o) in out.iter_mut().enumerate() {
                let (q, d) = (i / m, i % m);
                *o = combine(
                    r.ll[i],
                    r.cross[i],
                    r.c_db[d],
                    r.c_query[q],
                    length_term(len),
                );
            }
        }
    }

    #[test]
    fn the_split_arithmetic_passes_the_parity_suite() {
        ocelli_cpu::parity::check_engine(&RowBackend(SplitReference));
    }

    #[test]
    fn odd_lengths_and_extreme_values_match_the_plain_dot() {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        for len in [1usize, 2, 3, 5, 12_800] {
            for fill in [None, Some(0u16), Some(0xffff), Some(0x8000), Some(0x00ff)] {
                let gen = |rng: &mut ChaCha20Rng| -> Vec<u16> {
                    (0..len)
                        .map(|_| fill.unwrap_or(rng.next_u32() as u16))
                        .collect()
                };
                let (a, b) = (gen(&mut rng), gen(&mut rng));
                let plain = a
                    .iter()
                    .zip(&b)
                    .fold(0u16, |s, (&x, &y)| s.wrapping_add(x.wrapping_mul(y)));
                let (mut a_lo, mut a_hi) = (vec![0i8; len], vec![0i8; len]);
                let (mut b_lo, mut b_hi) = (vec![0i8; len], vec![0i8; len]);
                let c_a = split_bytes(&a, &mut a_lo, &mut a_hi);
                let c_b = split_bytes(&b, &mut b_lo, &mut b_hi);
                let ll = i8_dot(&a_lo, &b_lo);
                let cross = i8_dot(&a_lo, &b_hi) + i8_dot(&a_hi, &b_lo);
                assert_eq!(
                    combine(ll, cross, c_a, c_b, length_term(len)),
                    plain,
                    "len {len}, fill {fill:?}"
                );
            }
        }
    }
}

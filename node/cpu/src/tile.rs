//! The tile shapes the engine can run: a small fixed list of instantiations of the const-generic
//! loop nests, per kernel, from which the tuner ([`crate::tune`]) picks. Each carries its
//! kernel's token, so a tile always names instructions this CPU has; the shape fixes the
//! query panels' layout, so an engine keeps one tile from start.

use crate::kernels::{Avx2, Avx512Vnni, AVX2_D, AVX2_P, SCALAR_D, SCALAR_P, VNNI_D, VNNI_P};
use crate::Kernel;

/// A tile shape of one kernel: `P` query rows by `D` database rows. The shapes are those
/// `scripts/mca` predicts within 5 % of the best loop for at least one core it models, and
/// the default (docs/benchmarks.md, "Tuning").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tile {
    /// AVX-512 VNNI, 32 x 12, hand-placed registers: 24 accumulators, 14 loads per 24
    /// multiply-adds.
    Vnni32x12(Avx512Vnni),
    /// AVX-512 VNNI, 64 x 6: 24 accumulators, 10 loads per 24.
    Vnni64x6(Avx512Vnni),
    /// AVX-512 VNNI, 48 x 8: 24 accumulators, 11 loads per 24.
    Vnni48x8(Avx512Vnni),
    /// AVX2, 16 x 6, hand-placed registers: 12 accumulators, 8 loads per 12 `vpmaddwd`.
    Avx2x16x6(Avx2),
    /// AVX2, 8 x 12: 12 accumulators, one query vector, a broadcast per `vpmaddwd`.
    Avx2x8x12(Avx2),
    /// AVX2, 16 x 4: 8 accumulators, registers to spare for the products.
    Avx2x16x4(Avx2),
    /// AVX2, 32 x 2: 8 accumulators, four query vectors per two broadcasts.
    Avx2x32x2(Avx2),
    /// AVX2, 24 x 3 without broadcasts, query rows three at a time: 9 accumulators of lane
    /// sums, 6 loads per 9 `vpmaddwd`, queries laid out in blocks
    /// ([`crate::kernels::generic::tile_avx2_blocks`]).
    Avx2Blocks24x3(Avx2),
    /// AVX2, 32 x 4 without broadcasts, query rows two at a time: 8 accumulators, 6 loads per
    /// 8, queries laid out in blocks.
    Avx2Blocks32x4(Avx2),
    /// Portable, 8 x 4.
    Scalar8x4,
}

impl Tile {
    /// The shape each kernel runs without tuning (the measured default of the kernels
    /// module).
    pub fn default_for(kernel: Kernel) -> Tile {
        match kernel {
            Kernel::Avx512Vnni(cpu) => Tile::Vnni32x12(cpu),
            Kernel::Avx2(cpu) => Tile::Avx2x16x6(cpu),
            Kernel::Scalar => Tile::Scalar8x4,
        }
    }

    /// Every shape of `kernel`, the default first.
    pub fn candidates(kernel: Kernel) -> Vec<Tile> {
        match kernel {
            Kernel::Avx512Vnni(cpu) => vec![
                Tile::Vnni32x12(cpu),
                Tile::Vnni64x6(cpu),
                Tile::Vnni48x8(cpu),
            ],
            Kernel::Avx2(cpu) => vec![
                Tile::Avx2x16x6(cpu),
                Tile::Avx2x8x12(cpu),
                Tile::Avx2x16x4(cpu),
                Tile::Avx2x32x2(cpu),
                Tile::Avx2Blocks24x3(cpu),
                Tile::Avx2Blocks32x4(cpu),
            ],
            Kernel::Scalar => vec![Tile::Scalar8x4],
        }
    }

    /// The shape of `kernel` with `p` query rows by `d` database rows, if it is one.
    pub fn of_shape(kernel: Kernel, (p, d): (usize, usize)) -> Option<Tile> {
        Tile::candidates(kernel)
            .into_iter()
            .find(|t| t.shape() == (p, d))
    }

    /// The kernel whose instructions the tile runs.
    pub fn kernel(self) -> Kernel {
        match self {
            Tile::Vnni32x12(cpu) | Tile::Vnni64x6(cpu) | Tile::Vnni48x8(cpu) => {
                Kernel::Avx512Vnni(cpu)
            }
            Tile::Avx2x16x6(cpu)
            | Tile::Avx2x8x12(cpu)
            | Tile::Avx2x16x4(cpu)
            | Tile::Avx2x32x2(cpu)
            | Tile::Avx2Blocks24x3(cpu)
            | Tile::Avx2Blocks32x4(cpu) => Kernel::Avx2(cpu),
            Tile::Scalar8x4 => Kernel::Scalar,
        }
    }

    /// (query rows `P`, database rows `D`).
    pub fn shape(self) -> (usize, usize) {
        match self {
            Tile::Vnni32x12(_) => (VNNI_P, VNNI_D),
            Tile::Vnni64x6(_) => (64, 6),
            Tile::Vnni48x8(_) => (48, 8),
            Tile::Avx2x16x6(_) => (AVX2_P, AVX2_D),
            Tile::Avx2x8x12(_) => (8, 12),
            Tile::Avx2x16x4(_) => (16, 4),
            Tile::Avx2x32x2(_) => (32, 2),
            Tile::Avx2Blocks24x3(_) => (24, 3),
            Tile::Avx2Blocks32x4(_) => (32, 4),
            Tile::Scalar8x4 => (SCALAR_P, SCALAR_D),
        }
    }

    /// Query rows per panel: the layout the engine's queries are prepared in.
    pub fn panel_rows(self) -> usize {
        self.shape().0
    }

    /// Coefficients of a row side by side in a query panel: 2 where a panel holds pair `k`
    /// of every row, then pair `k + 1` ([`crate::kernels`]), more where the tile reads rows
    /// in longer blocks (`engine::regroup`). Chunks start at multiples of it.
    pub fn query_block(self) -> usize {
        match self {
            Tile::Avx2Blocks24x3(_) | Tile::Avx2Blocks32x4(_) => crate::kernels::generic::BLOCK,
            _ => 2,
        }
    }
}

impl std::fmt::Display for Tile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (p, d) = self.shape();
        write!(f, "{} {p}x{d}", self.kernel().name())
    }
}

/// Runs `$go!(P, D, tile, in_place)` for `$tile`: `tile` the tile function as the loop
/// nests take it (`q, d, stride, couple, acc`), `in_place` whether it reads database rows in
/// couples wider than contiguous.
macro_rules! dispatch {
    ($tile:expr, $go:ident) => {{
        use $crate::kernels::{generic, tile_avx2, tile_avx512_vnni, tile_scalar, CONTIGUOUS};
        use $crate::tile::Tile;
        match $tile {
            Tile::Vnni32x12(cpu) => $go!(
                32,
                12,
                move |q, d, s, c, acc| tile_avx512_vnni(cpu, q, d, s, c, acc),
                true
            ),
            Tile::Vnni64x6(cpu) => $go!(
                64,
                6,
                move |q, d, s, c, acc| generic::tile_vnni(cpu, q, d, s, c, acc),
                true
            ),
            Tile::Vnni48x8(cpu) => $go!(
                48,
                8,
                move |q, d, s, c, acc| generic::tile_vnni(cpu, q, d, s, c, acc),
                true
            ),
            // AVX2 reads copies only: see `tile_avx2`.
            Tile::Avx2x16x6(cpu) => $go!(
                16,
                6,
                move |q, d, s, c, acc| {
                    debug_assert_eq!(c, CONTIGUOUS);
                    tile_avx2(cpu, q, d, s, acc)
                },
                false
            ),
            Tile::Avx2x8x12(cpu) => $go!(
                8,
                12,
                move |q, d, s, c, acc| {
                    debug_assert_eq!(c, CONTIGUOUS);
                    generic::tile_avx2(cpu, q, d, s, acc)
                },
                false
            ),
            Tile::Avx2x16x4(cpu) => $go!(
                16,
                4,
                move |q, d, s, c, acc| {
                    debug_assert_eq!(c, CONTIGUOUS);
                    generic::tile_avx2(cpu, q, d, s, acc)
                },
                false
            ),
            Tile::Avx2x32x2(cpu) => $go!(
                32,
                2,
                move |q, d, s, c, acc| {
                    debug_assert_eq!(c, CONTIGUOUS);
                    generic::tile_avx2(cpu, q, d, s, acc)
                },
                false
            ),
            Tile::Avx2Blocks24x3(cpu) => $go!(
                24,
                3,
                move |q, d, s, c, acc| {
                    debug_assert_eq!(c, CONTIGUOUS);
                    generic::tile_avx2_blocks::<24, 3, 3>(cpu, q, d, s, acc)
                },
                false
            ),
            Tile::Avx2Blocks32x4(cpu) => $go!(
                32,
                4,
                move |q, d, s, c, acc| {
                    debug_assert_eq!(c, CONTIGUOUS);
                    generic::tile_avx2_blocks::<32, 4, 2>(cpu, q, d, s, acc)
                },
                false
            ),
            Tile::Scalar8x4 => $go!(8, 4, tile_scalar, true),
        }
    }};
}
pub(crate) use dispatch;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_candidate_belongs_to_its_kernel_and_is_found_by_its_shape() {
        for kernel in Kernel::all_supported() {
            let candidates = Tile::candidates(kernel);
            assert_eq!(candidates[0], Tile::default_for(kernel));
            for tile in candidates {
                assert_eq!(tile.kernel(), kernel);
                assert_eq!(Tile::of_shape(kernel, tile.shape()), Some(tile));
                // Panels hold whole bases of the correlated layout.
                assert!(tile
                    .panel_rows()
                    .is_multiple_of(crate::correlate::LEAF_LAGS));
            }
        }
    }
}

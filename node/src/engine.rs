//! Dot-product engines: the party-local heavy lifting of the pipeline.
//!
//! An engine computes, for preprocessed query vectors and database share vectors of one
//! length (12,800 for codes, 6,400 for trimmed masks), every `sum_k db[k] * query[k]` mod 2^16.
//! The CPU engine here and the GPU engine (behind the `gpu` feature) implement [`DotEngine`]
//! and pass one parity suite against `sdk_orb::preprocess::dot`.

pub mod cpu;
#[cfg(feature = "gpu")]
#[allow(unsafe_code)]
pub mod gpu;
pub mod mirror;
pub mod split;
// SIMD intrinsics and target-feature dispatch need `unsafe`; each use states its safety.
#[allow(unsafe_code)]
mod kernels;

pub use cpu::{CpuEngine, Kernel};
#[cfg(feature = "gpu")]
pub use gpu::GpuEngine;
pub use kernels::mac_peak;

use core::ops::Range;

use sdk_orb::{CODE_COEFS, MASK_COEFS};

use crate::pipeline::MatchDb;

/// Which share vectors of an enrolled entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Code shares, 12,800 coefficients.
    Code,
    /// Trimmed-mask shares, 6,400 coefficients.
    Mask,
}

impl Part {
    /// Coefficients per vector.
    pub const fn coefs(self) -> usize {
        match self {
            Part::Code => CODE_COEFS,
            Part::Mask => MASK_COEFS,
        }
    }
}

/// Party-local dot products of share vectors.
pub trait DotEngine: Send + Sync {
    /// A short name for logs and benchmarks.
    fn name(&self) -> String;

    /// `out[q * n_db + d] = sum_k db[d][k] * queries[q][k]` mod 2^16, where `queries` holds
    /// `queries.len() / len` vectors and `db` holds `db.len() / len` vectors, each `len` long.
    ///
    /// # Panics
    /// If a slice length is not a multiple of `len`, `len` is not a multiple of 64, or `out`
    /// has the wrong length.
    fn dot(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]);

    /// [`DotEngine::dot`] against rows `rows` of one eye's `part` in the enrolled database:
    /// `out[q * rows.len() + d]` for the `d`-th row of the range. An engine that keeps the
    /// database resident (the GPU engine) reads its own copy, kept equal to `db`.
    fn dot_db(
        &self,
        queries: &[u16],
        db: &MatchDb,
        eye: usize,
        part: Part,
        rows: Range<usize>,
        out: &mut [u16],
    ) {
        let vectors = match part {
            Part::Code => db.codes(eye, rows),
            Part::Mask => db.masks(eye, rows),
        };
        self.dot(queries, vectors, part.coefs(), out);
    }
}

#[cfg(test)]
pub(crate) mod parity;

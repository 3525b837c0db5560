//! Dot-product engines: the party-local heavy lifting of the pipeline.
//!
//! An engine computes, for preprocessed query vectors and database share vectors of one
//! length (12,800 for codes, 6,400 for trimmed masks), every `sum_k db[k] * query[k]` mod 2^16.
//! The CPU engine here and the GPU engine (behind the `gpu` feature) implement [`DotEngine`]
//! and pass one parity suite against `sdk_orb::preprocess::dot`.

pub mod cpu;
// SIMD intrinsics and target-feature dispatch need `unsafe`; each use states its safety.
#[allow(unsafe_code)]
mod kernels;

pub use cpu::{CpuEngine, Kernel};
pub use kernels::mac_peak;

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
}

#[cfg(test)]
pub(crate) mod parity;

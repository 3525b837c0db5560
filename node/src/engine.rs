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

/// Which dot-product engine a node or a benchmark runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// [`CpuEngine`].
    #[default]
    Cpu,
    /// The GPU engine (a build with the `gpu` feature).
    Gpu,
}

/// Builds an engine: the CPU engine on `threads` threads (0: one per core), or the GPU engine
/// on CUDA devices `gpu_devices` (the database sharded across them).
///
/// # Errors
/// The engine cannot run here; the message says why.
pub fn build(
    kind: EngineKind,
    threads: usize,
    gpu_devices: &[usize],
) -> Result<Box<dyn DotEngine>, String> {
    match kind {
        EngineKind::Cpu if threads == 0 => Ok(Box::new(CpuEngine::new())),
        EngineKind::Cpu => Ok(Box::new(
            CpuEngine::with(Kernel::detect(), threads)
                .ok_or("cannot build the engine's threads")?,
        )),
        #[cfg(feature = "gpu")]
        EngineKind::Gpu => Ok(Box::new(
            GpuEngine::with_devices(gpu_devices).map_err(|e| format!("GPU engine: {e}"))?,
        )),
        #[cfg(not(feature = "gpu"))]
        EngineKind::Gpu => {
            let _ = gpu_devices;
            Err(GPU_NOT_BUILT.to_owned())
        }
    }
}

/// Why a build without the `gpu` feature has no GPU engine.
pub const GPU_NOT_BUILT: &str =
    "this build has no GPU engine: build with `cargo build --release -p ocelli-node --features gpu`";

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

    /// Makes the engine ready to match against `db` (a resident copy loaded now, not at the
    /// first batch).
    ///
    /// # Errors
    /// The engine cannot hold the database.
    fn prepare(&self, db: &MatchDb) -> Result<(), String> {
        let _ = db;
        Ok(())
    }

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
        self.dot(queries, db.vectors(eye, part, rows), part.coefs(), out);
    }
}

#[cfg(test)]
pub(crate) mod parity;

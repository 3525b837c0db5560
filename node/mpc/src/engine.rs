//! The dot-product engines: the CPU engine (register-tiled SIMD kernels chosen by run-time CPU
//! detection) and the GPU engine (behind the `gpu` feature), both behind
//! [`crate::dot::DotEngine`], and [`build`], which picks one for a node or a
//! benchmark.

pub mod correlate;
pub mod cpu;
#[cfg(feature = "gpu")]
#[allow(unsafe_code)]
pub mod gpu;
// SIMD intrinsics and inline assembly need `unsafe`; the safe entry points take CPU feature
// tokens, and each `unsafe` block states why it holds.
#[allow(unsafe_code)]
pub mod kernels;
pub mod mirror;
// The peak probe is inline assembly behind the same tokens.
#[allow(unsafe_code)]
pub mod peak;
pub mod split;

pub use cpu::{CpuEngine, Kernel};
#[cfg(feature = "gpu")]
pub use gpu::GpuEngine;
pub use peak::{mac_peak, MacPeak};

use crate::dot::DotEngine;
use crate::error::EngineError;

/// Which dot-product engine a node or a benchmark runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// [`CpuEngine`].
    #[default]
    Cpu,
    /// The GPU engine (a build with the `gpu` feature).
    Gpu,
}

impl core::str::FromStr for EngineKind {
    type Err = String;

    fn from_str(s: &str) -> Result<EngineKind, String> {
        match s {
            "cpu" => Ok(EngineKind::Cpu),
            "gpu" => Ok(EngineKind::Gpu),
            _ => Err(format!("unknown engine {s:?}: cpu or gpu")),
        }
    }
}

/// Builds an engine: the CPU engine on `threads` threads (0: one per core), or the GPU engine
/// on CUDA devices `gpu_devices` (the database sharded across them).
///
/// # Errors
/// The engine cannot run here.
pub fn build(
    kind: EngineKind,
    threads: usize,
    gpu_devices: &[usize],
) -> Result<Box<dyn DotEngine>, EngineError> {
    match kind {
        EngineKind::Cpu if threads == 0 => Ok(Box::new(CpuEngine::new())),
        EngineKind::Cpu => Ok(Box::new(CpuEngine::with(Kernel::detect(), threads)?)),
        #[cfg(feature = "gpu")]
        EngineKind::Gpu => Ok(Box::new(GpuEngine::with_devices(gpu_devices)?)),
        #[cfg(not(feature = "gpu"))]
        EngineKind::Gpu => {
            let _ = gpu_devices;
            Err(EngineError::GpuNotBuilt)
        }
    }
}

#[cfg(test)]
pub(crate) mod parity;

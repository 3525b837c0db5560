//! The one place a node chooses its compute backend: the CPU backend, or the GPU backend in a
//! build with the `gpu` feature. Everything downstream is generic over
//! [`ocelli_mpc::Backend`].

use std::sync::Arc;

use crate::batch::BatchEvaluator;
use crate::config::NodeConfig;
use crate::matching::{MpcEvaluator, SetupError};

/// Which compute backend a node or a benchmark runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// The CPU backend (`ocelli-cpu`).
    #[default]
    Cpu,
    /// The GPU backend (`ocelli-gpu`, a build with the `gpu` feature).
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

/// Why a backend cannot be built here.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The CPU backend.
    #[error(transparent)]
    Cpu(#[from] ocelli_cpu::CpuError),
    /// This build has no GPU backend.
    #[error(
        "this build has no GPU engine: build with `cargo build --release -p ocelli-node --features gpu`"
    )]
    GpuNotBuilt,
    /// The GPU backend.
    #[cfg(feature = "gpu")]
    #[error("GPU engine: {0}")]
    Gpu(#[from] ocelli_gpu::GpuError),
}

/// The CPU backend on `threads` threads (0: one per core), with `kernel` or the fastest this
/// CPU runs.
///
/// # Errors
/// The kernel is not supported here, or the threads cannot start.
pub fn cpu(
    kernel: Option<ocelli_cpu::Kernel>,
    threads: usize,
) -> Result<ocelli_cpu::CpuEngine, ocelli_cpu::CpuError> {
    match (kernel, threads) {
        (None, 0) => Ok(ocelli_cpu::CpuEngine::new()),
        (kernel, threads) => {
            ocelli_cpu::CpuEngine::with(kernel.unwrap_or_else(ocelli_cpu::Kernel::detect), threads)
        }
    }
}

/// The matching evaluator of `config` on its configured backend.
///
/// # Errors
/// An invalid party id, or a backend that cannot run here.
pub fn mpc_evaluator(config: &NodeConfig) -> Result<Arc<dyn BatchEvaluator>, SetupError> {
    let m = &config.matching;
    match m.engine {
        EngineKind::Cpu => {
            let backend = cpu(None, m.threads).map_err(BuildError::from)?;
            Ok(Arc::new(MpcEvaluator::new(config, backend)?))
        }
        #[cfg(feature = "gpu")]
        EngineKind::Gpu => {
            let backend =
                ocelli_gpu::GpuEngine::with_devices(&m.gpu_devices).map_err(BuildError::from)?;
            Ok(Arc::new(MpcEvaluator::new(config, backend)?))
        }
        #[cfg(not(feature = "gpu"))]
        EngineKind::Gpu => Err(BuildError::GpuNotBuilt.into()),
    }
}

//! Why a dot-product engine cannot be built or cannot hold a database.

/// Why an engine cannot be built or cannot hold a database.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The engine's thread pool could not be started.
    #[error("cannot start the engine's {0} threads")]
    Threads(usize),
    /// No CPU kernel has this name.
    #[error("no CPU kernel is called {0:?} (known: avx512-vnni, avx2, scalar)")]
    UnknownKernel(String),
    /// The requested CPU kernel is not supported by this CPU.
    #[error("this CPU does not support the {0} kernel")]
    KernelUnsupported(&'static str),
    /// This build has no GPU engine.
    #[error(
        "this build has no GPU engine: build with `cargo build --release -p ocelli-node --features gpu`"
    )]
    GpuNotBuilt,
    /// A benchmark run failed (a phase's transport, or a replayed party sent what it had not
    /// sent in the recorded run).
    #[error("benchmark run: {0}")]
    Bench(String),
    /// The GPU engine failed.
    #[cfg(feature = "gpu")]
    #[error("GPU engine: {0}")]
    Gpu(#[from] crate::engine::gpu::error::GpuError),
}

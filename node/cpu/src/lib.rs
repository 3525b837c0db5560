//! The ocelli CPU backend: dot products of share vectors on broadcast register tiles
//! (AVX-512 VNNI, AVX2 or portable Rust, chosen by run-time CPU detection), the rotations of
//! a query from correlation leaves where that pays, and the comparison phase in host memory
//! (the protocol's [`ocelli_mpc::Session`]).
//!
//! SIMD intrinsics and inline assembly need `unsafe`: it sits in [`kernels`] and [`peak`],
//! whose safe entry points take the CPU feature tokens run-time detection issues; each
//! `unsafe` block states why it holds.
#![deny(missing_docs, clippy::unwrap_used)]

pub mod correlate;
pub mod engine;
#[allow(unsafe_code)]
pub mod kernels;
pub mod parity;
#[allow(unsafe_code)]
pub mod peak;
pub mod tile;
pub mod tune;

pub use engine::{CpuEngine, Kernel};
pub use peak::{mac_peak, MacPeak};
pub use tile::Tile;
pub use tune::Tuning;

/// Why the CPU engine cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    /// The engine's thread pool could not be started.
    #[error("cannot start the engine's {0} threads")]
    Threads(usize),
    /// No CPU kernel has this name.
    #[error("no CPU kernel is called {0:?} (known: avx512-vnni, avx2, scalar)")]
    UnknownKernel(String),
    /// The requested CPU kernel is not supported by this CPU.
    #[error("this CPU does not support the {0} kernel")]
    KernelUnsupported(&'static str),
}

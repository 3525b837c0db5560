//! The SIMD kernels the ocelli protocol crate calls, each behind a safe entry point that
//! checks at run time that the CPU has the instructions: [`chacha`] (ChaCha12 keystream
//! blocks, 8 or 16 side by side) and [`planes`] (bit-plane transposition). Everything
//! `unsafe` the protocol needs is here, so `ocelli-mpc` forbids it; every `unsafe` block
//! states why it holds.
#![deny(missing_docs, clippy::unwrap_used)]

pub mod chacha;
pub mod planes;

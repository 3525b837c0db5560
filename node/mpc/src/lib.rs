//! The ocelli protocol core: everything one party computes in the three-party matching
//! pipeline, with no network, runtime or store. The crate depends on no async runtime, gRPC,
//! TLS or storage library, so the compiler keeps I/O out of the protocol; the service
//! (`ocelli-node`) drives it over its mutual-TLS links, tests and benchmarks over the
//! in-memory network.
//!
//! - Sharing and rounds: [`share`] (replicated sharing over Z_2^16, Z_2^32 and bit-sliced
//!   Z_2), [`randomness`] (pairwise PRF streams), [`session`] (one party's view of a protocol
//!   run), [`network`] (the [`Transport`] trait and the in-memory network), [`local`] (the
//!   three parties on threads).
//! - The comparison phase: [`compare`] (the two-part split, lift, cross term, MSB, OR trees),
//!   [`binary`] (the adder's carry on bit planes), [`bits`] (bit-plane layout), [`circuit`]
//!   (what the circuits need of where the shares live).
//! - The backend seam: [`backend`] (the [`Backend`] trait a compute backend implements: dot
//!   products and the comparison circuit; [`backend::Reference`], the plain one), [`db`] (the
//!   party's share database).
//! - The pipeline: [`pipeline`] (one party's batch), [`requests`] (request types to pipeline
//!   roles and outcomes), [`wellformed`] (the check that enrolled shares encode a template),
//!   [`recovery`], [`synthetic`] (synthetic irises).
//! - Distance statistics: [`stats`] (bucket counts of chosen pairs as shares, the impostor
//!   sample and the noisy opening).
//!
//! The compute backends live in crates of their own (`ocelli-cpu`, `ocelli-gpu`, with
//! `ocelli-device` for the comparison phase on a kernel device); the SIMD code this crate
//! calls is in `ocelli-simd`, so this crate forbids `unsafe`.
//!
//! Conventions (ABY3-style replicated sharing): a value `x = x_0 + x_1 + x_2` (XOR for bits);
//! party `i` holds `(x_i, x_{i-1})`, called `own` and `prev`. Party `i` shares a PRF stream
//! with its next party (`i+1`) and one with its previous party (`i-1`). Every round sends one
//! message per direction carrying the whole batch.
#![forbid(unsafe_code)]
#![deny(missing_docs, clippy::unwrap_used)]

pub mod backend;
pub mod binary;
pub mod bits;
pub mod circuit;
pub mod compare;
pub mod db;
pub mod local;
pub mod network;
pub mod pipeline;
pub mod randomness;
pub mod recovery;
pub mod requests;
pub mod scratch;
pub mod session;
pub mod share;
pub mod stats;
pub mod synthetic;
pub mod wellformed;

pub use backend::{Backend, BackendError};
pub use db::{Eye, MatchDb, Part};
pub use network::{ChannelTransport, InMemoryTransport, NetworkError, Outbound, Peer, Transport};
pub use randomness::CorrelatedRandomness;
pub use session::{Session, Traffic};
pub use share::Replicated;

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
//!   (what the circuits need of where the shares live), [`device`] (the same phase on a
//!   kernel device: a GPU, or the kernels run on the host).
//! - The dot-product phase: [`db`] (the party's share database), [`dot`] (the engine
//!   interface), [`engine`] (CPU and GPU engines).
//! - The pipeline: [`pipeline`] (one party's batch), [`requests`] (request types to pipeline
//!   roles and outcomes), [`synthetic`] (synthetic irises), [`mod@bench`], [`process`].
//!
//! Conventions (ABY3-style replicated sharing): a value `x = x_0 + x_1 + x_2` (XOR for bits);
//! party `i` holds `(x_i, x_{i-1})`, called `own` and `prev`. Party `i` shares a PRF stream
//! with its next party (`i+1`) and one with its previous party (`i-1`). Every round sends one
//! message per direction carrying the whole batch.
#![deny(unsafe_code)]
#![deny(missing_docs, clippy::unwrap_used)]

pub mod bench;
pub mod binary;
pub mod bits;
pub mod circuit;
pub mod compare;
pub mod db;
pub mod device;
pub mod dot;
pub mod engine;
pub mod error;
pub mod local;
pub mod network;
pub mod pipeline;
pub mod process;
pub mod randomness;
pub mod recovery;
pub mod requests;
pub mod scratch;
pub mod session;
pub mod share;
pub mod synthetic;
pub mod wellformed;

pub use db::{MatchDb, Part};
pub use dot::DotEngine;
pub use error::EngineError;
pub use network::{ChannelTransport, InMemoryTransport, NetworkError, Outbound, Peer, Transport};
pub use randomness::CorrelatedRandomness;
pub use session::{Session, Traffic};
pub use share::Replicated;

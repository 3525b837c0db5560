//! The three-party protocol core: replicated secret sharing over Z_{2^16}, Z_{2^32} and
//! bit-sliced Z_2, driven by synchronous code over an abstract [`Transport`].
//!
//! Nothing here does I/O or knows about tonic: the same functions run over the in-memory
//! network in tests and benchmarks and over the node-to-node mTLS streams in production.
//!
//! Conventions (ABY3-style replicated sharing): a value `x = x_0 + x_1 + x_2` (XOR for bits);
//! party `i` holds `(x_i, x_{i-1})`, called `own` and `prev`. Party `i` shares a PRF stream
//! with its next party (`i+1`) and one with its previous party (`i-1`); see [`randomness`].
//! Every round sends one message per direction carrying the whole batch.

pub mod binary;
pub mod bits;
pub mod compare;
pub mod inject;
pub mod local;
pub mod network;
pub mod randomness;
pub mod session;
pub mod share;

pub use network::{ChannelTransport, InMemoryTransport, NetworkError, Outbound, Peer, Transport};
pub use randomness::CorrelatedRandomness;
pub use session::{Session, Traffic};
pub use share::Replicated;

//! The ocelli verifier node: envelope intake over gRPC and TLS, a durable
//! store, batch agreement between the three parties, and the three-party
//! matching pipeline ([`matching`], driving the protocol core `ocelli_mpc`
//! over the node-to-node links).
//!
//! Layout: [`config`] and [`keys`] (keygen) feed [`node::NodeState`], the
//! shared state behind one `Arc`; [`server::run`] serves it; [`intake`]
//! checks envelopes; [`store`] keeps everything durable; [`batch`] defines
//! what a batch computes and plans its results; [`agreement`] agrees on
//! batches and applies them; [`links`] carries MPC round traffic between
//! parties; [`client`] is what orbs and tests use. The crate forbids
//! `unsafe`: what needs it (SIMD kernels, the allocator and resource calls)
//! lives behind safe functions in `ocelli_mpc`.
#![forbid(unsafe_code)]
#![deny(missing_docs, clippy::unwrap_used)]

pub mod agreement;
pub mod batch;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod counting;
pub mod demo;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod ids;
pub mod intake;
pub mod keys;
pub mod links;
pub mod matching;
pub mod metrics;
pub mod node;
pub mod queue;
pub mod recovery;
pub mod server;
pub mod shares;
pub mod stats;
pub mod store;
pub mod tls;
pub mod tls_provider;

//! The ocelli verifier node.
#![forbid(unsafe_code)]
#![deny(missing_docs, clippy::unwrap_used)]

pub mod config;
pub mod keys;
pub mod tls;

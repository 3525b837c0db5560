//! Protobuf messages and gRPC services shared by the orb SDK and the nodes.
//!
//! Generated at build time from `proto/ocelli/v1/*.proto` with protox and
//! tonic-prost-build (no system `protoc`).

/// `ocelli.v1`: envelope, orb API, node-to-node API, health.
pub mod v1 {
    #![allow(missing_docs, clippy::all, clippy::pedantic, rust_2018_idioms)]
    #![allow(missing_debug_implementations)]
    include!(concat!(env!("OUT_DIR"), "/ocelli.v1.rs"));
}

//! The rustls provider of every TLS connection the node makes or accepts, and the key
//! exchange groups it offers. Apart from `tls` so the store's PostgreSQL client uses it without
//! depending on the node's TLS configuration.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// The key exchange groups a TLS config offers (a client) or accepts (a server).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyExchange {
    /// X25519MLKEM768 first, then ring's classical groups (X25519, P-256, P-384).
    HybridPreferred,
    /// X25519MLKEM768 alone: a handshake without it fails.
    HybridOnly,
}

impl KeyExchange {
    /// [`KeyExchange::HybridOnly`] when `require`d, else [`KeyExchange::HybridPreferred`].
    pub fn required(require: bool) -> Self {
        if require {
            Self::HybridOnly
        } else {
            Self::HybridPreferred
        }
    }
}

/// The provider of every TLS config of the node: ring's signatures, cipher suites and
/// certificate verification, and the key exchange groups of `kx`, X25519MLKEM768 taken from
/// aws-lc-rs (ring has no ML-KEM).
pub fn provider(kx: KeyExchange) -> Arc<CryptoProvider> {
    let ring = rustls::crypto::ring::default_provider();
    let hybrid = rustls::crypto::aws_lc_rs::kx_group::X25519MLKEM768;
    let kx_groups = match kx {
        KeyExchange::HybridOnly => vec![hybrid],
        KeyExchange::HybridPreferred => std::iter::once(hybrid)
            .chain(ring.kx_groups.iter().copied())
            .collect(),
    };
    Arc::new(CryptoProvider { kx_groups, ..ring })
}

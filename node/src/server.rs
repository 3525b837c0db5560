//! The node service, separated the mini-redis way: [`run`] takes bound
//! listeners and a shutdown future; `bin/` only parses config and sets up
//! logging.
//!
//! Shutdown (SIGINT/SIGTERM in the binary, any future in tests): readiness
//! drops and new submissions are refused; the servers stop accepting and
//! finish the calls in flight; party 0 finishes the batch round in flight
//! (committed, or aborted with its requests left durably pending for the
//! next start); then the store is closed. Every acknowledged request is
//! already durable, so nothing needs flushing beyond that.

mod http;
mod orb;
mod peer;
pub mod recovery;
mod results;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use shared_proto::v1::health_server::HealthServer;
use shared_proto::v1::orb_service_server::OrbServiceServer;
use shared_proto::v1::peer_service_server::PeerServiceServer;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use self::orb::{health, OrbApi, MAX_STREAM_IDS};
#[cfg(feature = "fuzzing")]
pub(crate) use self::orb::{parse_id, parse_ids};
pub use self::peer::PeerApi;
use crate::agreement::coordinator;
use crate::links::Peers;
use crate::node::{NodeState, StartError};
use crate::tls::{Admission, NodeTls};

/// Largest gRPC message accepted from an orb (the intake limit applies
/// below it and reports precisely).
const MAX_GRPC_MESSAGE: usize = 4 << 20;

/// The three listening sockets of a node.
#[derive(Debug)]
pub struct Listeners {
    /// Orb-facing gRPC (TLS).
    pub orb: TcpListener,
    /// Node-to-node gRPC (mutual TLS).
    pub peer: TcpListener,
    /// Plain HTTP metrics and health.
    pub metrics: TcpListener,
}

impl Listeners {
    /// Binds the configured addresses.
    ///
    /// # Errors
    /// An address is in use or not local.
    pub async fn bind(cfg: &crate::config::ListenConfig) -> std::io::Result<Self> {
        Ok(Self {
            orb: TcpListener::bind(cfg.orb).await?,
            peer: TcpListener::bind(cfg.peer).await?,
            metrics: TcpListener::bind(cfg.metrics).await?,
        })
    }

    /// The bound addresses (orb, peer, metrics).
    ///
    /// # Errors
    /// The sockets cannot report their addresses.
    pub fn addrs(&self) -> std::io::Result<(SocketAddr, SocketAddr, SocketAddr)> {
        Ok((
            self.orb.local_addr()?,
            self.peer.local_addr()?,
            self.metrics.local_addr()?,
        ))
    }
}

/// Serves `state` on `listeners` until `shutdown` completes, then shuts
/// down gracefully.
///
/// # Errors
/// TLS material cannot be loaded or a server fails.
pub async fn run(
    state: Arc<NodeState>,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartError> {
    let tls = NodeTls::load(&state.config)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let party = state.party.get();
    let (orb_addr, peer_addr, metrics_addr) = listeners.addrs()?;

    let limits = &state.config.connections;
    let orb_api = OrbApi::new(state.clone());
    let dispatch_results = tokio::spawn(orb_api.dispatch_results());
    let orb_incoming = crate::tls::incoming(
        listeners.orb,
        tls.orb_server.clone(),
        Admission::new("orb", limits, &state.metrics),
        state.metrics.tls_handshakes("orb"),
        stop_rx.clone(),
        None,
    );
    let mut orb_stop = stop_rx.clone();
    let mut orb_builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(limits.keepalive_interval())
        .http2_keepalive_timeout(Some(limits.keepalive_timeout()));
    if let Some(age) = limits.max_orb_connection_age() {
        orb_builder = orb_builder.max_connection_age(age);
    }
    let orb_server = tokio::spawn(
        orb_builder
            .add_service(tonic::service::interceptor::InterceptedService::new(
                OrbServiceServer::new(orb_api.clone()).max_decoding_message_size(MAX_GRPC_MESSAGE),
                orb::Authenticate(tls.orb_clients.clone()),
            ))
            .add_service(tonic::service::interceptor::InterceptedService::new(
                HealthServer::new(orb_api),
                orb::Authenticate(tls.orb_clients.clone()),
            ))
            .serve_with_incoming_shutdown(orb_incoming, async move {
                let _ = orb_stop.wait_for(|s| *s).await;
            }),
    );

    let peer_api = PeerApi::new(state.clone(), tls.peer_certs.clone());
    let mpc_links: crate::tls::MpcHandler = {
        let state = state.clone();
        let certs = tls.peer_certs.clone();
        Arc::new(move |conn| {
            let state = state.clone();
            let certs = certs.clone();
            tokio::spawn(async move { crate::links::serve(&state.links, &certs, conn).await });
        })
    };
    let peer_incoming = crate::tls::incoming(
        listeners.peer,
        tls.peer_server.clone(),
        Admission::new("peer", limits, &state.metrics),
        state.metrics.tls_handshakes("peer"),
        stop_rx.clone(),
        Some(mpc_links),
    );
    let (peer_stop_tx, mut peer_stop_rx) = watch::channel(false);
    // No age limit here: a peer's commit may run for minutes on its connection.
    let peer_server = tokio::spawn(
        tonic::transport::Server::builder()
            .http2_keepalive_interval(limits.keepalive_interval())
            .http2_keepalive_timeout(Some(limits.keepalive_timeout()))
            .initial_stream_window_size(crate::tls::PEER_STREAM_WINDOW)
            .initial_connection_window_size(crate::tls::PEER_CONNECTION_WINDOW)
            .add_service(
                PeerServiceServer::new(peer_api)
                    .max_decoding_message_size(crate::config::PEER_MESSAGE_CAP)
                    .max_encoding_message_size(crate::config::PEER_MESSAGE_CAP),
            )
            .serve_with_incoming_shutdown(peer_incoming, async move {
                let _ = peer_stop_rx.wait_for(|s| *s).await;
            }),
    );

    let http = tokio::spawn(http::serve(
        listeners.metrics,
        state.clone(),
        Admission::new("metrics", limits, &state.metrics),
        stop_rx.clone(),
    ));

    let peers = Peers::connect(&state.config, &tls)?;
    let _ = state.peers.set(peers.clone());
    let probe = tokio::spawn(crate::node::health::probe_peers(
        state.clone(),
        peers.clone(),
        stop_rx.clone(),
    ));
    let snapshots = tokio::spawn(crate::node::maintain_snapshot(
        state.clone(),
        stop_rx.clone(),
    ));
    // Only party 0 runs batches. Parties 1 and 2 decide nothing on their own, time-outs
    // included: a request is final only through a committed batch, so the three agree.
    let batch_task = (state.party == coordinator::COORDINATOR)
        .then(|| tokio::spawn(coordinator::run(state.clone(), peers, stop_rx.clone())));

    state.set_ready(true);
    tracing::info!(
        party,
        %orb_addr,
        %peer_addr,
        %metrics_addr,
        evaluator = state.evaluator.name(),
        "node serving"
    );

    shutdown.await;
    tracing::info!(party, "shutting down: refusing new submissions");
    state.set_draining();
    let _ = stop_tx.send(true);
    if let Some(batch_task) = batch_task {
        let _ = tokio::time::timeout(Duration::from_secs(20), batch_task).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), orb_server).await;
    // Peers may still be committing to us while we drain; stop last.
    state.links.close_all();
    let _ = peer_stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), peer_server).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), http).await;
    // Awaited, not only aborted: each holds the state, and with it the store, until dropped;
    // the store must be closed when this returns. The snapshot writer saw the stop and
    // abandons a snapshot under way at its next rows.
    probe.abort();
    dispatch_results.abort();
    let _ = probe.await;
    let _ = dispatch_results.await;
    let _ = tokio::time::timeout(Duration::from_secs(10), snapshots).await;
    // Wait for in-flight batch application to finish before the store closes.
    drop(state.apply_lock.lock().await);
    tracing::info!(party, "shutdown complete");
    Ok(())
}

//! Byte links between two parties for MPC round traffic, carried by the
//! `PeerService.MpcStream` bidirectional stream over mutual TLS.
//!
//! A link is what a synchronous protocol core needs: a function that queues
//! one whole message for the peer (`false` once the link is gone) and a
//! blocking receiver of whole messages from it. The party with the lower id
//! dials ([`dial`]); the other side's server registers the incoming stream
//! in its [`LinkHub`], where the protocol picks it up with
//! [`LinkHub::accept`]. Both sides name the stream by a session id (e.g.
//! the batch id). The caller's party id comes from its pinned certificate.
//!
//! Messages are queued without bound (one protocol round is at most a few
//! messages per direction); each must fit in one gRPC message (64 MiB on
//! the peer port).

use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver};
use std::sync::Mutex;
use std::time::Duration;

use shared_proto::v1::peer_service_client::PeerServiceClient;

use shared_proto::v1::MpcFrame;
use tokio::sync::Notify;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

pub use ocelli_mpc::network::Outbound;

/// One end of a link to one peer.
pub struct MpcLink {
    /// Sends a whole message.
    pub send: Outbound,
    /// Receives whole messages, in order.
    pub recv: Receiver<Vec<u8>>,
}

impl std::fmt::Debug for MpcLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpcLink").finish_non_exhaustive()
    }
}

/// Incoming links waiting to be claimed, by (session id, peer party).
#[derive(Debug, Default)]
pub struct LinkHub {
    waiting: Mutex<HashMap<(u64, u8), MpcLink>>,
    arrived: Notify,
}

impl LinkHub {
    fn offer(&self, session: u64, peer: u8, link: MpcLink) {
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((session, peer), link);
        self.arrived.notify_waiters();
    }

    /// Drops every unclaimed link (ends their streams), e.g. at shutdown.
    pub fn close_all(&self) {
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Waits up to `timeout` for `peer` to open session `session`.
    ///
    /// # Errors
    /// The peer did not connect in time.
    pub async fn accept(
        &self,
        session: u64,
        peer: u8,
        timeout: Duration,
    ) -> Result<MpcLink, Status> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.arrived.notified();
            if let Some(l) = self
                .waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&(session, peer))
            {
                return Ok(l);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(Status::deadline_exceeded(format!(
                    "party {peer} did not open MPC session {session} in time"
                )));
            }
        }
    }
}

/// The payload an inbound frame carries for the link of `session`; `None` for a frame of
/// another session, which ends the stream (one stream carries one session).
pub fn frame_payload(session: u64, frame: MpcFrame) -> Option<Vec<u8>> {
    (frame.session_id == session).then_some(frame.payload)
}

/// Server side of `MpcStream`: the first frame names the session; the link
/// is offered to the hub; frames of other sessions end the stream.
pub(crate) async fn serve(
    hub: &LinkHub,
    peer: u8,
    mut inbound: Streaming<MpcFrame>,
) -> Result<UnboundedReceiverStream<Result<MpcFrame, Status>>, Status> {
    let first = inbound
        .message()
        .await?
        .ok_or_else(|| Status::invalid_argument("empty MPC stream"))?;
    let session = first.session_id;
    let (in_tx, in_rx) = channel();
    if !first.payload.is_empty() {
        let _ = in_tx.send(first.payload);
    }
    tokio::spawn(async move {
        while let Ok(Some(f)) = inbound.message().await {
            let Some(payload) = frame_payload(session, f) else {
                break;
            };
            if in_tx.send(payload).is_err() {
                break;
            }
        }
    });
    let (out_tx, out_rx) = tokio::sync::mpsc::unbounded_channel();
    let send: Outbound = Box::new(move |payload| {
        out_tx
            .send(Ok(MpcFrame {
                session_id: session,
                round: 0,
                payload,
            }))
            .is_ok()
    });
    hub.offer(session, peer, MpcLink { send, recv: in_rx });
    Ok(UnboundedReceiverStream::new(out_rx))
}

/// Opens session `session` to the peer behind `client`.
///
/// # Errors
/// The peer refused or could not be reached.
pub async fn dial(client: &PeerServiceClient<Channel>, session: u64) -> Result<MpcLink, Status> {
    let (out_tx, out_rx) = tokio::sync::mpsc::unbounded_channel();
    // The hello frame names the session.
    out_tx
        .send(MpcFrame {
            session_id: session,
            round: 0,
            payload: Vec::new(),
        })
        .map_err(|_| Status::internal("link closed"))?;
    let mut client = client.clone();
    let mut inbound = client
        .mpc_stream(UnboundedReceiverStream::new(out_rx))
        .await?
        .into_inner();
    let (in_tx, in_rx) = channel();
    tokio::spawn(async move {
        while let Ok(Some(f)) = inbound.message().await {
            let Some(payload) = frame_payload(session, f) else {
                break;
            };
            if in_tx.send(payload).is_err() {
                break;
            }
        }
    });
    let send: Outbound = Box::new(move |payload| {
        out_tx
            .send(MpcFrame {
                session_id: session,
                round: 0,
                payload,
            })
            .is_ok()
    });
    Ok(MpcLink { send, recv: in_rx })
}

/// Clients for the two peers, by party id.
#[derive(Clone, Debug)]
pub struct Peers {
    pub(crate) clients: Vec<(u8, PeerServiceClient<Channel>)>,
}

/// Why the peer clients could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PeersError {
    /// The TLS set-up has no client configuration for a configured peer.
    #[error("no TLS client config for party {0}")]
    NoTlsConfig(u8),
    /// A peer's address or server name is unusable.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}

impl Peers {
    /// Lazily connecting mTLS clients for every configured peer.
    ///
    /// # Errors
    /// Bad TLS material or addresses.
    pub fn connect(
        config: &crate::config::NodeConfig,
        tls: &crate::tls::NodeTls,
    ) -> Result<Self, PeersError> {
        let mut clients = Vec::new();
        for p in &config.peers {
            let cfg = tls
                .peer_clients
                .get(&p.party_id)
                .ok_or(PeersError::NoTlsConfig(p.party_id))?;
            let name = p
                .server_name
                .clone()
                .unwrap_or_else(|| p.address.ip().to_string());
            let ch = crate::tls::channel(
                p.address,
                &name,
                cfg.clone(),
                config.batch.peer_rpc_timeout(),
            )?;
            let client = PeerServiceClient::new(ch)
                .max_decoding_message_size(crate::config::PEER_MESSAGE_CAP)
                .max_encoding_message_size(crate::config::PEER_MESSAGE_CAP);
            clients.push((p.party_id, client));
        }
        Ok(Self { clients })
    }

    /// The client for `party`.
    pub fn client(&self, party: u8) -> Option<&PeerServiceClient<Channel>> {
        self.clients
            .iter()
            .find(|(p, _)| *p == party)
            .map(|(_, c)| c)
    }
}

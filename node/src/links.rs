//! Byte links between two parties for MPC round traffic: one mutual-TLS connection per
//! session on the peer port, told apart from the gRPC peer service by its ALPN protocol
//! ([`crate::tls::MPC_ALPN`]).
//!
//! On the wire, after the TLS 1.3 handshake (the peer service's pinned certificates, both
//! ways): the dialer sends the session id (8 bytes, little endian); then each direction
//! carries one frame per protocol message, `length (u32, little endian) || payload`, the
//! frame at most [`PEER_MESSAGE_CAP`] bytes. A link ends when either side closes its
//! connection. A message's bytes go from the protocol's buffer into TLS records and from the
//! records into the receiver's buffer, with no HTTP/2 framing, flow-control windows or
//! protobuf copies between: round traffic is most of what the nodes send each other.
//!
//! A link is what a synchronous protocol core needs: a function that queues one whole
//! message for the peer (`false` once the link is gone) and a blocking receiver of whole
//! messages from it. The party with the lower id dials ([`MpcDialer::dial`]); the other
//! side's peer port hands the connection to its [`LinkHub`], where the protocol picks it up
//! with [`LinkHub::accept`]. Both sides name the link by a session id (e.g. the batch id);
//! the dialer's party id comes from its pinned certificate. Nothing of an accepted link is read
//! past its session id until the protocol claims it, so a link nobody claims holds no buffer
//! (TCP holds the peer back); a claimed link's messages are queued without bound (one
//! protocol round is at most a few messages per direction, each at most the frame cap).

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::mpsc::{channel, Receiver};
use std::sync::Mutex;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use sdk_orb::PartyId;
use shared_proto::v1::peer_service_client::PeerServiceClient;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use tokio_rustls::TlsConnector;
use tonic::transport::Channel;

use crate::config::PEER_MESSAGE_CAP;
use crate::tls::{BufferedTcp, PeerCerts, TlsError, MPC_ALPN};

pub use ocelli_mpc::network::Outbound;

/// Bytes of a frame's length prefix.
pub const FRAME_HEADER: usize = 4;

/// Ciphertext rustls may hold for the socket: a round's message is encrypted and handed to
/// the kernel a megabyte at a time instead of 64 KiB (rustls's default).
const TLS_SEND_BUFFER: usize = 1 << 20;

/// How long an accepted connection may take to name its session.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a link could not be opened, or ended.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// Connecting, the handshake or the transfer failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The peer did not answer within the time allowed.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The peer's port does not speak the MPC link protocol.
    #[error("the peer did not agree to the MPC link protocol")]
    Protocol,
    /// The peer did not open the session in time.
    #[error("{peer} did not open MPC session {session} in time")]
    NotOpened {
        /// The peer.
        peer: PartyId,
        /// The session.
        session: u64,
    },
    /// A frame longer than the cap (the link is closed).
    #[error("an MPC frame of {0} bytes is over the {PEER_MESSAGE_CAP}-byte cap")]
    FrameTooLarge(u64),
}

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

/// The payload length a frame's header announces, if the frame fits in the cap.
///
/// # Errors
/// [`LinkError::FrameTooLarge`].
pub fn frame_len(header: [u8; FRAME_HEADER]) -> Result<usize, LinkError> {
    let len = u32::from_le_bytes(header);
    match usize::try_from(len) {
        Ok(n) if n <= PEER_MESSAGE_CAP - FRAME_HEADER => Ok(n),
        _ => Err(LinkError::FrameTooLarge(
            u64::from(len) + FRAME_HEADER as u64,
        )),
    }
}

/// The header of a frame carrying `payload`.
///
/// # Errors
/// [`LinkError::FrameTooLarge`].
pub fn frame_header(payload: &[u8]) -> Result<[u8; FRAME_HEADER], LinkError> {
    let too_large = || LinkError::FrameTooLarge(payload.len() as u64 + FRAME_HEADER as u64);
    let len = u32::try_from(payload.len()).map_err(|_| too_large())?;
    let header = len.to_le_bytes();
    frame_len(header).map_err(|_| too_large())?;
    Ok(header)
}

/// The next whole frame's payload; `None` where the peer closed the connection between
/// frames.
async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Vec<u8>>, LinkError> {
    let mut header = [0u8; FRAME_HEADER];
    match r.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = frame_len(header)?;
    // Read into the spare capacity: zeroing it first would write every byte twice.
    let mut payload = Vec::with_capacity(len);
    while payload.len() < len {
        let rest = (len - payload.len()) as u64;
        if (&mut *r).take(rest).read_buf(&mut payload).await? == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
    }
    Ok(Some(payload))
}

async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, payload: &[u8]) -> Result<(), LinkError> {
    let header = frame_header(payload)?;
    // Vectored writes: the header and the payload share TLS records.
    let mut written = 0;
    while written < FRAME_HEADER + payload.len() {
        let n = match written.checked_sub(FRAME_HEADER) {
            None => {
                let parts = [IoSlice::new(&header[written..]), IoSlice::new(payload)];
                w.write_vectored(&parts).await?
            }
            Some(sent) => w.write(&payload[sent..]).await?,
        };
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into());
        }
        written += n;
    }
    // A TLS stream may hold the last records back when the socket was full.
    w.flush().await?;
    Ok(())
}

/// Runs a link over a connection that has named its session: a task reading frames into the
/// link's receiver, and one writing what the link sends. Dropping the link's sender closes
/// the connection's sending side; the peer closing ends the receiver.
fn spawn_link<S>(stream: S, peer: PartyId, session: u64) -> MpcLink
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut reader, mut writer) = tokio::io::split(stream);
    let (in_tx, in_rx) = channel();
    tokio::spawn(async move {
        loop {
            match read_frame(&mut reader).await {
                Ok(Some(m)) => {
                    if in_tx.send(m).is_err() {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(peer = peer.get(), session, error = %e, "MPC link closed");
                    break;
                }
            }
        }
    });
    let (out_tx, mut out_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        while let Some(m) = out_rx.recv().await {
            if let Err(e) = write_frame(&mut writer, &m).await {
                tracing::warn!(peer = peer.get(), session, error = %e, "MPC link closed");
                return;
            }
        }
        let _ = writer.shutdown().await;
    });
    let send: Outbound = Box::new(move |payload| out_tx.send(payload).is_ok());
    MpcLink { send, recv: in_rx }
}

/// Unclaimed links a hub keeps; beyond it the oldest is closed. Sessions run one at a time,
/// so at most two links wait at once unless a session failed before claiming its own.
pub const UNCLAIMED_LINKS: usize = 8;

/// An accepted link not yet claimed: starting it begins reading its frames.
type Unstarted = Box<dyn FnOnce() -> MpcLink + Send>;

/// Incoming links waiting to be claimed, by (session id, peer party), oldest first.
#[derive(Default)]
pub struct LinkHub {
    waiting: Mutex<VecDeque<((u64, PartyId), Unstarted)>>,
    arrived: Notify,
}

impl std::fmt::Debug for LinkHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkHub").finish_non_exhaustive()
    }
}

impl LinkHub {
    fn offer(&self, session: u64, peer: PartyId, link: Unstarted) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        waiting.retain(|(key, _)| *key != (session, peer));
        waiting.push_back(((session, peer), link));
        if waiting.len() > UNCLAIMED_LINKS {
            if let Some(((session, peer), _)) = waiting.pop_front() {
                tracing::info!(
                    peer = peer.get(),
                    session,
                    "closed an MPC link nobody claimed"
                );
            }
        }
        drop(waiting);
        self.arrived.notify_waiters();
    }

    /// Drops every unclaimed link (closes their connections), e.g. at shutdown.
    pub fn close_all(&self) {
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Waits up to `timeout` for `peer` to open session `session`.
    ///
    /// # Errors
    /// [`LinkError::NotOpened`]: the peer did not connect in time.
    pub async fn accept(
        &self,
        session: u64,
        peer: PartyId,
        timeout: Duration,
    ) -> Result<MpcLink, LinkError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.arrived.notified();
            let claimed = {
                let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
                let at = waiting.iter().position(|(key, _)| *key == (session, peer));
                at.and_then(|at| waiting.remove(at))
            };
            if let Some((_, start)) = claimed {
                return Ok(start());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(LinkError::NotOpened { peer, session });
            }
        }
    }
}

/// The peer port's side of an MPC connection whose handshake chose the link protocol: reads
/// the session id, then offers the link to `hub` under the dialer's party, which its pinned
/// certificate names.
pub(crate) async fn serve(
    hub: &LinkHub,
    certs: &PeerCerts,
    mut tls: tokio_rustls::server::TlsStream<BufferedTcp>,
) {
    let peer = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| certs.party_of(c));
    let Some(peer) = peer else {
        tracing::info!("MPC connection without a configured peer certificate refused");
        return;
    };
    let mut session = [0u8; 8];
    match tokio::time::timeout(HELLO_TIMEOUT, tls.read_exact(&mut session)).await {
        Ok(Ok(_)) => {}
        _ => {
            tracing::info!(
                peer = peer.get(),
                "MPC connection closed before naming its session"
            );
            return;
        }
    }
    let session = u64::from_le_bytes(session);
    tls.get_mut().1.set_buffer_limit(Some(TLS_SEND_BUFFER));
    hub.offer(
        session,
        peer,
        Box::new(move || spawn_link(tls, peer, session)),
    );
}

/// Opens MPC links to one peer.
#[derive(Clone)]
pub struct MpcDialer {
    party: PartyId,
    addr: SocketAddr,
    name: ServerName<'static>,
    connector: TlsConnector,
    timeout: Duration,
}

impl std::fmt::Debug for MpcDialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpcDialer")
            .field("party", &self.party)
            .field("addr", &self.addr)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl MpcDialer {
    /// Dials `party` at `addr`, verifying it as `server_name` with `config` (the peer
    /// service's client config for that party; the link protocol replaces its ALPN), each
    /// connection and handshake bounded by `timeout`.
    ///
    /// # Errors
    /// An invalid server name.
    pub fn new(
        party: PartyId,
        addr: SocketAddr,
        server_name: &str,
        config: &ClientConfig,
        timeout: Duration,
    ) -> Result<Self, TlsError> {
        Ok(Self {
            party,
            addr,
            name: crate::tls::server_name_of(server_name)?,
            connector: TlsConnector::from(crate::tls::mpc_client_config(config)),
            timeout,
        })
    }

    /// Opens session `session` to the peer.
    ///
    /// # Errors
    /// The peer could not be reached, refused the handshake or the link protocol, or did not
    /// answer in time.
    pub async fn dial(&self, session: u64) -> Result<MpcLink, LinkError> {
        let open = async {
            let mut tls =
                crate::tls::connect(self.addr, &self.connector, self.name.clone()).await?;
            if tls.get_ref().1.alpn_protocol() != Some(MPC_ALPN) {
                return Err(LinkError::Protocol);
            }
            tls.get_mut().1.set_buffer_limit(Some(TLS_SEND_BUFFER));
            tls.write_all(&session.to_le_bytes()).await?;
            Ok(tls)
        };
        let tls = tokio::time::timeout(self.timeout, open)
            .await
            .map_err(|_| LinkError::Timeout(self.timeout))??;
        Ok(spawn_link(tls, self.party, session))
    }
}

/// Clients for the two peers, by party id: the gRPC peer service, and the MPC links.
#[derive(Clone, Debug)]
pub struct Peers {
    pub(crate) clients: Vec<(PartyId, PeerServiceClient<Channel>)>,
    mpc: Vec<MpcDialer>,
}

/// Why the peer clients could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PeersError {
    /// The TLS set-up has no client configuration for a configured peer.
    #[error("no TLS client config for {0}")]
    NoTlsConfig(PartyId),
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
        let mut mpc = Vec::new();
        for p in &config.peers {
            let cfg = tls
                .peer_clients
                .get(&p.party_id)
                .ok_or(PeersError::NoTlsConfig(p.party_id))?;
            let name = p
                .server_name
                .clone()
                .unwrap_or_else(|| p.address.ip().to_string());
            let timeout = config.batch.peer_rpc_timeout();
            let ch = crate::tls::channel(p.address, &name, cfg.clone(), timeout)?;
            let client = PeerServiceClient::new(ch)
                .max_decoding_message_size(PEER_MESSAGE_CAP)
                .max_encoding_message_size(PEER_MESSAGE_CAP);
            clients.push((p.party_id, client));
            mpc.push(MpcDialer::new(p.party_id, p.address, &name, cfg, timeout)?);
        }
        Ok(Self { clients, mpc })
    }

    /// The client for `party`.
    pub fn client(&self, party: PartyId) -> Option<&PeerServiceClient<Channel>> {
        self.clients
            .iter()
            .find(|(p, _)| *p == party)
            .map(|(_, c)| c)
    }

    /// The MPC link dialer for `party`.
    pub fn mpc(&self, party: PartyId) -> Option<&MpcDialer> {
        self.mpc.iter().find(|d| d.party == party)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_lengths_are_capped_with_their_header() {
        let largest = PEER_MESSAGE_CAP - FRAME_HEADER;
        let header = |n: usize| (n as u32).to_le_bytes();
        assert_eq!(frame_len(header(0)).ok(), Some(0));
        assert_eq!(frame_len(header(largest)).ok(), Some(largest));
        assert!(matches!(
            frame_len(header(largest + 1)),
            Err(LinkError::FrameTooLarge(n)) if n == PEER_MESSAGE_CAP as u64 + 1
        ));
        assert!(frame_len([0xff; FRAME_HEADER]).is_err());
        assert_eq!(frame_header(&[7; 300]).ok(), Some(header(300)));
    }

    type Res = Result<(), Box<dyn std::error::Error>>;

    #[tokio::test]
    async fn a_hub_keeps_the_newest_unclaimed_links_and_starts_them_when_claimed() -> Res {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let hub = LinkHub::default();
        let started = Arc::new(AtomicUsize::new(0));
        let link = || -> Unstarted {
            let started = started.clone();
            Box::new(move || {
                started.fetch_add(1, Ordering::SeqCst);
                MpcLink {
                    send: Box::new(|_| true),
                    recv: channel().1,
                }
            })
        };
        let peer = PartyId::ALL[1];
        for session in 0..=UNCLAIMED_LINKS as u64 {
            hub.offer(session, peer, link());
        }
        assert_eq!(
            started.load(Ordering::SeqCst),
            0,
            "nothing read before a claim"
        );
        let now = Duration::ZERO;
        assert!(
            hub.accept(0, peer, now).await.is_err(),
            "the oldest was closed"
        );
        for session in 1..=UNCLAIMED_LINKS as u64 {
            hub.accept(session, peer, now).await?;
        }
        assert_eq!(started.load(Ordering::SeqCst), UNCLAIMED_LINKS);
        assert!(
            hub.accept(1, peer, now).await.is_err(),
            "a link is claimed once"
        );
        Ok(())
    }

    #[tokio::test]
    async fn frames_cross_a_byte_stream_whole_and_in_order() -> Res {
        // A pipe smaller than a frame: both sides run in pieces.
        let (mut a, mut b) = tokio::io::duplex(1 << 10);
        let sent: Vec<Vec<u8>> = vec![vec![], vec![1], (0..=255).cycle().take(5_000).collect()];
        let expected = sent.clone();
        let writer = tokio::spawn(async move {
            for m in &sent {
                write_frame(&mut a, m).await?;
            }
            Ok::<_, LinkError>(())
        });
        let mut got = Vec::new();
        while let Some(m) = read_frame(&mut b).await? {
            got.push(m);
        }
        writer.await??;
        assert_eq!(got, expected);
        Ok(())
    }

    #[tokio::test]
    async fn a_frame_cut_short_is_an_error_and_not_a_close() -> Res {
        let (mut a, mut b) = tokio::io::duplex(256);
        a.write_all(&100u32.to_le_bytes()).await?;
        a.write_all(&[5; 10]).await?;
        drop(a);
        assert!(matches!(read_frame(&mut b).await, Err(LinkError::Io(_))));
        Ok(())
    }

    #[tokio::test]
    async fn an_oversized_frame_closes_the_reader_before_any_allocation() -> Res {
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&u32::MAX.to_le_bytes()).await?;
        assert!(matches!(
            read_frame(&mut b).await,
            Err(LinkError::FrameTooLarge(_))
        ));
        Ok(())
    }
}

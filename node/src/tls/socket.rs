//! The TCP stream under TLS: read through a buffer once the peer has authenticated, closed at
//! its deadline until then.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tonic::transport::server::{Connected, TcpConnectInfo, TlsConnectInfo};

use super::admission::{Closer, Slot};

/// Bytes read from the socket at once under TLS.
const SOCKET_READ_BUFFER: usize = 256 << 10;

/// How long a refused call's answer has to reach the caller before its unauthenticated
/// connection is closed.
const REFUSAL_GRACE: Duration = Duration::from_secs(1);

/// A TCP stream read through a buffer once its peer has authenticated: rustls asks for at most
/// 4 KiB per read, which on a bare socket is a system call per 4 KiB of round traffic. Until
/// then it holds an admission [`Slot`] instead of a buffer, and every read and write fails from
/// the slot's deadline on (the TLS handshake or the HTTP/2 server above then closes it).
#[derive(Debug)]
pub struct BufferedTcp {
    tcp: TcpStream,
    /// Read-ahead; empty (and unused) until the peer has authenticated.
    ahead: Box<[u8]>,
    pos: usize,
    filled: usize,
    unauthenticated: Option<Unauthenticated>,
}

#[derive(Debug)]
struct Unauthenticated {
    slot: Slot,
    timer: Pin<Box<Sleep>>,
    timer_at: Instant,
}

impl BufferedTcp {
    /// Wraps a connection this node dialled: unbuffered until [`BufferedTcp::authenticated`].
    pub fn new(tcp: TcpStream) -> Self {
        Self {
            tcp,
            ahead: Box::default(),
            pos: 0,
            filled: 0,
            unauthenticated: None,
        }
    }

    /// Wraps an accepted connection holding `slot`, closed at the slot's deadline until
    /// [`BufferedTcp::authenticated`].
    pub fn admitted(tcp: TcpStream, slot: Slot) -> Self {
        let timer_at = slot.closer().deadline();
        Self {
            unauthenticated: Some(Unauthenticated {
                slot,
                timer: Box::pin(tokio::time::sleep_until(timer_at)),
                timer_at,
            }),
            ..Self::new(tcp)
        }
    }

    /// The TLS handshake verified the peer: gives back its admission slot, lifts its deadline
    /// and reads through the buffer from now on.
    pub fn authenticated(&mut self) {
        self.unauthenticated = None;
        if self.ahead.is_empty() {
            self.ahead = vec![0; SOCKET_READ_BUFFER].into_boxed_slice();
        }
    }

    /// Fails once the deadline has passed; until then, arranges to be woken at it (or when an
    /// eviction or a refusal brings it forward).
    fn check_deadline(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let Some(u) = &mut self.unauthenticated else {
            return Ok(());
        };
        let closer = u.slot.closer();
        closer.register(cx.waker());
        let at = closer.deadline();
        if at != u.timer_at {
            u.timer.as_mut().reset(at);
            u.timer_at = at;
        }
        match u.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "closed before it authenticated",
            )),
            Poll::Pending => Ok(()),
        }
    }
}

impl AsyncRead for BufferedTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check_deadline(cx)?;
        let drained = this.pos == this.filled;
        if this.ahead.is_empty() || (drained && buf.remaining() >= this.ahead.len()) {
            return Pin::new(&mut this.tcp).poll_read(cx, buf);
        }
        if drained {
            let mut ahead = ReadBuf::new(&mut this.ahead);
            ready!(Pin::new(&mut this.tcp).poll_read(cx, &mut ahead))?;
            this.filled = ahead.filled().len();
            this.pos = 0;
        }
        let n = buf.remaining().min(this.filled - this.pos);
        buf.put_slice(&this.ahead[this.pos..this.pos + n]);
        this.pos += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for BufferedTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_deadline(cx)?;
        Pin::new(&mut this.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_deadline(cx)?;
        Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check_deadline(cx)?;
        Pin::new(&mut this.tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// What a call learns of the connection it came on: `TlsConnectInfo<ConnectionInfo>` in the
/// request's extensions ([`connection`]).
#[derive(Clone, Debug)]
pub struct ConnectionInfo {
    /// The TCP addresses.
    pub tcp: TcpConnectInfo,
    unauthenticated: Option<Closer>,
}

impl ConnectionInfo {
    /// A call on this connection was refused for want of authentication: an unauthenticated
    /// connection closes once the refusal has had time to reach the caller.
    pub fn refused(&self) {
        if let Some(closer) = &self.unauthenticated {
            closer.close_by(Instant::now() + REFUSAL_GRACE);
        }
    }
}

impl Connected for BufferedTcp {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        ConnectionInfo {
            tcp: self.tcp.connect_info(),
            unauthenticated: self
                .unauthenticated
                .as_ref()
                .map(|u| u.slot.closer().clone()),
        }
    }
}

/// The connection a call came on, where it came over TLS.
pub fn connection<T>(request: &tonic::Request<T>) -> Option<&TlsConnectInfo<ConnectionInfo>> {
    request.extensions().get::<TlsConnectInfo<ConnectionInfo>>()
}

/// The client certificates the TLS handshake verified for a call's connection.
pub fn client_certs<T>(request: &tonic::Request<T>) -> Option<Arc<Vec<CertificateDer<'static>>>> {
    connection(request)?.peer_certs()
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::config::ConnectionsConfig;
    use crate::metrics::Metrics;
    use crate::tls::Admission;

    async fn pair() -> io::Result<(TcpStream, TcpStream)> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let client = TcpStream::connect(listener.local_addr()?).await?;
        Ok((client, listener.accept().await?.0))
    }

    #[tokio::test]
    async fn reads_through_the_buffer_once_authenticated() -> io::Result<()> {
        let (mut client, server) = pair().await?;
        let mut server = BufferedTcp::new(server);
        let sent: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        client.write_all(&sent[..10]).await?;
        let mut got = vec![0xA5; 10];
        server.read_exact(&mut got).await?;
        assert!(server.ahead.is_empty(), "no buffer before authentication");
        server.authenticated();
        client.write_all(&sent[10..]).await?;
        drop(client);
        let mut rest = Vec::new();
        server.read_to_end(&mut rest).await?;
        got.extend_from_slice(&rest);
        assert_eq!(got, sent);
        assert_eq!(server.ahead.len(), SOCKET_READ_BUFFER);
        Ok(())
    }

    #[tokio::test]
    async fn an_unauthenticated_connection_fails_at_its_deadline() -> io::Result<()> {
        let limits = ConnectionsConfig {
            unauthenticated_timeout_ms: 300,
            ..ConnectionsConfig::default()
        };
        let timeout = limits.unauthenticated_timeout();
        let admission = Admission::new("orb", &limits, &Metrics::new(sdk_orb::PartyId::ALL[0]));
        let admitted = |tcp| BufferedTcp::admitted(tcp, admission.admit([127, 0, 0, 1].into()));
        let mut byte = [0u8; 1];

        let (_client, server) = pair().await?;
        let mut server = admitted(server);
        let started = Instant::now();
        let e = server
            .read(&mut byte)
            .await
            .expect_err("read past the deadline");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let took = started.elapsed();
        assert!(took >= timeout * 9 / 10 && took < timeout * 3, "{took:?}");
        assert!(server.write(b"x").await.is_err());

        // A refusal brings the deadline forward (from the timeout to the grace: shorter, so
        // measured against a longer timeout).
        let limits = ConnectionsConfig {
            unauthenticated_timeout_ms: 10_000,
            ..ConnectionsConfig::default()
        };
        let admission = Admission::new("orb", &limits, &Metrics::new(sdk_orb::PartyId::ALL[0]));
        let (_client, server) = pair().await?;
        let mut server = BufferedTcp::admitted(server, admission.admit([127, 0, 0, 1].into()));
        let started = Instant::now();
        server.connect_info().refused();
        assert!(server.read(&mut byte).await.is_err());
        let took = started.elapsed();
        assert!(
            took >= REFUSAL_GRACE * 9 / 10 && took < REFUSAL_GRACE * 3,
            "{took:?}"
        );

        // Authenticated, it stays open past the deadline.
        let (_client, server) = pair().await?;
        let mut server = admitted(server);
        server.authenticated();
        assert!(
            tokio::time::timeout(timeout * 2, server.read(&mut byte))
                .await
                .is_err(),
            "an authenticated connection was closed"
        );
        Ok(())
    }
}

//! The transport the protocol core talks through, and an in-memory three-party network.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Duration;

use sdk_orb::PartyId;

/// One of the two other parties, relative to this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// Party `i + 1`.
    Next,
    /// Party `i - 1`.
    Prev,
}

impl Peer {
    /// The absolute id of this peer for `me`.
    pub fn of(self, me: PartyId) -> PartyId {
        match self {
            Peer::Next => me.next(),
            Peer::Prev => me.prev(),
        }
    }
}

/// Why a protocol message could not be exchanged.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// The peer went away.
    #[error("connection to the {0:?} party closed")]
    Closed(Peer),
    /// No message arrived in time.
    #[error("timed out waiting for the {0:?} party")]
    Timeout(Peer),
    /// A message had the wrong size for the round (a protocol or version mismatch).
    #[error("message from the {peer:?} party has {actual} bytes, expected {expected}")]
    Length {
        /// Sender.
        peer: Peer,
        /// Bytes expected.
        expected: usize,
        /// Bytes received.
        actual: usize,
    },
    /// The underlying transport failed.
    #[error("transport: {0}")]
    Transport(String),
}

/// Ordered, reliable delivery of whole messages to and from the two other parties.
pub trait Transport {
    /// Sends one message to `to`.
    ///
    /// # Errors
    /// If the peer is gone.
    fn send(&mut self, to: Peer, message: Vec<u8>) -> Result<(), NetworkError>;

    /// Receives the next message from `from`.
    ///
    /// # Errors
    /// If the peer is gone or too slow.
    fn recv(&mut self, from: Peer) -> Result<Vec<u8>, NetworkError>;
}

/// Outbound half of a link: hands a message to whatever carries it (an in-memory channel, or
/// a task feeding a gRPC stream); `false` if the link is gone.
pub type Outbound = Box<dyn Fn(Vec<u8>) -> bool + Send>;

/// A transport over channels: messages in arrive on blocking receivers, messages out go to
/// [`Outbound`] functions. The in-memory network and the node-to-node streams both use it.
pub struct ChannelTransport {
    to_next: Outbound,
    to_prev: Outbound,
    from_next: Receiver<Vec<u8>>,
    from_prev: Receiver<Vec<u8>>,
    timeout: Duration,
}

impl core::fmt::Debug for ChannelTransport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ChannelTransport")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl ChannelTransport {
    /// A transport from its four halves; a receive waits at most `timeout`.
    pub fn new(
        to_next: Outbound,
        to_prev: Outbound,
        from_next: Receiver<Vec<u8>>,
        from_prev: Receiver<Vec<u8>>,
        timeout: Duration,
    ) -> ChannelTransport {
        ChannelTransport {
            to_next,
            to_prev,
            from_next,
            from_prev,
            timeout,
        }
    }
}

/// The in-memory network's transport.
pub type InMemoryTransport = ChannelTransport;

/// Builds a connected in-memory network; element `i` is party `i`'s end.
pub fn in_memory_network() -> [InMemoryTransport; 3] {
    // forward[i] carries i -> i+1; backward[i] carries i -> i-1.
    let mut forward_tx = Vec::new();
    let mut forward_rx = Vec::new();
    let mut backward_tx = Vec::new();
    let mut backward_rx = Vec::new();
    for _ in 0..3 {
        let (tx, rx) = channel::<Vec<u8>>();
        forward_tx.push(tx);
        forward_rx.push(Some(rx));
        let (tx, rx) = channel::<Vec<u8>>();
        backward_tx.push(tx);
        backward_rx.push(Some(rx));
    }
    let outbound = |tx: &Sender<Vec<u8>>| -> Outbound {
        let tx = tx.clone();
        Box::new(move |m| tx.send(m).is_ok())
    };
    core::array::from_fn(|i| {
        let (prev, next) = ((i + 2) % 3, (i + 1) % 3);
        ChannelTransport::new(
            outbound(&forward_tx[i]),
            outbound(&backward_tx[i]),
            // Messages from next travel backward on next's channel; from prev, forward.
            backward_rx[next].take().expect("each receiver taken once"),
            forward_rx[prev].take().expect("each receiver taken once"),
            Duration::from_secs(120),
        )
    })
}

impl Transport for ChannelTransport {
    fn send(&mut self, to: Peer, message: Vec<u8>) -> Result<(), NetworkError> {
        let out = match to {
            Peer::Next => &self.to_next,
            Peer::Prev => &self.to_prev,
        };
        if out(message) {
            Ok(())
        } else {
            Err(NetworkError::Closed(to))
        }
    }

    fn recv(&mut self, from: Peer) -> Result<Vec<u8>, NetworkError> {
        let rx = match from {
            Peer::Next => &self.from_next,
            Peer::Prev => &self.from_prev,
        };
        rx.recv_timeout(self.timeout).map_err(|e| match e {
            std::sync::mpsc::RecvTimeoutError::Timeout => NetworkError::Timeout(from),
            std::sync::mpsc::RecvTimeoutError::Disconnected => NetworkError::Closed(from),
        })
    }
}

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

/// One party's end of an in-memory network: for tests, benchmarks and the single-process
/// bench command. Production uses the node-to-node streams.
#[derive(Debug)]
pub struct InMemoryTransport {
    to_next: Sender<Vec<u8>>,
    to_prev: Sender<Vec<u8>>,
    from_next: Receiver<Vec<u8>>,
    from_prev: Receiver<Vec<u8>>,
    timeout: Duration,
}

/// Builds a connected in-memory network; element `i` is party `i`'s end.
pub fn in_memory_network() -> [InMemoryTransport; 3] {
    // forward[i]: i -> i+1; backward[i]: i -> i-1.
    let mut forward: Vec<_> = (0..3).map(|_| channel()).collect();
    let mut backward: Vec<_> = (0..3).map(|_| channel()).collect();
    let mut forward_rx: Vec<Option<Receiver<Vec<u8>>>> = Vec::new();
    let mut backward_rx: Vec<Option<Receiver<Vec<u8>>>> = Vec::new();
    let mut forward_tx = Vec::new();
    let mut backward_tx = Vec::new();
    for (tx, rx) in forward.drain(..) {
        forward_tx.push(tx);
        forward_rx.push(Some(rx));
    }
    for (tx, rx) in backward.drain(..) {
        backward_tx.push(tx);
        backward_rx.push(Some(rx));
    }
    core::array::from_fn(|i| {
        let prev = (i + 2) % 3;
        let next = (i + 1) % 3;
        InMemoryTransport {
            to_next: forward_tx[i].clone(),
            to_prev: backward_tx[i].clone(),
            // Messages from prev travel forward on prev's channel; from next, backward.
            from_prev: forward_rx[prev].take().expect("each receiver taken once"),
            from_next: backward_rx[next].take().expect("each receiver taken once"),
            timeout: Duration::from_secs(120),
        }
    })
}

impl Transport for InMemoryTransport {
    fn send(&mut self, to: Peer, message: Vec<u8>) -> Result<(), NetworkError> {
        let tx = match to {
            Peer::Next => &self.to_next,
            Peer::Prev => &self.to_prev,
        };
        tx.send(message).map_err(|_| NetworkError::Closed(to))
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

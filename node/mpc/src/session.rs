//! One party's view of a protocol run: its id, transport, randomness and traffic counters,
//! and the primitive rounds every step is built from.

use sdk_orb::PartyId;

use crate::network::{NetworkError, Peer, Transport};
use crate::randomness::CorrelatedRandomness;
use crate::share::{decode, encode, Replicated, Word};

/// Bytes and messages this party sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Payload bytes sent.
    pub bytes_sent: u64,
    /// Messages sent.
    pub messages_sent: u64,
    /// Rounds (sequential exchanges) this party took part in.
    pub rounds: u64,
}

/// Parses a peer's message that must hold exactly `n` words: what every receive of a round
/// checks before the words reach the protocol.
///
/// # Errors
/// [`NetworkError::Length`] when the message is not exactly `n` words.
pub fn words_of_round<W: Word>(from: Peer, n: usize, bytes: &[u8]) -> Result<Vec<W>, NetworkError> {
    let length_error = || NetworkError::Length {
        peer: from,
        expected: n.saturating_mul(W::BYTES),
        actual: bytes.len(),
    };
    if Some(bytes.len()) != n.checked_mul(W::BYTES) {
        return Err(length_error());
    }
    decode(bytes).ok_or_else(length_error)
}

/// One party's protocol state.
pub struct Session<'a, T: Transport> {
    party: PartyId,
    transport: &'a mut T,
    randomness: &'a mut CorrelatedRandomness,
    traffic: Traffic,
}

impl<T: Transport> core::fmt::Debug for Session<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Session")
            .field("party", &self.party)
            .field("traffic", &self.traffic)
            .finish_non_exhaustive()
    }
}

impl<'a, T: Transport> Session<'a, T> {
    /// A session for `party`.
    pub fn new(
        party: PartyId,
        transport: &'a mut T,
        randomness: &'a mut CorrelatedRandomness,
    ) -> Session<'a, T> {
        Session {
            party,
            transport,
            randomness,
            traffic: Traffic::default(),
        }
    }

    /// This party.
    pub fn party(&self) -> PartyId {
        self.party
    }

    /// Traffic so far.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }

    /// The correlated randomness.
    pub fn randomness(&mut self) -> &mut CorrelatedRandomness {
        self.randomness
    }

    /// Sends words to a peer.
    ///
    /// # Errors
    /// Transport failures.
    pub fn send<W: Word>(&mut self, to: Peer, words: &[W]) -> Result<(), NetworkError> {
        let bytes = encode(words);
        self.traffic.bytes_sent += bytes.len() as u64;
        self.traffic.messages_sent += 1;
        self.transport.send(to, bytes)
    }

    /// Receives exactly `n` words from a peer.
    ///
    /// # Errors
    /// Transport failures, or a message of the wrong size.
    pub fn recv<W: Word>(&mut self, from: Peer, n: usize) -> Result<Vec<W>, NetworkError> {
        let bytes = self.transport.recv(from)?;
        words_of_round(from, n, &bytes)
    }

    /// Counts one communication round.
    pub fn round(&mut self) {
        self.traffic.rounds += 1;
    }

    /// The basic resharing round: sends `own` to the next party and returns the previous
    /// party's `own`, which is this party's `prev` component.
    ///
    /// # Errors
    /// Transport failures.
    pub fn pass_to_next<W: Word>(&mut self, own: Vec<W>) -> Result<Replicated<W>, NetworkError> {
        self.round();
        self.send(Peer::Next, &own)?;
        let prev = self.recv(Peer::Prev, own.len())?;
        Ok(Replicated::new(own, prev))
    }

    /// AND of shared bit vectors (replicated multiplication over Z_2, 64 gates per word).
    /// One round; draws `n` u64 from each stream.
    ///
    /// # Errors
    /// Transport failures.
    pub fn and(
        &mut self,
        x: &Replicated<u64>,
        y: &Replicated<u64>,
    ) -> Result<Replicated<u64>, NetworkError> {
        assert_eq!(x.len(), y.len());
        let alpha = self.randomness.zero_bits(x.len());
        let own = (0..x.len())
            .map(|j| {
                (x.own[j] & y.own[j]) ^ (x.own[j] & y.prev[j]) ^ (x.prev[j] & y.own[j]) ^ alpha[j]
            })
            .collect();
        self.pass_to_next(own)
    }

    /// Opens shared bit words to all three parties. One round: each party sends its `prev`
    /// component to the next party, which lacks exactly that one.
    ///
    /// # Errors
    /// Transport failures.
    pub fn open_bits(&mut self, x: &Replicated<u64>) -> Result<Vec<u64>, NetworkError> {
        self.round();
        self.send(Peer::Next, &x.prev)?;
        let missing: Vec<u64> = self.recv(Peer::Prev, x.len())?;
        Ok((0..x.len())
            .map(|j| x.own[j] ^ x.prev[j] ^ missing[j])
            .collect())
    }
}

//! One party's view of a protocol run: its id, transport, randomness and traffic counters,
//! and the primitive rounds every step is built from.

use sdk_orb::PartyId;
use zerocopy::IntoBytes;

use crate::network::{NetworkError, Peer, Transport};
use crate::randomness::CorrelatedRandomness;
use crate::share::{decode, encode, swap_to_le, Replicated, Word};

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
    check_round_length::<W>(from, n, bytes)?;
    decode(bytes).ok_or_else(|| length_error::<W>(from, n, bytes))
}

fn length_error<W: Word>(from: Peer, n: usize, bytes: &[u8]) -> NetworkError {
    NetworkError::Length {
        peer: from,
        expected: n.saturating_mul(W::BYTES),
        actual: bytes.len(),
    }
}

/// [`NetworkError::Length`] unless `bytes` is exactly `n` words.
fn check_round_length<W: Word>(from: Peer, n: usize, bytes: &[u8]) -> Result<(), NetworkError> {
    if Some(bytes.len()) == n.checked_mul(W::BYTES) {
        Ok(())
    } else {
        Err(length_error::<W>(from, n, bytes))
    }
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
        self.send_encoded(to, encode(words))
    }

    /// Sends a message already in wire form (words little-endian, as a device holds them).
    ///
    /// # Errors
    /// Transport failures.
    pub fn send_encoded(&mut self, to: Peer, bytes: Vec<u8>) -> Result<(), NetworkError> {
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

    /// Receives exactly `n` words from a peer in wire form (little-endian), unparsed: what a
    /// device uploads as it is.
    ///
    /// # Errors
    /// Transport failures, or a message of the wrong size.
    pub fn recv_encoded<W: Word>(&mut self, from: Peer, n: usize) -> Result<Vec<u8>, NetworkError> {
        let bytes = self.transport.recv(from)?;
        check_round_length::<W>(from, n, &bytes)?;
        Ok(bytes)
    }

    /// Counts one communication round.
    pub fn round(&mut self) {
        self.traffic.rounds += 1;
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
        let mut product = self.and_pairs(&[(x, y)])?;
        Ok(product.pop().expect("one product per pair"))
    }

    /// ANDs several pairs of equally long shared bit vectors in one round: one message of all
    /// the pairs' words, in the order of `pairs`, and the randomness of one [`Session::and`]
    /// of their concatenation. The operands are read where they lie; each product is built in
    /// its own vector, so nothing is concatenated or split.
    ///
    /// # Errors
    /// Transport failures, or a reply of the wrong size.
    pub fn and_pairs(
        &mut self,
        pairs: &[(&Replicated<u64>, &Replicated<u64>)],
    ) -> Result<Vec<Replicated<u64>>, NetworkError> {
        let n: usize = pairs.iter().map(|(x, _)| x.len()).sum();
        let mut message = Vec::with_capacity(n * u64::BYTES);
        let owns: Vec<Vec<u64>> = pairs
            .iter()
            .map(|(x, y)| {
                assert_eq!(x.len(), y.len());
                let mut own = self.randomness.zero_bits(x.len());
                let operands = x.own.iter().zip(&x.prev).zip(y.own.iter().zip(&y.prev));
                for (o, ((xo, xp), (yo, yp))) in own.iter_mut().zip(operands) {
                    *o ^= (xo & yo) ^ (xo & yp) ^ (xp & yo);
                }
                message.extend_from_slice(own.as_bytes());
                own
            })
            .collect();
        swap_to_le::<u64>(&mut message);
        self.round();
        self.send_encoded(Peer::Next, message)?;
        let received = self.transport.recv(Peer::Prev)?;
        check_round_length::<u64>(Peer::Prev, n, &received)?;
        let mut at = 0;
        Ok(owns
            .into_iter()
            .map(|own| {
                let bytes = &received[at..at + own.len() * u64::BYTES];
                at += bytes.len();
                let prev = decode(bytes).expect("a whole number of words");
                Replicated::new(own, prev)
            })
            .collect())
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

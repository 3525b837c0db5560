//! Three parties in one process: on threads over the in-memory network, for tests, benchmarks
//! and the `bench` command. Also the ideal-functionality helpers tests use (share and open in
//! the clear), and a transport that records a party's view.

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use sdk_orb::PartyId;

use crate::network::{in_memory_network, InMemoryTransport, NetworkError, Peer, Transport};
use crate::randomness::CorrelatedRandomness;
use crate::session::{Session, Traffic};
use crate::share::Replicated;

/// A transport that keeps a copy of every message it receives: a party's view.
#[derive(Debug)]
pub struct Recording {
    /// The transport recorded.
    pub inner: InMemoryTransport,
    /// Messages received, in order.
    pub received: View,
}

impl Transport for Recording {
    fn send(&mut self, to: Peer, message: Vec<u8>) -> Result<(), NetworkError> {
        self.inner.send(to, message)
    }

    fn recv(&mut self, from: Peer) -> Result<Vec<u8>, NetworkError> {
        let m = self.inner.recv(from)?;
        self.received.push((from, m.clone()));
        Ok(m)
    }
}

/// The messages one party received, in order, with their senders.
pub type View = Vec<(Peer, Vec<u8>)>;

/// A transport that replays one party's part of a recorded run ([`replays`]): a receive
/// returns the next message the party received from that peer, and a send must equal, byte
/// for byte, the message the party sent there. The party runs alone, as fast as it can, with
/// the peers' replies already at hand.
#[derive(Debug)]
pub struct Replay {
    /// Messages to serve, per peer ([`Peer::Next`], [`Peer::Prev`]), oldest last.
    incoming: [Vec<Vec<u8>>; 2],
    /// Messages the party must send, per peer, oldest last.
    expected: [Vec<Vec<u8>>; 2],
    sent: u64,
}

fn peer_slot(peer: Peer) -> usize {
    match peer {
        Peer::Next => 0,
        Peer::Prev => 1,
    }
}

/// The three parties' [`Replay`]s of one recorded run, from the three views: what party `i`
/// sent to a peer is what that peer received from it.
pub fn replays(views: [View; 3]) -> [Replay; 3] {
    let mut out: [Replay; 3] = core::array::from_fn(|_| Replay {
        incoming: [Vec::new(), Vec::new()],
        expected: [Vec::new(), Vec::new()],
        sent: 0,
    });
    for (receiver, view) in views.into_iter().enumerate() {
        let me = PartyId::ALL[receiver];
        for (from, message) in view {
            let sender = from.of(me).index();
            // The receiver is the sender's opposite neighbour.
            let back = match from {
                Peer::Next => Peer::Prev,
                Peer::Prev => Peer::Next,
            };
            out[sender].expected[peer_slot(back)].push(message.clone());
            out[receiver].incoming[peer_slot(from)].push(message);
        }
    }
    for replay in &mut out {
        for queue in replay.incoming.iter_mut().chain(replay.expected.iter_mut()) {
            queue.reverse();
        }
    }
    out
}

impl Transport for Replay {
    fn send(&mut self, to: Peer, message: Vec<u8>) -> Result<(), NetworkError> {
        self.sent += 1;
        match self.expected[peer_slot(to)].pop() {
            Some(recorded) if recorded == message => Ok(()),
            Some(_) => Err(NetworkError::Transport(format!(
                "message {} to the {to:?} party differs from the recording",
                self.sent
            ))),
            None => Err(NetworkError::Transport(format!(
                "message {} to the {to:?} party is past the recording",
                self.sent
            ))),
        }
    }

    fn recv(&mut self, from: Peer) -> Result<Vec<u8>, NetworkError> {
        self.incoming[peer_slot(from)]
            .pop()
            .ok_or(NetworkError::Closed(from))
    }
}

impl Replay {
    /// Whether every recorded message was received and every expected one sent.
    pub fn finished(&self) -> bool {
        self.incoming
            .iter()
            .chain(&self.expected)
            .all(Vec::is_empty)
    }
}

/// Runs `f` as party `party` alone over `transport`, with the pairwise seeds [`run_three`]
/// derives from `seed`; returns its result, traffic and transport.
///
/// # Panics
/// If the party thread cannot be started or panics.
pub fn run_one<R: Send, T: Transport + Send>(
    seed: u64,
    party: PartyId,
    mut transport: T,
    f: impl FnOnce(&mut Session<'_, T>) -> R + Send,
) -> (R, Traffic, T) {
    let seeds = pair_seeds(seed);
    let i = party.index();
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name(format!("party-{i}"))
            .stack_size(8 << 20)
            .spawn_scoped(scope, move || {
                let mut randomness =
                    CorrelatedRandomness::from_seeds(&seeds[i], &seeds[(i + 2) % 3]);
                let mut session = Session::new(party, &mut transport, &mut randomness);
                let out = f(&mut session);
                let traffic = session.traffic();
                (out, traffic, transport)
            })
            .expect("spawn a party thread")
            .join()
            .expect("party thread panicked")
    })
}

/// [`run_three`] over transports `wrap` makes of the in-memory network's ends.
pub fn run_three_wrapped<R: Send, T: Transport + Send>(
    seed: u64,
    wrap: impl Fn(InMemoryTransport) -> T + Sync,
    f: impl Fn(&mut Session<'_, T>) -> R + Sync,
) -> [(R, Traffic, T); 3] {
    run_three_over(&pair_seeds(seed), wrap, f)
}

/// A party's link in a benchmark run: live over the in-memory network, live and recorded, or
/// replayed from a recording.
#[derive(Debug)]
pub enum Link {
    /// The in-memory network.
    Live(InMemoryTransport),
    /// The in-memory network, every message received kept.
    Recording(Recording),
    /// A recorded run replayed.
    Replay(Replay),
}

impl Link {
    /// A recording link over `inner`.
    pub fn recording(inner: InMemoryTransport) -> Link {
        Link::Recording(Recording {
            inner,
            received: Vec::new(),
        })
    }

    /// What a recording link received; empty for the others.
    pub fn into_view(self) -> View {
        match self {
            Link::Recording(r) => r.received,
            Link::Live(_) | Link::Replay(_) => Vec::new(),
        }
    }
}

impl Transport for Link {
    fn send(&mut self, to: Peer, message: Vec<u8>) -> Result<(), NetworkError> {
        match self {
            Link::Live(t) => t.send(to, message),
            Link::Recording(t) => t.send(to, message),
            Link::Replay(t) => t.send(to, message),
        }
    }

    fn recv(&mut self, from: Peer) -> Result<Vec<u8>, NetworkError> {
        match self {
            Link::Live(t) => t.recv(from),
            Link::Recording(t) => t.recv(from),
            Link::Replay(t) => t.recv(from),
        }
    }
}

/// The three pairwise PRF seeds [`run_three`] derives from `seed`: 96 bytes of
/// `ChaCha20Rng::seed_from_u64(seed)`, `seeds[i]` shared by parties `i` and `i+1`.
pub fn pair_seeds(seed: u64) -> [[u8; 32]; 3] {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    core::array::from_fn(|_| {
        let mut s = [0u8; 32];
        rng.fill_bytes(&mut s);
        s
    })
}

/// Runs `f` as each of the three parties concurrently, with pairwise seeds from `seed` (see
/// [`pair_seeds`]); returns their results, traffic and received messages.
pub fn run_three<R: Send>(
    seed: u64,
    f: impl Fn(&mut Session<'_, Recording>) -> R + Sync,
) -> [(R, Traffic, View); 3] {
    run_three_seeded(&pair_seeds(seed), f)
}

/// [`run_three`] with the pairwise seeds given: `seeds[i]` is shared by parties `i` and
/// `i+1`, so party `i` draws its next stream from `seeds[i]` and its previous stream from
/// `seeds[i-1]`. Replaying the conformance vectors needs the seeds themselves.
///
/// # Panics
/// If a party thread cannot be started or panics.
pub fn run_three_seeded<R: Send>(
    seeds: &[[u8; 32]; 3],
    f: impl Fn(&mut Session<'_, Recording>) -> R + Sync,
) -> [(R, Traffic, View); 3] {
    let record = |inner| Recording {
        inner,
        received: Vec::new(),
    };
    run_three_over(seeds, record, f).map(|(r, traffic, t)| (r, traffic, t.received))
}

/// [`run_three`] without keeping the messages: what the benchmarks run, since a node keeps
/// none either (a party's view grows by every byte it receives).
pub fn run_three_unrecorded<R: Send>(
    seed: u64,
    f: impl Fn(&mut Session<'_, InMemoryTransport>) -> R + Sync,
) -> [(R, Traffic); 3] {
    run_three_over(&pair_seeds(seed), |t| t, f).map(|(r, traffic, _)| (r, traffic))
}

/// The three parties on threads, each over the in-memory network wrapped by `wrap`.
fn run_three_over<R: Send, T: Transport + Send>(
    seeds: &[[u8; 32]; 3],
    wrap: impl Fn(InMemoryTransport) -> T + Sync,
    f: impl Fn(&mut Session<'_, T>) -> R + Sync,
) -> [(R, Traffic, T); 3] {
    let transports = in_memory_network();
    let (f, wrap) = (&f, &wrap);
    std::thread::scope(|scope| {
        let handles: Vec<_> = transports
            .into_iter()
            .enumerate()
            .map(|(i, inner)| {
                let party = std::thread::Builder::new()
                    .name(format!("party-{i}"))
                    // Shares of a person are 77 KB; unoptimised builds keep several on the stack.
                    .stack_size(8 << 20);
                party.spawn_scoped(scope, move || {
                    let mut transport = wrap(inner);
                    let mut randomness =
                        CorrelatedRandomness::from_seeds(&seeds[i], &seeds[(i + 2) % 3]);
                    let mut session =
                        Session::new(PartyId::ALL[i], &mut transport, &mut randomness);
                    let out = f(&mut session);
                    let traffic = session.traffic();
                    (out, traffic, transport)
                })
            })
            .collect();
        let mut results: Vec<_> = handles
            .into_iter()
            .map(|h| {
                h.expect("spawn a party thread")
                    .join()
                    .expect("party thread panicked")
            })
            .collect();
        let c = results.pop().expect("three");
        let b = results.pop().expect("three");
        let a = results.pop().expect("three");
        [a, b, c]
    })
}

/// Chi-squared statistic of byte values against uniform (255 degrees of freedom: mean 255,
/// standard deviation about 22.6): what the privacy tests apply to every message a party
/// receives.
pub fn chi_squared(bytes: &[u8]) -> f64 {
    let mut counts = [0u64; 256];
    for &b in bytes {
        counts[b as usize] += 1;
    }
    let expected = bytes.len() as f64 / 256.0;
    counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum()
}

/// Asserts that every message each party received looks uniform by [`chi_squared`] (255
/// plus about six standard deviations from 4 KiB on, a looser bound below), and returns the
/// message sizes party by party, for comparing runs on other secrets.
///
/// # Panics
/// If a party received nothing, or a message is under 64 bytes or fails the test.
pub fn assert_views_uniform(views: [&View; 3]) -> Vec<Vec<usize>> {
    for (party, received) in views.iter().enumerate() {
        assert!(!received.is_empty(), "party {party} received nothing");
        for (round, (from, message)) in received.iter().enumerate() {
            assert!(
                message.len() >= 64,
                "party {party} round {round}: {} bytes",
                message.len()
            );
            let chi = chi_squared(message);
            let bound = if message.len() < 4096 { 600.0 } else { 400.0 };
            assert!(
                chi < bound,
                "party {party} round {round} from {from:?}: chi-squared {chi}"
            );
        }
    }
    views
        .iter()
        .map(|r| r.iter().map(|(_, m)| m.len()).collect())
        .collect()
}

/// Additive shares of `values` over Z_{2^16}.
pub fn additive_u16(rng: &mut ChaCha20Rng, values: &[u16]) -> [Vec<u16>; 3] {
    let r0: Vec<u16> = values.iter().map(|_| rng.next_u32() as u16).collect();
    let r1: Vec<u16> = values.iter().map(|_| rng.next_u32() as u16).collect();
    let r2 = values
        .iter()
        .zip(r0.iter().zip(&r1))
        .map(|(v, (a, b))| v.wrapping_sub(*a).wrapping_sub(*b))
        .collect();
    [r0, r1, r2]
}

/// Opens replicated bit shares, checking that the parties hold consistent components.
pub fn open_bits(shares: [&Replicated<u64>; 3]) -> Vec<u64> {
    for i in 0..3 {
        assert_eq!(
            shares[i].prev,
            shares[(i + 2) % 3].own,
            "party {i}'s prev component differs from party {}'s own",
            (i + 2) % 3
        );
    }
    (0..shares[0].len())
        .map(|j| shares[0].own[j] ^ shares[1].own[j] ^ shares[2].own[j])
        .collect()
}

/// Opens replicated u32 shares, checking consistency.
pub fn open_u32(shares: [&Replicated<u32>; 3]) -> Vec<u32> {
    for i in 0..3 {
        assert!(
            shares[i].prev == shares[(i + 2) % 3].own,
            "inconsistent components"
        );
    }
    (0..shares[0].len())
        .map(|j| {
            shares[0].own[j]
                .wrapping_add(shares[1].own[j])
                .wrapping_add(shares[2].own[j])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn and_then_open<T: Transport>(s: &mut Session<'_, T>) -> Result<Vec<u64>, NetworkError> {
        let i = s.party().index() as u64;
        let x = Replicated::new(vec![0x0f0f ^ i; 4], vec![0x3c3c + i; 4]);
        let y = Replicated::new(vec![0x5555 * (i + 1); 4], vec![0xff00 ^ i; 4]);
        let z = s.and(&x, &y)?;
        s.open_bits(&z)
    }

    #[test]
    fn a_replayed_party_sends_what_it_sent_and_a_changed_reply_is_caught() {
        let recorded = run_three_wrapped(5, Link::recording, |s| and_then_open(s).expect("live"));
        let opened: Vec<Vec<u64>> = recorded.iter().map(|(o, _, _)| o.clone()).collect();
        let views = recorded.map(|(_, _, link)| link.into_view());
        for (i, replay) in replays(views.clone()).into_iter().enumerate() {
            let (out, traffic, link) = run_one(5, PartyId::ALL[i], Link::Replay(replay), |s| {
                and_then_open(s)
            });
            assert_eq!(out.expect("the replay matches the recording"), opened[i]);
            assert_eq!(traffic.messages_sent, 2);
            let Link::Replay(replay) = link else {
                unreachable!("replayed over a replay link")
            };
            assert!(replay.finished());
        }

        // Party 1's AND reply from party 0 changed: its opening message differs.
        let mut changed = views;
        changed[1][0].1[0] ^= 1;
        let replay = replays(changed).into_iter().nth(1).expect("three");
        let (out, _, _) = run_one(5, PartyId::ALL[1], Link::Replay(replay), |s| {
            and_then_open(s)
        });
        let err = out.expect_err("a changed reply changes what the party sends");
        assert!(
            err.to_string().contains("differs from the recording"),
            "{err}"
        );
    }
}

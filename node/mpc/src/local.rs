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
    inner: InMemoryTransport,
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

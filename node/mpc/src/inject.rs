//! Bit injection: a replicated binary sharing of bits to a replicated arithmetic sharing over
//! Z_{2^16}, by three-party OT (ABY3, as in the Large-Scale MPC paper's Algorithm 17).
//!
//! Roles are fixed: party 0 sends, party 1 receives, party 2 helps. For a bit
//! `x = x_0 ^ x_1 ^ x_2`, the output components are `(r_a, m, r_b)` with `r_a` from the stream
//! of parties 0 and 1, `r_b` from the stream of parties 2 and 0, and `m = x - r_a - r_b`,
//! which party 1 obtains obliviously: party 0 masks both candidates `(b ^ x_0 ^ x_2) - r_a - r_b`
//! for `b = 0, 1` with pads `w_0, w_1` it shares with party 2, and party 2 hands party 1 the pad
//! selected by `x_1`. Two rounds: parties 0 and 2 to party 1, then party 1 to party 2.

use sdk_orb::PartyId;

use crate::network::{NetworkError, Peer, Transport};
use crate::session::Session;
use crate::share::Replicated;

/// Injects every bit of the shared words (`64 * words` bits, element `e` at word `e / 64`,
/// bit `e % 64`) into Z_{2^16}. Draws from the streams: parties 0 and 1 `n` u16 (`r_a`);
/// parties 2 and 0 `3 n` u16 (`r_b`, `w_0`, `w_1`, in that order).
///
/// # Errors
/// Transport failures.
pub fn inject_bits<T: Transport>(
    session: &mut Session<'_, T>,
    bits: &Replicated<u64>,
) -> Result<Replicated<u16>, NetworkError> {
    let n = bits.len() * 64;
    let bit = |words: &[u64], e: usize| ((words[e / 64] >> (e % 64)) & 1) as u16;
    session.round();
    session.round();
    match session.party() {
        p if p == PartyId::ALL[0] => {
            // own = x_0, prev = x_2.
            let r_a = session.randomness().next_u16(n);
            let r_b = session.randomness().prev_u16(n);
            let w0 = session.randomness().prev_u16(n);
            let w1 = session.randomness().prev_u16(n);
            let mut k = Vec::with_capacity(2 * n);
            for (b, w) in [(0u16, &w0), (1u16, &w1)] {
                for e in 0..n {
                    let t = b ^ bit(&bits.own, e) ^ bit(&bits.prev, e);
                    k.push(w[e] ^ t.wrapping_sub(r_a[e]).wrapping_sub(r_b[e]));
                }
            }
            session.send(Peer::Next, &k)?;
            Ok(Replicated::new(r_a, r_b))
        }
        p if p == PartyId::ALL[1] => {
            // own = x_1, prev = x_0.
            let r_a = session.randomness().prev_u16(n);
            let k: Vec<u16> = session.recv(Peer::Prev, 2 * n)?;
            let w: Vec<u16> = session.recv(Peer::Next, n)?;
            let m: Vec<u16> = (0..n)
                .map(|e| w[e] ^ k[bit(&bits.own, e) as usize * n + e])
                .collect();
            session.send(Peer::Next, &m)?;
            Ok(Replicated::new(m, r_a))
        }
        _ => {
            // own = x_2, prev = x_1.
            let r_b = session.randomness().next_u16(n);
            let w0 = session.randomness().next_u16(n);
            let w1 = session.randomness().next_u16(n);
            let chosen: Vec<u16> = (0..n)
                .map(|e| {
                    if bit(&bits.prev, e) == 1 {
                        w1[e]
                    } else {
                        w0[e]
                    }
                })
                .collect();
            session.send(Peer::Prev, &chosen)?;
            let m: Vec<u16> = session.recv(Peer::Prev, n)?;
            Ok(Replicated::new(r_b, m))
        }
    }
}

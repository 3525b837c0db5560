//! Whether a person's shares encode iris templates at all, decided in MPC with one opened bit.
//!
//! A node sees only its share, so a compromised orb could enrol (or reset a serial to) shares
//! that encode, say, 2^15 in one code coefficient under a zero mask: such an "iris" matches
//! almost every later query. Before shares are enrolled, the parties check every coefficient
//! of both eyes: code values in {-1, 0, 1}, trimmed-mask values in {0, 1}, and a code value of
//! zero wherever its mask value is zero. Only the OR of all the violations is opened.
//!
//! Each check is one comparison of the comparison phase ([`Circuit::match_bits`], strict
//! `2^16 c > A m`) with `m = 1` and `A = 2^15`: it flags `c` in 1..=32,768 as a u16 value
//! (`c > 1/2` for `c` a signed 16-bit value, and -32,768, whose `2^16 c` wraps to `2^31`). With
//! `v` a code value and `w` the mask value of its pair (the trimmed mask holds one value per
//! real and imaginary pair: code coefficient `j` pairs with mask coefficient `j mod 6,400`,
//! [`sdk_orb::layout`]), values as u16:
//!
//! | check | flags |
//! |---|---|
//! | `w - 1 > 0` | `w` in 2..=32,769 |
//! | `-w > 0` | `w` in 32,768..=65,535 |
//! | `v - w > 0`, `-v - w > 0` | with `w = 0`: every `v` but 0; with `w = 1`: every `v` but 0, 1 and 65,535 (-1) |
//!
//! The mask rows flag every mask value outside {0, 1}; for a mask value in {0, 1}, the code
//! rows flag every code value outside {-1, 0, 1} and every nonzero one under a zero mask. (A
//! code value's own range needs no row of its own: a person with a bad mask value is flagged
//! by that.) Every value of a well-formed person keeps each difference in -2..=0, never
//! flagged.

use sdk_orb::preprocess::LAGRANGE_AT_ZERO;
use sdk_orb::ring::GaloisRingElement;
use sdk_orb::shamir::{EyeShares, PartyShares};
use sdk_orb::{PartyId, CODE_COEFS, MASK_COEFS};
use zeroize::Zeroizing;

use crate::bits::plane_to_bits;
use crate::circuit::{Circuit, SharedBits};
use crate::compare::{or, or_blocks};
use crate::network::NetworkError;

/// `A` of the checks: `2^16 c > 2^15 m`.
const HALF: u32 = 1 << 15;

/// Comparisons per person: per eye, two per code coefficient and two per mask coefficient.
pub const CHECKS_PER_PERSON: usize = 2 * (2 * CODE_COEFS + 2 * MASK_COEFS);

/// This party's additive shares of the plain values its Shamir shares encode: each element
/// times the party's Lagrange coefficient at zero, decoded to basis A. The three parties'
/// vectors sum to the plain values.
fn additive_values(party: PartyId, share: &[u16]) -> Zeroizing<Vec<u16>> {
    let lambda = LAGRANGE_AT_ZERO[party.index()];
    let mut out = Zeroizing::new(vec![0u16; share.len()]);
    for (o, c) in out.chunks_exact_mut(4).zip(share.chunks_exact(4)) {
        let e = GaloisRingElement([c[0], c[1], c[2], c[3]]);
        o.copy_from_slice(&(lambda * e).to_basis_a());
    }
    out
}

/// Appends one eye's checked differences (this party's additive shares) to `out`. Party 0
/// adds the public constants.
fn eye_checks(party: PartyId, eye: &EyeShares, out: &mut Vec<u16>) {
    let v = additive_values(party, eye.code.coefs());
    let w = additive_values(party, eye.mask.coefs());
    let one = u16::from(party.index() == 0);
    let pair = |j: usize| w[j % MASK_COEFS];
    out.extend(w.iter().map(|&w| w.wrapping_sub(one)));
    out.extend(w.iter().map(|&w| w.wrapping_neg()));
    out.extend((0..CODE_COEFS).map(|j| v[j].wrapping_sub(pair(j))));
    out.extend((0..CODE_COEFS).map(|j| v[j].wrapping_neg().wrapping_sub(pair(j))));
}

/// For each person of `people` (this party's shares), whether the shares encode well-formed
/// templates, decided with the other two parties holding their shares of the same people in
/// the same order. All people in one comparison run and one OR tree: 28 rounds whatever their
/// number. Opens one bit per person; every party learns the same answers.
///
/// # Errors
/// Transport failures.
pub fn well_formed<C: Circuit>(
    circuit: &mut C,
    people: &[&PartyShares],
) -> Result<Vec<bool>, NetworkError> {
    if people.is_empty() {
        return Ok(Vec::new());
    }
    let party = circuit.party();
    let n = people.len();
    let per_person: Vec<Zeroizing<Vec<u16>>> = people
        .iter()
        .map(|shares| {
            let mut d = Zeroizing::new(Vec::with_capacity(CHECKS_PER_PERSON));
            eye_checks(party, &shares.left, &mut d);
            eye_checks(party, &shares.right, &mut d);
            d
        })
        .collect();
    // Word-interleaved, `[word][person]`: the OR over a person's words is then an OR of
    // blocks, person `p`'s result in word `p`.
    let words = CHECKS_PER_PERSON / 64;
    let mut differences = Zeroizing::new(Vec::with_capacity(n * CHECKS_PER_PERSON));
    for k in 0..words {
        for d in &per_person {
            differences.extend_from_slice(&d[64 * k..64 * (k + 1)]);
        }
    }
    drop(per_person);
    let ones = vec![u16::from(party.index() == 0); differences.len()];
    let flags = circuit.match_bits(&differences, &ones, HALF)?;
    drop(differences);
    let mut any = or_blocks(circuit, &flags, words)?;
    // Person `p`'s flags at bits `p * width..(p + 1) * width`, halved until one each.
    let mut width = 64;
    while width > 1 {
        width /= 2;
        let half = |offset: usize| -> Vec<Option<usize>> {
            (0..n)
                .flat_map(|p| (0..width).map(move |i| Some(p * 2 * width + offset + i)))
                .collect()
        };
        any = or(circuit, &any.gather(&half(0)), &any.gather(&half(width)))?;
    }
    let opened = circuit.open(&any)?;
    Ok(plane_to_bits(&opened, n)
        .into_iter()
        .map(|bad| !bad)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::run_three;
    use crate::synthetic;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{RngCore, SeedableRng};
    use sdk_orb::shamir::{code_coefs, mask_coefs, share_with_sink};
    use sdk_orb::IrisTemplate;

    /// The three parties' shares of a person whose plain values are `left` and `right`
    /// (code then mask values each), however malformed.
    fn share_values(
        rng: &mut ChaCha20Rng,
        left: (&[u16], &[u16]),
        right: (&[u16], &[u16]),
    ) -> Vec<PartyShares> {
        let mut out = vec![PartyShares::zero(); 3];
        for (e, (code, mask)) in [left, right].into_iter().enumerate() {
            share_with_sink(rng, code, |i, s| {
                for (o, s) in out.iter_mut().zip(s) {
                    let eye = if e == 0 { &mut o.left } else { &mut o.right };
                    eye.code.coefs_mut()[4 * i..4 * i + 4].copy_from_slice(&s.0);
                }
            });
            share_with_sink(rng, mask, |i, s| {
                for (o, s) in out.iter_mut().zip(s) {
                    let eye = if e == 0 { &mut o.left } else { &mut o.right };
                    eye.mask.coefs_mut()[4 * i..4 * i + 4].copy_from_slice(&s.0);
                }
            });
        }
        out
    }

    fn values(t: &IrisTemplate) -> (Vec<u16>, Vec<u16>) {
        let (mut code, mut mask) = ([0u16; CODE_COEFS], [0u16; MASK_COEFS]);
        code_coefs(t, &mut code);
        mask_coefs(t, &mut mask);
        (code.to_vec(), mask.to_vec())
    }

    /// What every party decides for each person (`people[k][party]`), checked to agree.
    fn decide_all(seed: u64, people: &[Vec<PartyShares>]) -> Vec<bool> {
        let out = run_three(seed, |s| {
            let i = s.party().index();
            let mine: Vec<&PartyShares> = people.iter().map(|p| &p[i]).collect();
            well_formed(s, &mine).expect("in-memory network")
        });
        assert!(out.iter().all(|(d, _, _)| *d == out[0].0));
        out[0].0.clone()
    }

    #[test]
    fn well_formed_people_pass_and_each_kind_of_malformed_value_fails() {
        let mut rng = ChaCha20Rng::seed_from_u64(31);
        let (l, r) = (synthetic::eye(&mut rng), synthetic::eye(&mut rng));
        let (lc, lm) = values(&l);
        let (rc, rm) = values(&r);
        let honest = share_values(&mut rng, (&lc, &lm), (&rc, &rm));
        // Its shares as the orb SDK makes them, too.
        let sdk = synthetic::share_person(&mut rng, &l, &r);
        let mut people = vec![honest, sdk];

        let first = |mask: &[u16], value: u16| {
            (0..MASK_COEFS)
                .find(|&j| mask[j] == value)
                .expect("synthetic masks hold both values")
        };
        let (l_off, r_off, l_on) = (first(&lm, 0), first(&rm, 0), first(&lm, 1));
        // (which eye, code or mask, coefficient, value)
        let cases: [(usize, bool, usize, u16); 10] = [
            (0, true, l_off, 1 << 15), // the attack: 2^15 under a zero mask
            (0, true, l_on, 1 << 15),  // and under a set mask
            (1, true, 5, 2),
            (0, true, l_on + MASK_COEFS, 0xfffe), // -2, in the imaginary half
            (1, true, r_off, 1),                  // nonzero under a zero mask
            (0, true, l_off + MASK_COEFS, 0xffff), // -1 under a zero mask
            (1, false, 7, 2),
            (0, false, l_off, 0xffff), // mask -1
            (1, false, 9, 0x8000),
            (0, true, (rng.next_u32() as usize) % CODE_COEFS, 0x7fff),
        ];
        for &(eye, code, j, value) in &cases {
            let (mut c, mut m) = if eye == 0 {
                (lc.clone(), lm.clone())
            } else {
                (rc.clone(), rm.clone())
            };
            if code {
                c[j] = value;
            } else {
                m[j] = value;
            }
            people.push(if eye == 0 {
                share_values(&mut rng, (&c, &m), (&rc, &rm))
            } else {
                share_values(&mut rng, (&lc, &lm), (&c, &m))
            });
        }
        // One batch: the well-formed people among the malformed ones.
        people.swap(1, 6);
        let decided = decide_all(1, &people);
        let expected: Vec<bool> = (0..people.len()).map(|k| k == 0 || k == 6).collect();
        assert_eq!(decided, expected, "cases: {cases:?}");
        assert_eq!(decide_all(2, &[]), Vec::<bool>::new());
    }

    #[test]
    fn the_check_costs_what_its_comparisons_do() {
        let mut rng = ChaCha20Rng::seed_from_u64(32);
        let (l, r) = (synthetic::eye(&mut rng), synthetic::eye(&mut rng));
        let shares = synthetic::share_person(&mut rng, &l, &r);
        let out = run_three(3, |s| {
            let i = s.party().index();
            well_formed(s, &[&shares[i]]).expect("in-memory network")
        });
        assert_eq!(out[0].0, vec![true]);
        let (_, traffic, _) = &out[0];
        // 76,800 comparisons at 13.75 bytes, then the OR tree and one opened word.
        assert_eq!(CHECKS_PER_PERSON, 76_800);
        let per_check = traffic.bytes_sent as f64 / CHECKS_PER_PERSON as f64;
        assert!(
            (13.0..16.0).contains(&per_check),
            "{per_check} bytes per check"
        );
        println!(
            "well-formedness check: {} comparisons, {} bytes and {} rounds per party",
            CHECKS_PER_PERSON, traffic.bytes_sent, traffic.rounds
        );
    }

    /// What a batch's check costs per person; the figures docs/threat-model.md quotes come from
    /// `cargo test --release -p ocelli-mpc per_person -- --nocapture`.
    #[test]
    fn a_batch_is_checked_in_the_same_rounds_and_prints_its_cost_per_person() {
        const PEOPLE: usize = 16;
        let mut rng = ChaCha20Rng::seed_from_u64(33);
        let people: Vec<Vec<PartyShares>> = (0..PEOPLE)
            .map(|_| {
                let (l, r) = (synthetic::eye(&mut rng), synthetic::eye(&mut rng));
                synthetic::share_person(&mut rng, &l, &r)
            })
            .collect();
        let started = std::time::Instant::now();
        let out = crate::local::run_three_wrapped(
            4,
            |t| t,
            |s| {
                let i = s.party().index();
                let mine: Vec<&PartyShares> = people.iter().map(|p| &p[i]).collect();
                well_formed(s, &mine).expect("in-memory network")
            },
        );
        let seconds = started.elapsed().as_secs_f64();
        for (decided, traffic, _) in &out {
            assert_eq!(decided, &vec![true; PEOPLE]);
            assert_eq!(traffic.rounds, 28, "the rounds do not grow with the batch");
        }
        let bytes: Vec<u64> = out
            .iter()
            .map(|(_, t, _)| t.bytes_sent / PEOPLE as u64)
            .collect();
        println!(
            "well-formedness check of {PEOPLE} people, three parties in this process: \
             {:.1} ms per person, bytes sent per person by party 0, 1, 2: {bytes:?}",
            1e3 * seconds / PEOPLE as f64
        );
    }
}

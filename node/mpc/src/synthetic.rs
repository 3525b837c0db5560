//! Synthetic irises for the demo, benchmarks and tests.
//!
//! The model:
//! - a person's eye is a uniformly random 12,800-bit code; independent people are at a
//!   fractional Hamming distance of about 0.5 (about 0.47 as the minimum over 31 rotations);
//! - each capture masks 10 to 25 percent of the filter responses (real and imaginary bit
//!   together), chosen at random per capture;
//! - a re-capture of an eye is the original rotated by a random offset in -10..=10 columns
//!   with each bit flipped independently with a probability drawn from 0.20..0.30, so its
//!   distance to the original at the best rotation is 0.2 to 0.3.

use rand_core::{CryptoRng, RngCore};
use sdk_orb::shamir::{share_eye, EyeShares, PartyShares};
use sdk_orb::template::{IrisBits, IrisTemplate, TemplatePolicy};
use sdk_orb::CODE_BITS;

/// Largest rotation offset of a re-capture, in columns.
pub const MAX_RECAPTURE_OFFSET: i32 = 10;

fn uniform(rng: &mut impl RngCore, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn random_mask(rng: &mut impl RngCore) -> IrisBits {
    let masked = uniform(rng, 0.10, 0.25);
    let threshold = (masked * u32::MAX as f64) as u32;
    let mut mask = IrisBits::ones();
    for pair in (0..CODE_BITS).step_by(2) {
        if rng.next_u32() < threshold {
            mask.set(pair, false);
            mask.set(pair + 1, false);
        }
    }
    mask
}

fn template(code: IrisBits, mask: IrisBits) -> IrisTemplate {
    // Synthetic masks keep at least 75 percent usable bits, above every sensible minimum;
    // validation only fails on mismatched real/imaginary mask bits, which are built equal.
    IrisTemplate::new(code, mask, "v2.1", &TemplatePolicy { min_usable_bits: 0 })
        .expect("synthetic masks keep real and imaginary bits equal")
}

/// A new, independent eye.
pub fn eye<R: RngCore + CryptoRng>(rng: &mut R) -> IrisTemplate {
    let mut code = IrisBits::zero();
    for i in (0..CODE_BITS).step_by(64) {
        let w = rng.next_u64();
        for b in 0..64 {
            code.set(i + b, (w >> b) & 1 == 1);
        }
    }
    let mask = random_mask(rng);
    template(code, mask)
}

/// A re-capture of `original`: rotated by an offset in -10..=10, 20 to 30 percent of the
/// bits flipped, freshly masked. Returns the template and the offset.
pub fn recapture<R: RngCore + CryptoRng>(
    rng: &mut R,
    original: &IrisTemplate,
) -> (IrisTemplate, i32) {
    let offset =
        (rng.next_u32() % (2 * MAX_RECAPTURE_OFFSET as u32 + 1)) as i32 - MAX_RECAPTURE_OFFSET;
    let flip = uniform(rng, 0.20, 0.30);
    let threshold = (flip * u32::MAX as f64) as u32;
    let rotated = original.rotated(offset);
    let mut code = rotated.code().clone();
    for i in 0..CODE_BITS {
        if rng.next_u32() < threshold {
            code.set(i, !code.get(i));
        }
    }
    (template(code, random_mask(rng)), offset)
}

/// The three parties' shares of a person, as an orb would produce them (without sealing).
pub fn share_person<R: RngCore + CryptoRng>(
    rng: &mut R,
    left: &IrisTemplate,
    right: &IrisTemplate,
) -> Vec<PartyShares> {
    let mut l = Box::new([EyeShares::zero(), EyeShares::zero(), EyeShares::zero()]);
    let mut r = Box::new([EyeShares::zero(), EyeShares::zero(), EyeShares::zero()]);
    share_eye(rng, left, &mut l);
    share_eye(rng, right, &mut r);
    (0..3)
        .map(|i| PartyShares {
            left: l[i].clone(),
            right: r[i].clone(),
        })
        .collect()
}

/// Uniformly random shares of no one: what an engine costs to match against, for benchmarks
/// and engine tests.
pub fn random_shares(rng: &mut impl RngCore) -> Box<PartyShares> {
    let mut s = Box::new(PartyShares::zero());
    for e in [&mut s.left, &mut s.right] {
        let coefs = e.code.coefs_mut().iter_mut().chain(e.mask.coefs_mut());
        coefs.for_each(|c| *c = rng.next_u32() as u16);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;
    use sdk_orb::plaintext::min_distance_over_rotations;

    #[test]
    fn recaptures_are_close_and_strangers_far() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        for _ in 0..5 {
            let a = eye(&mut rng);
            let usable = a.usable_bits() as f64 / CODE_BITS as f64;
            assert!((0.74..=0.91).contains(&usable), "{usable}");
            let (r, offset) = recapture(&mut rng, &a);
            let (d, k) = min_distance_over_rotations(&r, &a).expect("common bits");
            assert!((0.17..0.33).contains(&d), "recapture at {d}");
            assert_eq!(k, -offset, "the best rotation undoes the offset");
            let b = eye(&mut rng);
            let (d, _) = min_distance_over_rotations(&b, &a).expect("common bits");
            assert!(d > 0.45, "stranger at {d}");
        }
    }
}

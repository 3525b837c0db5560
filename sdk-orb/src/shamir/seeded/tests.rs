use super::*;
use crate::shamir::tests::chi_squared_bytes;
use crate::shamir::{code_coefs, mask_coefs, reconstruct, EyeShares};
use crate::shamir::{share_element, EVALUATION_POINTS};
use crate::template::{random, IrisBits};
use crate::{CODE_COEFS, MASK_COEFS};
use rand_core::SeedableRng as _;
use std::boxed::Box;
use std::vec::Vec;

/// All three parties' shares of both eyes through [`share_eye_seeded`].
fn share_person(
    seed: &ShareSeed,
    seeded: PartyId,
    eyes: [&IrisTemplate; 2],
) -> Box<[PartyShares; PARTIES]> {
    let mut out = Box::new([
        PartyShares::zero(),
        PartyShares::zero(),
        PartyShares::zero(),
    ]);
    let mut stream = SeedStream::new(seed);
    for (eye, template) in eyes.into_iter().enumerate() {
        share_eye_seeded(template, seeded, &mut stream, |vector, first, shares| {
            for (party, s) in out.iter_mut().zip(shares) {
                let target: &mut EyeShares = if eye == 0 {
                    &mut party.left
                } else {
                    &mut party.right
                };
                let coefs = match vector {
                    Vector::Code => &mut target.code.0[..],
                    Vector::Mask => &mut target.mask.0[..],
                };
                for (j, element) in s.iter().enumerate() {
                    let e = first + j;
                    coefs[4 * e..4 * e + 4].copy_from_slice(&element.0);
                }
            }
        });
    }
    out
}

fn constant_template() -> IrisTemplate {
    IrisTemplate::new(
        IrisBits::zero(),
        IrisBits::ones(),
        "v2.1",
        &crate::TemplatePolicy::default(),
    )
    .expect("valid")
}

#[test]
fn the_seeded_party_expands_its_seed_into_exactly_the_shares_it_was_dealt() {
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(40);
    let (left, right) = (random(&mut rng, 0.2), random(&mut rng, 0.3));
    for seeded in PartyId::ALL {
        let seed = ShareSeed::random(&mut rng);
        let dealt = share_person(&seed, seeded, [&left, &right]);
        let mut expanded = Box::new(PartyShares::zero());
        expand_seed(&seed, &mut expanded);
        assert!(*expanded == dealt[seeded.index()], "{seeded}");
    }
}

/// Asserts that every pair of parties reconstructs both eyes' plain code and mask from
/// `shares` (party order): that the three are one degree-1 sharing of `eyes`.
pub(crate) fn assert_pairs_reconstruct(
    shares: [&PartyShares; PARTIES],
    eyes: [&IrisTemplate; 2],
    context: &str,
) {
    for (eye, template) in eyes.into_iter().enumerate() {
        let pick = |p: usize| {
            if eye == 0 {
                &shares[p].left
            } else {
                &shares[p].right
            }
        };
        let mut code = [0u16; CODE_COEFS];
        code_coefs(template, &mut code);
        let mut mask = [0u16; MASK_COEFS];
        mask_coefs(template, &mut mask);
        for (p, q) in [(0, 1), (0, 2), (1, 2)] {
            let (pp, qq) = (PartyId::ALL[p], PartyId::ALL[q]);
            let mut out = [0u16; CODE_COEFS];
            reconstruct((pp, &pick(p).code.0), (qq, &pick(q).code.0), &mut out);
            assert!(out == code, "{context}: code from {p} and {q}");
            let mut out = [0u16; MASK_COEFS];
            reconstruct((pp, &pick(p).mask.0), (qq, &pick(q).mask.0), &mut out);
            assert!(out == mask, "{context}: mask from {p} and {q}");
        }
    }
}

#[test]
fn any_two_parties_reconstruct_both_eyes_whichever_party_is_seeded() {
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(41);
    let (left, right) = (random(&mut rng, 0.2), random(&mut rng, 0.1));
    for seeded in PartyId::ALL {
        let shares = share_person(&ShareSeed::random(&mut rng), seeded, [&left, &right]);
        let [a, b, c] = &*shares;
        assert_pairs_reconstruct([a, b, c], [&left, &right], &std::format!("{seeded}"));
    }
}

#[test]
fn every_share_looks_uniform_for_a_fixed_secret_whichever_party_is_seeded() {
    // Every plain value is 1: a share must not show the constant.
    let t = constant_template();
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(42);
    for seeded in PartyId::ALL {
        let shares = share_person(&ShareSeed::random(&mut rng), seeded, [&t, &t]);
        for (p, party) in shares.iter().enumerate() {
            for eye in [&party.left, &party.right] {
                let chi = chi_squared_bytes(eye.code.0.iter().copied());
                assert!(
                    chi < 400.0,
                    "code of party {p}, {seeded}: chi-squared {chi}"
                );
                let chi = chi_squared_bytes(eye.mask.0.iter().copied());
                assert!(
                    chi < 400.0,
                    "mask of party {p}, {seeded}: chi-squared {chi}"
                );
            }
        }
    }
}

#[test]
fn a_seeded_share_that_ignores_the_seed_fails_the_uniformity_test() {
    // The test above can fail: shares with a constant keystream are the constant secret's
    // structure, and the statistic sees it.
    let a = [1u16, 1, 1, 1];
    for seeded in PartyId::ALL {
        let other = seeded.next();
        let values: Vec<u16> = (0..3200)
            .flat_map(|_| {
                share_element_seeded(&a, GaloisRingElement::ZERO, seeded)[other.index()].0
            })
            .collect();
        assert!(chi_squared_bytes(values.into_iter()) > 400.0);
    }
}

#[test]
fn a_seeded_element_is_the_sharing_with_r_from_the_ring_inverse() {
    // The divisions by x stand for alpha_i^-1; checked against the general product.
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(41);
    let mut element = || GaloisRingElement::from_le_bytes(&rng.next_u64().to_le_bytes());
    for seeded in PartyId::ALL {
        let inverse_alpha = EVALUATION_POINTS[seeded.index()]
            .inverse_vartime()
            .expect("a unit");
        for _ in 0..200 {
            let (a, y) = (element().0, element());
            let r = (y - GaloisRingElement::from_basis_a(&a)) * inverse_alpha;
            let shares = share_element_seeded(&a, y, seeded);
            assert_eq!(shares, share_element(&a, r), "{seeded}");
            assert_eq!(shares[seeded.index()], y, "{seeded}");
        }
    }
}

#[test]
fn the_seeded_party_is_the_request_id_mod_3() {
    let id = |last: u8| {
        let mut b = [0u8; 16];
        b[15] = last;
        RequestId(b)
    };
    assert_eq!(seeded_party(&id(0)), PartyId::ALL[0]);
    assert_eq!(seeded_party(&id(1)), PartyId::ALL[1]);
    assert_eq!(seeded_party(&id(2)), PartyId::ALL[2]);
    assert_eq!(seeded_party(&id(3)), PartyId::ALL[0]);
    // 2^120 = 1 mod 3.
    let mut high = [0u8; 16];
    high[0] = 1;
    assert_eq!(seeded_party(&RequestId(high)), PartyId::ALL[1]);
    assert_eq!(seeded_party(&RequestId([0xff; 16])), PartyId::ALL[0]);
}

#[test]
fn the_keystream_is_rand_chachas_chacha20_over_a_whole_person() {
    use rand_chacha::rand_core::{RngCore as _, SeedableRng as _};
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(42);
    for _ in 0..4 {
        let seed = ShareSeed::random(&mut rng);
        let mut reference = rand_chacha::ChaCha20Rng::from_seed(seed.0);
        let mut stream = SeedStream::new(&seed);
        let mut group = [GaloisRingElement::ZERO; GROUP_ELEMENTS];
        for i in 0..2 * (CODE_COEFS + MASK_COEFS) / 4 / GROUP_ELEMENTS {
            // Single elements and groups interleaved: one keystream either way.
            let mut b = [0u8; 8 * GROUP_ELEMENTS];
            reference.fill_bytes(&mut b);
            if i % 7 == 3 {
                group.iter_mut().for_each(|e| *e = stream.next_element());
            } else {
                stream.next_group(&mut group);
            }
            for (e, want) in group.iter().zip(b.chunks_exact(8)) {
                assert_eq!(
                    *e,
                    GaloisRingElement::from_le_bytes(&want.try_into().expect("8 bytes")),
                    "{i}"
                );
            }
        }
    }
}

#[test]
fn the_keystream_is_chacha20_with_a_zero_nonce_from_block_zero() {
    // RFC 7539, appendix A.1, test vector 1: all-zero key, nonce and counter.
    let mut stream = SeedStream::new(&ShareSeed([0; SEED_BYTES]));
    let expected = [0x76, 0xb8, 0xe0, 0xad, 0xa0, 0xf1, 0x3d, 0x90];
    assert_eq!(
        stream.next_element(),
        GaloisRingElement::from_le_bytes(&expected)
    );
    let expected = [0x40, 0x5d, 0x6a, 0xe5, 0x53, 0x86, 0xbd, 0x28];
    assert_eq!(
        stream.next_element(),
        GaloisRingElement::from_le_bytes(&expected)
    );
    // Test vector 2 is block 1 of the same key: the first bytes of the second block.
    for _ in 2..8 {
        stream.next_element();
    }
    let expected = [0x9f, 0x07, 0xe7, 0xbe, 0x55, 0x51, 0x38, 0x7a];
    assert_eq!(
        stream.next_element(),
        GaloisRingElement::from_le_bytes(&expected)
    );
}

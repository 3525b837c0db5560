use super::*;
use crate::plaintext::dot_products;
use crate::preprocess::{dot_shares, preprocess_code, preprocess_mask};
use crate::rotation::{rotate_coefs, rotations};
use crate::template::{random, IrisBits};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::boxed::Box;
use std::vec::Vec;

fn shares_of(rng: &mut ChaCha20Rng, t: &IrisTemplate) -> Box<[EyeShares; PARTIES]> {
    let mut out = Box::new([EyeShares::zero(), EyeShares::zero(), EyeShares::zero()]);
    share_eye(rng, t, &mut out);
    out
}

#[test]
fn any_two_parties_reconstruct_the_plain_code_and_mask() {
    let mut rng = ChaCha20Rng::seed_from_u64(20);
    let t = random(&mut rng, 0.2);
    let shares = shares_of(&mut rng, &t);
    let mut code = [0u16; CODE_COEFS];
    code_coefs(&t, &mut code);
    let mut mask = [0u16; MASK_COEFS];
    mask_coefs(&t, &mut mask);
    for (p, q) in [(0, 1), (0, 2), (1, 2), (2, 0)] {
        let (pp, qq) = (PartyId::ALL[p], PartyId::ALL[q]);
        let mut out = [0u16; CODE_COEFS];
        reconstruct((pp, &shares[p].code.0), (qq, &shares[q].code.0), &mut out);
        assert!(out == code);
        let mut out = [0u16; MASK_COEFS];
        reconstruct((pp, &shares[p].mask.0), (qq, &shares[q].mask.0), &mut out);
        assert!(out == mask);
    }
}

#[test]
fn party_dot_products_reconstruct_cd_and_md_for_every_rotation() {
    let mut rng = ChaCha20Rng::seed_from_u64(21);
    for round in 0..3 {
        let query = random(&mut rng, 0.1 + 0.05 * round as f64);
        let enrolled = random(&mut rng, 0.2);
        let q = shares_of(&mut rng, &query);
        let d = shares_of(&mut rng, &enrolled);
        for k in rotations() {
            let plain = dot_products(&query.rotated(k), &enrolled);
            let mut cd = 0u16;
            let mut md = 0u16;
            for party in PartyId::ALL {
                let i = party.index();
                let qc = preprocess_code(party, &q[i].code).rotated(k);
                let qm = preprocess_mask(party, &q[i].mask).rotated(k);
                let (c, m) = dot_shares(&d[i].code, &d[i].mask, &qc, &qm);
                cd = cd.wrapping_add(c);
                md = md.wrapping_add(m);
            }
            assert_eq!(cd, plain.cd as u16, "cd at rotation {k}");
            assert_eq!(md, plain.md as u16, "md at rotation {k}");
        }
    }
}

#[test]
fn preprocessing_then_rotating_equals_rotating_then_preprocessing() {
    let mut rng = ChaCha20Rng::seed_from_u64(22);
    let t = random(&mut rng, 0.2);
    let s = shares_of(&mut rng, &t);
    for party in PartyId::ALL {
        for k in [-15, -1, 3, 15] {
            let a = preprocess_code(party, &s[party.index()].code).rotated(k);
            let b = preprocess_code(party, &s[party.index()].code.rotated(k));
            assert!(a == b);
        }
    }
}

fn random_elements(rng: &mut ChaCha20Rng, n: usize) -> Vec<GaloisRingElement> {
    use rand_core::RngCore;
    (0..n)
        .map(|_| GaloisRingElement::from_le_bytes(&rng.next_u64().to_le_bytes()))
        .collect()
}

#[test]
fn sharing_then_rotating_equals_rotating_then_sharing() {
    let mut rng = ChaCha20Rng::seed_from_u64(23);
    let t = random(&mut rng, 0.2);
    let r = random_elements(&mut rng, CODE_COEFS / 4);
    let mut plain = [0u16; CODE_COEFS];
    code_coefs(&t, &mut plain);
    let mut shares = [[0u16; CODE_COEFS]; PARTIES];
    {
        let [a, b, c] = &mut shares;
        hazmat_share_with_randomness(&plain, &r, [a, b, c]);
    }
    for k in rotations() {
        // The layout turns a plain rotation into a rotation of whole elements.
        let mut rotated_plain = [0u16; CODE_COEFS];
        code_coefs(&t.rotated(k), &mut rotated_plain);
        let mut expect = [0u16; CODE_COEFS];
        rotate_coefs(&plain, k, &mut expect);
        assert!(rotated_plain == expect, "layout rotation {k}");

        // Randomness rotates with its elements: rotate it as coefficients.
        let r_coefs: Vec<u16> = r.iter().flat_map(|e| e.0).collect();
        let mut rotated_coefs = r_coefs.clone();
        rotate_coefs(&r_coefs, k, &mut rotated_coefs);
        let rotated_r: Vec<GaloisRingElement> = rotated_coefs
            .chunks_exact(4)
            .map(|c| GaloisRingElement([c[0], c[1], c[2], c[3]]))
            .collect();
        let mut direct = [[0u16; CODE_COEFS]; PARTIES];
        {
            let [a, b, c] = &mut direct;
            hazmat_share_with_randomness(&rotated_plain, &rotated_r, [a, b, c]);
        }
        for p in 0..PARTIES {
            let mut rotated_share = [0u16; CODE_COEFS];
            rotate_coefs(&shares[p], k, &mut rotated_share);
            assert!(rotated_share == direct[p], "party {p} rotation {k}");
        }
    }
}

#[test]
fn share_eye_agrees_with_explicit_randomness_from_the_same_stream() {
    let mut rng = ChaCha20Rng::seed_from_u64(24);
    let t = random(&mut rng, 0.2);
    let mut a = ChaCha20Rng::seed_from_u64(99);
    let shares = shares_of(&mut a, &t);
    // share_eye draws 8 little-endian bytes per element, code then mask.
    let mut b = ChaCha20Rng::seed_from_u64(99);
    let mut bytes = std::vec![0u8; 8 * (CODE_COEFS + MASK_COEFS) / 4];
    rand_core::RngCore::fill_bytes(&mut b, &mut bytes);
    let r: Vec<GaloisRingElement> = bytes
        .chunks_exact(8)
        .map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            GaloisRingElement::from_le_bytes(&b)
        })
        .collect();
    let mut plain = [0u16; CODE_COEFS];
    code_coefs(&t, &mut plain);
    let mut out = [[0u16; CODE_COEFS]; PARTIES];
    {
        let [x, y, z] = &mut out;
        hazmat_share_with_randomness(&plain, &r[..CODE_COEFS / 4], [x, y, z]);
    }
    for p in 0..PARTIES {
        assert!(shares[p].code.0 == out[p]);
    }
}

#[test]
fn plain_elements_are_the_masked_bits_the_layout_places() {
    let mut rng = ChaCha20Rng::seed_from_u64(25);
    for masked in [0.0, 0.3, 1.0] {
        let t = random(&mut rng, masked);
        for e in 0..TemplatePart::Code.elements() {
            let want: [u16; 4] = core::array::from_fn(|k| {
                let bit = crate::layout::PLAIN_BIT_INDEX[4 * e + k] as usize;
                crate::plaintext::masked_value(t.code().get(bit), t.mask().get(bit))
            });
            assert_eq!(
                plain_element(&t, TemplatePart::Code, e),
                want,
                "code element {e}"
            );
        }
        for e in 0..TemplatePart::Mask.elements() {
            let want: [u16; 4] = core::array::from_fn(|k| {
                t.mask()
                    .get(crate::layout::PLAIN_BIT_INDEX[4 * e + k] as usize) as u16
            });
            assert_eq!(
                plain_element(&t, TemplatePart::Mask, e),
                want,
                "mask element {e}"
            );
        }
    }
}

#[test]
fn streaming_shares_equal_sharing_the_extracted_coefficients() {
    let mut rng = ChaCha20Rng::seed_from_u64(26);
    let t = random(&mut rng, 0.2);
    let mut code = [0u16; CODE_COEFS];
    code_coefs(&t, &mut code);
    let mut mask = [0u16; MASK_COEFS];
    mask_coefs(&t, &mut mask);
    for (part, plain) in [
        (TemplatePart::Code, &code[..]),
        (TemplatePart::Mask, &mask[..]),
    ] {
        let mut want = Vec::new();
        let mut a = ChaCha20Rng::seed_from_u64(27);
        share_with_sink(&mut a, plain, |e, s| want.push((e, *s)));
        let mut got = Vec::new();
        let mut b = ChaCha20Rng::seed_from_u64(27);
        share_template_streaming(&mut b, &t, part, |e, s| got.push((e, *s)));
        assert_eq!(got, want, "{part:?}");
        assert_eq!(
            b.get_word_pos(),
            a.get_word_pos(),
            "{part:?}: randomness drawn"
        );
    }
}

/// Chi-squared statistic of byte values against the uniform distribution (255 degrees of
/// freedom: mean 255, standard deviation about 22.6).
pub(super) fn chi_squared_bytes(values: impl Iterator<Item = u16>) -> f64 {
    let mut counts = [0u64; 256];
    let mut n = 0u64;
    for v in values {
        counts[(v & 0xff) as usize] += 1;
        counts[(v >> 8) as usize] += 1;
        n += 2;
    }
    let expected = n as f64 / 256.0;
    counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum()
}

#[test]
fn one_share_alone_looks_uniform_even_for_a_constant_secret() {
    // An all-usable, all-zero code: every plain value is 1. A share must not show it.
    let mut rng = ChaCha20Rng::seed_from_u64(25);
    let t = IrisTemplate::new(
        IrisBits::zero(),
        IrisBits::ones(),
        "v2.1",
        &crate::TemplatePolicy::default(),
    )
    .expect("valid");
    for _ in 0..2 {
        let s = shares_of(&mut rng, &t);
        for party in &*s {
            let chi = chi_squared_bytes(party.code.0.iter().copied());
            assert!(chi < 400.0, "chi-squared {chi}");
            let chi = chi_squared_bytes(party.mask.0.iter().copied());
            assert!(chi < 400.0, "chi-squared {chi}");
            // No structural tell: share values do not repeat the secret's constancy.
            let distinct: std::collections::BTreeSet<u16> = party.code.0.iter().copied().collect();
            assert!(distinct.len() > 10_000);
        }
    }
}

#[test]
fn two_party_shares_are_uncorrelated_with_the_secret() {
    // Two shares of two very different secrets have indistinguishable joint statistics:
    // the difference of parties 0 and 1 is r (1 - x), uniform on its coset, for any secret.
    let mut rng = ChaCha20Rng::seed_from_u64(26);
    let zero_code = IrisTemplate::new(
        IrisBits::zero(),
        IrisBits::ones(),
        "v2.1",
        &crate::TemplatePolicy::default(),
    )
    .expect("valid");
    let random_code = random(&mut rng, 0.0);
    for t in [&zero_code, &random_code] {
        let s = shares_of(&mut rng, t);
        let diff = s[0]
            .code
            .0
            .iter()
            .zip(s[1].code.0.iter())
            .map(|(a, b)| a.wrapping_sub(*b));
        let chi = chi_squared_bytes(diff);
        assert!(chi < 400.0, "chi-squared {chi}");
        let sum = s[0]
            .code
            .0
            .iter()
            .zip(s[2].code.0.iter())
            .map(|(a, b)| a.wrapping_add(*b));
        let chi = chi_squared_bytes(sum);
        assert!(chi < 400.0, "chi-squared {chi}");
    }
}

#[test]
fn share_serialisation_round_trips_and_rejects_wrong_lengths() {
    let mut rng = ChaCha20Rng::seed_from_u64(27);
    let t = random(&mut rng, 0.2);
    let s = shares_of(&mut rng, &t);
    let mut bytes = std::vec![0u8; CodeShare::BYTES];
    s[1].code.write_le_bytes(&mut bytes);
    let mut back = CodeShare::zero();
    CodeShare::read_le_bytes(&bytes, &mut back).expect("length");
    assert!(back == s[1].code);
    assert_eq!(
        CodeShare::read_le_bytes(&bytes[1..], &mut back),
        Err(CodeShare::BYTES - 1)
    );
    assert_eq!(std::format!("{:?}", s[1].code), "CodeShare { .. }");
}

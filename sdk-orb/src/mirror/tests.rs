use super::*;
use crate::plaintext::{dot_products, masked_value};
use crate::preprocess::{dot_shares, preprocess_code, preprocess_mask};
use crate::rotation::rotations;
use crate::shamir::{code_coefs, mask_coefs, reconstruct, share_eye};
use crate::template::random;
use crate::{IrisTemplate, PartyId, CODE_COEFS, PARTIES};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::boxed::Box;

fn shares_of(rng: &mut ChaCha20Rng, t: &IrisTemplate) -> Box<[EyeShares; PARTIES]> {
    let mut out = Box::new([EyeShares::zero(), EyeShares::zero(), EyeShares::zero()]);
    share_eye(rng, t, &mut out);
    out
}

#[test]
fn the_column_map_reverses_each_half_and_is_an_involution() {
    assert_eq!(mirror_column(0), 99);
    assert_eq!(mirror_column(99), 0);
    assert_eq!(mirror_column(100), 199);
    assert_eq!(mirror_column(199), 100);
    for c in 0..COLUMNS {
        assert_eq!(mirror_column(mirror_column(c)), c);
        assert_eq!(mirror_column(c) < HALF_COLUMNS, c < HALF_COLUMNS);
    }
}

#[test]
fn mirrored_bits_follow_the_definition_on_the_array() {
    let mut rng = ChaCha20Rng::seed_from_u64(40);
    let t = random(&mut rng, 0.3);
    let m = t.mirrored();
    for row in 0..16 {
        for col in 0..COLUMNS {
            for w in 0..2 {
                for part in 0..2 {
                    let at = |c: usize| 800 * row + 4 * c + 2 * w + part;
                    let (src, dst) = (at(col), at(mirror_column(col)));
                    assert_eq!(m.mask().get(dst), t.mask().get(src));
                    let v = masked_value(t.code().get(src), t.mask().get(src));
                    let mv = masked_value(m.code().get(dst), m.mask().get(dst));
                    let want = if part == 1 { v.wrapping_neg() } else { v };
                    assert_eq!(mv, want, "row {row} col {col} w {w} part {part}");
                }
            }
        }
    }
    assert!(m.mirrored() == t, "mirroring twice is the identity");
}

#[test]
fn mirrored_shares_reconstruct_the_mirrored_template() {
    let mut rng = ChaCha20Rng::seed_from_u64(41);
    let t = random(&mut rng, 0.2);
    let shares = shares_of(&mut rng, &t);
    let mirrored: [EyeShares; PARTIES] = core::array::from_fn(|i| mirror_eye(&shares[i]));
    let mut code = [0u16; CODE_COEFS];
    code_coefs(&t.mirrored(), &mut code);
    let mut mask = [0u16; MASK_COEFS];
    mask_coefs(&t.mirrored(), &mut mask);
    for (p, q) in [(0, 1), (0, 2), (1, 2)] {
        let (pp, qq) = (PartyId::ALL[p], PartyId::ALL[q]);
        let mut out = [0u16; CODE_COEFS];
        reconstruct(
            (pp, &mirrored[p].code.0),
            (qq, &mirrored[q].code.0),
            &mut out,
        );
        assert!(out == code, "code from parties {p}, {q}");
        let mut out = [0u16; MASK_COEFS];
        reconstruct(
            (pp, &mirrored[p].mask.0),
            (qq, &mirrored[q].mask.0),
            &mut out,
        );
        assert!(out == mask, "mask from parties {p}, {q}");
    }
}

#[test]
fn mirrored_query_shares_give_the_mirrored_plaintext_dot_products() {
    let mut rng = ChaCha20Rng::seed_from_u64(42);
    for round in 0..3 {
        let query = random(&mut rng, 0.1 + 0.05 * round as f64);
        // The enrolled template is the query's mirror image, so some rotation matches exactly.
        let enrolled = if round == 0 {
            query.mirrored()
        } else {
            random(&mut rng, 0.2)
        };
        let q = shares_of(&mut rng, &query);
        let d = shares_of(&mut rng, &enrolled);
        for k in rotations() {
            let plain = dot_products(&query.mirrored().rotated(k), &enrolled);
            let (mut cd, mut md) = (0u16, 0u16);
            for party in PartyId::ALL {
                let i = party.index();
                let m = mirror_eye(&q[i]);
                let qc = preprocess_code(party, &m.code).rotated(k);
                let qm = preprocess_mask(party, &m.mask).rotated(k);
                let (c, m) = dot_shares(&d[i].code, &d[i].mask, &qc, &qm);
                cd = cd.wrapping_add(c);
                md = md.wrapping_add(m);
            }
            assert_eq!(cd, plain.cd as u16, "cd at rotation {k}");
            assert_eq!(md, plain.md as u16, "md at rotation {k}");
            if round == 0 && k == 0 {
                assert_eq!(
                    plain.cd as u32, plain.md,
                    "the mirror image matches exactly"
                );
            }
        }
    }
}

#[test]
fn a_person_is_mirrored_with_the_eyes_swapped() {
    let mut rng = ChaCha20Rng::seed_from_u64(43);
    let (l, r) = (random(&mut rng, 0.2), random(&mut rng, 0.2));
    let (ls, rs) = (shares_of(&mut rng, &l), shares_of(&mut rng, &r));
    let person = PartyShares {
        left: ls[0].clone(),
        right: rs[0].clone(),
    };
    let m = mirror_person(&person);
    assert!(m.left == mirror_eye(&rs[0]));
    assert!(m.right == mirror_eye(&ls[0]));
    assert!(mirror_person(&m) == person);
}

use super::*;
use crate::local::chi_squared;
use crate::synthetic;
use rand_chacha::ChaCha20Rng;
use sdk_orb::plaintext::masked_value;
use sdk_orb::shamir::{code_coefs, hazmat_share_with_randomness};

fn keys(rng: &mut ChaCha20Rng) -> Vec<(x25519_dalek::StaticSecret, x25519_dalek::PublicKey)> {
    (0..3)
        .map(|_| {
            let mut b = [0u8; 32];
            rng.fill_bytes(&mut b);
            let s = x25519_dalek::StaticSecret::from(b);
            let p = x25519_dalek::PublicKey::from(&s);
            (s, p)
        })
        .collect()
}

/// The two helpers of `target` with their pad seeds for `nonce`, derived each from its own key.
fn helpers(
    k: &[(x25519_dalek::StaticSecret, x25519_dalek::PublicKey)],
    target: PartyId,
    nonce: &[u8; 32],
) -> [(PartyId, Helper); 2] {
    let hs: Vec<PartyId> = PartyId::ALL.into_iter().filter(|&p| p != target).collect();
    let (a, b) = (hs[0], hs[1]);
    let sa = pad_seed(a, &k[a.index()].0, &k[b.index()].1, target, nonce);
    let sb = pad_seed(b, &k[b.index()].0, &k[a.index()].1, target, nonce);
    assert_eq!(*sa, *sb, "both helpers derive the same seed");
    [
        (a, Helper::new(a, target, &sa)),
        (b, Helper::new(b, target, &sb)),
    ]
}

#[test]
fn the_helpers_messages_add_up_to_the_lost_share_of_every_party() {
    let mut rng = ChaCha20Rng::seed_from_u64(61);
    let k = keys(&mut rng);
    let people: Vec<Vec<PartyShares>> = (0..3)
        .map(|_| {
            let (l, r) = (synthetic::eye(&mut rng), synthetic::eye(&mut rng));
            synthetic::share_person(&mut rng, &l, &r)
        })
        .collect();
    for target in PartyId::ALL {
        let mut nonce = [0u8; 32];
        rng.fill_bytes(&mut nonce);
        let [(a, mut ha), (b, mut hb)] = helpers(&k, target, &nonce);
        for person in &people {
            let ma = ha.contribute_person(&person[a.index()]);
            let mb = hb.contribute_person(&person[b.index()]);
            let recovered = combine_person(&ma, &mb);
            assert!(recovered == person[target.index()], "party {target:?}");
            // Neither message alone is the share.
            assert!(combine_person(&ma, &vec![0; PERSON_COEFS]) != person[target.index()]);
        }
    }
}

#[test]
fn a_different_nonce_or_helper_key_gives_other_pads() {
    let mut rng = ChaCha20Rng::seed_from_u64(62);
    let k = keys(&mut rng);
    let t = PartyId::ALL[1];
    let (a, b) = (PartyId::ALL[0], PartyId::ALL[2]);
    let s1 = pad_seed(a, &k[0].0, &k[2].1, t, &[1; 32]);
    let s2 = pad_seed(a, &k[0].0, &k[2].1, t, &[2; 32]);
    let s3 = pad_seed(a, &k[0].0, &k[1].1, t, &[1; 32]);
    assert_ne!(*s1, *s2);
    assert_ne!(*s1, *s3);
    assert_eq!(*s1, *pad_seed(b, &k[2].0, &k[0].1, t, &[1; 32]));
}

fn le_bytes(words: &[u16]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// One person whose two eyes hold the same constant template (every bit usable and 0), shared
/// with zero randomness: every share coefficient is then a fixed, highly non-uniform value.
fn constant_person() -> Vec<PartyShares> {
    let mut t = [0u16; sdk_orb::CODE_COEFS];
    let template = sdk_orb::IrisTemplate::new(
        sdk_orb::IrisBits::zero(),
        sdk_orb::IrisBits::ones(),
        "v2.1",
        &sdk_orb::TemplatePolicy::default(),
    )
    .expect("valid");
    code_coefs(&template, &mut t);
    assert!(t.iter().all(|&v| v == masked_value(false, true)));
    let zeros = vec![GaloisRingElement::ZERO; sdk_orb::CODE_COEFS / 4];
    let mut out = vec![
        PartyShares::zero(),
        PartyShares::zero(),
        PartyShares::zero(),
    ];
    for eye in 0..2 {
        let mut code: [Vec<u16>; 3] = core::array::from_fn(|_| vec![0u16; sdk_orb::CODE_COEFS]);
        let [c0, c1, c2] = &mut code;
        hazmat_share_with_randomness(&t, &zeros, [c0, c1, c2]);
        for (p, c) in out.iter_mut().zip(&code) {
            let e = if eye == 0 { &mut p.left } else { &mut p.right };
            e.code.coefs_mut().copy_from_slice(c);
            e.mask.coefs_mut().fill(1);
        }
    }
    out
}

#[test]
fn every_message_the_recovering_node_receives_is_uniform_for_a_fixed_secret() {
    let mut rng = ChaCha20Rng::seed_from_u64(63);
    let k = keys(&mut rng);
    let person = constant_person();
    // The control: the unmasked Lagrange term is far from uniform, so the statistic can fail.
    let mut unmasked = vec![0u16; sdk_orb::CODE_COEFS];
    let l = lagrange_coefficient(PartyId::ALL[0], PartyId::ALL[2], EVALUATION_POINTS[1]);
    for (s, o) in person[0]
        .left
        .code
        .coefs()
        .chunks_exact(4)
        .zip(unmasked.chunks_exact_mut(4))
    {
        o.copy_from_slice(&(l * GaloisRingElement([s[0], s[1], s[2], s[3]])).0);
    }
    assert!(chi_squared(&le_bytes(&unmasked)) > 10_000.0);

    for target in PartyId::ALL {
        for session in 0..4 {
            let mut nonce = [0u8; 32];
            rng.fill_bytes(&mut nonce);
            let [(a, mut ha), (b, mut hb)] = helpers(&k, target, &nonce);
            // Several people in one session: the pad stream runs on, never repeating.
            for _ in 0..2 {
                for (h, from) in [(&mut ha, a), (&mut hb, b)] {
                    let message = le_bytes(&h.contribute_person(&person[from.index()]));
                    assert_eq!(message.len(), 2 * PERSON_COEFS);
                    let chi = chi_squared(&message);
                    assert!(
                        chi < 400.0,
                        "to {target:?} from {from:?}, session {session}: chi-squared {chi}"
                    );
                }
            }
        }
    }
}

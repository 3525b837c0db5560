use super::*;
use crate::local::chi_squared;
use crate::synthetic;
use rand_chacha::ChaCha20Rng;
use sdk_orb::plaintext::masked_value;
use sdk_orb::shamir::{code_coefs, hazmat_share_with_randomness};

const STATE: HelperState = HelperState {
    last_applied_batch: 7,
    next_serial_id: 12,
};

/// The two helpers of `target` for one session, each keyed by its own call to [`pad_seed`].
fn helpers(
    target: PartyId,
    secret: &PadSecret,
    nonce: &[u8; 32],
    state: HelperState,
) -> [(PartyId, Helper); 2] {
    let (a, b) = helpers_of(target);
    let sa = pad_seed(target, secret, nonce, state);
    // The other helper holds the secret as it arrived over the link.
    let received = PadSecret::try_from(&secret.to_bytes()[..]).expect("32 bytes");
    let sb = pad_seed(target, &received, nonce, state);
    assert_eq!(*sa, *sb, "both helpers derive the same seed");
    [
        (a, Helper::new(a, target, &sa)),
        (b, Helper::new(b, target, &sb)),
    ]
}

fn person(rng: &mut ChaCha20Rng) -> Vec<PartyShares> {
    let (l, r) = (synthetic::eye(rng), synthetic::eye(rng));
    synthetic::share_person(rng, &l, &r)
}

#[test]
fn the_helpers_messages_add_up_to_the_lost_share_of_every_party() {
    let mut rng = ChaCha20Rng::seed_from_u64(61);
    let people: Vec<Vec<PartyShares>> = (0..3).map(|_| person(&mut rng)).collect();
    for target in PartyId::ALL {
        let mut nonce = [0u8; 32];
        rng.fill_bytes(&mut nonce);
        let secret = PadSecret::random(&mut rng);
        let [(a, mut ha), (b, mut hb)] = helpers(target, &secret, &nonce, STATE);
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
fn a_different_nonce_secret_or_state_gives_another_seed() {
    let mut rng = ChaCha20Rng::seed_from_u64(62);
    let t = PartyId::ALL[1];
    let secret = PadSecret::random(&mut rng);
    let other_secret = PadSecret::random(&mut rng);
    let seed = |secret: &PadSecret, nonce: u8, state: HelperState| {
        *pad_seed(t, secret, &[nonce; 32], state)
    };
    let s = seed(&secret, 1, STATE);
    assert_ne!(s, seed(&secret, 2, STATE));
    assert_ne!(s, seed(&other_secret, 1, STATE));
    for state in [
        HelperState {
            last_applied_batch: STATE.last_applied_batch + 1,
            ..STATE
        },
        HelperState {
            next_serial_id: STATE.next_serial_id + 1,
            ..STATE
        },
    ] {
        assert_ne!(s, seed(&secret, 1, state));
    }
    assert_ne!(s, *pad_seed(PartyId::ALL[0], &secret, &[1; 32], STATE));
}

/// What a recovering node that asks twice with one nonce could subtract: the lower helper's
/// messages for one share in two sessions. With a fresh secret, or the state moved on, their
/// difference is not zero (the pads differ), while each session still adds up to the share.
#[test]
fn sessions_with_one_nonce_pad_differently_and_each_still_cancels() {
    let mut rng = ChaCha20Rng::seed_from_u64(64);
    let people: Vec<Vec<PartyShares>> = (0..2).map(|_| person(&mut rng)).collect();
    let target = PartyId::ALL[2];
    let nonce = [0x5a; 32];
    let secret = PadSecret::random(&mut rng);
    let moved_on = HelperState {
        last_applied_batch: STATE.last_applied_batch + 1,
        next_serial_id: STATE.next_serial_id,
    };
    let sessions = [
        (
            PadSecret::try_from(&secret.to_bytes()[..]).expect("32 bytes"),
            STATE,
        ),
        (PadSecret::random(&mut rng), STATE),
        (secret, moved_on),
    ];
    let mut low_messages = Vec::new();
    for (secret, state) in &sessions {
        let [(a, mut ha), (b, mut hb)] = helpers(target, secret, &nonce, *state);
        let mut messages = Vec::new();
        for p in &people {
            let ma = ha.contribute_person(&p[a.index()]);
            let mb = hb.contribute_person(&p[b.index()]);
            assert!(combine_person(&ma, &mb) == p[target.index()]);
            messages.push(ma);
        }
        low_messages.push(messages);
    }
    let (first, others) = low_messages.split_first().expect("three sessions");
    for other in others {
        for (x, y) in first.iter().zip(other) {
            let differing = x.iter().zip(y).filter(|(u, v)| u != v).count();
            // Equal pads would make every word equal; independent ones leave a 2^-16 chance each.
            assert!(differing > PERSON_COEFS * 99 / 100, "{differing}");
        }
    }
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
            let secret = PadSecret::random(&mut rng);
            let [(a, mut ha), (b, mut hb)] = helpers(target, &secret, &nonce, STATE);
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

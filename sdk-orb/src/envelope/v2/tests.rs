use super::*;
use crate::envelope::{envelope_len, envelope_version, EnvelopeView};
use crate::keys::{NodeHybridPublicKeys, NodeHybridSecretKey, OrbSigningKey};
use crate::shamir::seeded::tests::assert_pairs_reconstruct;
use crate::shamir::seeded::{seeded_party, ShareSeed, SEED_BYTES};
use crate::template::{random, IrisTemplate};
use crate::{PartyShares, RequestType};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::boxed::Box;
use std::vec::Vec;

struct Fixture {
    rng: ChaCha20Rng,
    node_keys: [NodeHybridSecretKey; PARTIES],
    public: NodeHybridPublicKeys,
    orb: OrbSigningKey,
    left: IrisTemplate,
    right: IrisTemplate,
}

fn fixture(seed: u64) -> Fixture {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let node_keys: [NodeHybridSecretKey; PARTIES] =
        core::array::from_fn(|_| NodeHybridSecretKey::generate(&mut rng));
    let public = NodeHybridPublicKeys(core::array::from_fn(|i| node_keys[i].public_key()));
    let orb = OrbSigningKey::generate(&mut rng);
    let left = random(&mut rng, 0.15);
    let right = random(&mut rng, 0.2);
    Fixture {
        rng,
        node_keys,
        public,
        orb,
        left,
        right,
    }
}

/// A uniqueness request whose seeded party is `seeded`.
fn meta_for(seeded: PartyId) -> RequestMeta {
    let mut id = [7u8; 16];
    id[15] = 9 + seeded.get(); // 0x0707..07 09 is 0 mod 3.
    let m = RequestMeta {
        request_id: RequestId(id),
        request_type: RequestType::Uniqueness,
        timestamp_ms: 1_790_000_000_000,
        serial_id: 0,
        or_policy: false,
    };
    assert_eq!(seeded_party(&m.request_id), seeded);
    m
}

fn seal(f: &mut Fixture, m: &RequestMeta) -> Vec<u8> {
    // Garbage first, so bytes the sealer fails to write would show.
    let mut out = std::vec![0xA5u8; MAX_ENVELOPE_LEN_V2 + 3];
    let n = seal_envelope_v2(
        &mut f.rng, m, &f.left, &f.right, &f.public, &f.orb, &mut out,
    )
    .expect("seals");
    assert_eq!(n, envelope_len_v2(m));
    assert!(out[n..].iter().all(|&b| b == 0xA5));
    out.truncate(n);
    out
}

fn open_all(f: &Fixture, bytes: &[u8]) -> Vec<Box<PartyShares>> {
    let view = EnvelopeView::parse_v2(bytes).expect("parses");
    view.verify_signature().expect("verifies");
    PartyId::ALL
        .iter()
        .map(|&p| open_payload_v2(&view, p, &f.node_keys[p.index()]).expect("opens"))
        .collect()
}

#[test]
fn every_party_opens_shares_on_one_polynomial_through_both_eyes_whichever_is_seeded() {
    let mut f = fixture(60);
    for seeded in PartyId::ALL {
        let bytes = seal(&mut f, &meta_for(seeded));
        let shares = open_all(&f, &bytes);
        // Every pair, the seeded party's included, gives the plain values: the opened shares
        // are one degree-1 sharing, as in version 1.
        let [a, b, c] = [&*shares[0], &*shares[1], &*shares[2]];
        assert_pairs_reconstruct([a, b, c], [&f.left, &f.right], &std::format!("{seeded}"));
    }
}

#[test]
fn a_uniqueness_envelope_is_about_a_third_smaller_than_version_1() {
    for seeded in PartyId::ALL {
        let m = meta_for(seeded);
        let (v1, v2) = (envelope_len(&m), envelope_len_v2(&m));
        // Two of three share sets, plus 3 x 1,088 more bytes of encapsulated keys and the
        // seed's 34 bytes.
        let two_thirds = 2 * v1 / 3;
        assert!(
            v2 > two_thirds && v2 < two_thirds + 3 * 1088 + 200,
            "{v1} -> {v2}"
        );
        assert!(v2 <= MAX_ENVELOPE_LEN_V2);
    }
}

#[test]
fn sealing_is_deterministic_and_parsing_re_encodes_the_same_bytes() {
    let m = meta_for(PartyId::ALL[1]);
    let a = seal(&mut fixture(61), &m);
    let b = seal(&mut fixture(61), &m);
    assert!(a == b);
    let view = EnvelopeView::parse_v2(&a).expect("parses");
    let mut again = std::vec![0xA5u8; a.len()];
    assert_eq!(view.encode(&mut again), Ok(a.len()));
    assert!(again == a);
    for p in PartyId::ALL {
        assert_eq!(
            view.payload(p).encapsulated_key.len(),
            HYBRID_ENCAPSULATED_KEY_BYTES
        );
    }
}

#[test]
fn each_version_parser_refuses_the_other_version_and_the_version_field_tells_them_apart() {
    let mut f = fixture(62);
    let m = meta_for(PartyId::ALL[0]);
    let v2 = seal(&mut f, &m);
    assert_eq!(envelope_version(&v2), Ok(2));
    assert_eq!(
        EnvelopeView::parse(&v2).err(),
        Some(EnvelopeError::UnsupportedVersion(2))
    );
    let mut v1_keys = ChaCha20Rng::seed_from_u64(1);
    let keys = crate::keys::NodePublicKeys(core::array::from_fn(|_| {
        crate::keys::NodeSecretKey::generate(&mut v1_keys).public_key()
    }));
    let v1 =
        crate::envelope::seal_envelope_to_vec(&mut f.rng, &m, &f.left, &f.right, &keys, &f.orb)
            .expect("seals");
    assert_eq!(envelope_version(&v1), Ok(1));
    assert!(EnvelopeView::parse_v2(&v1).is_err());
    // Version 1 in a version 2 body (0x08 0x02 -> 0x08 0x01).
    let mut relabelled = v2.clone();
    assert_eq!(&relabelled[..2], &[0x08, 0x02]);
    relabelled[1] = 1;
    assert_eq!(
        EnvelopeView::parse_v2(&relabelled).err(),
        Some(EnvelopeError::UnsupportedVersion(1))
    );
}

#[test]
fn another_partys_key_and_tampered_bytes_are_refused() {
    let mut f = fixture(63);
    let seeded = PartyId::ALL[2];
    let bytes = seal(&mut f, &meta_for(seeded));
    let view = EnvelopeView::parse_v2(&bytes).expect("parses");
    for p in PartyId::ALL {
        let wrong = &f.node_keys[p.next().index()];
        assert_eq!(
            open_payload_v2(&view, p, wrong).err(),
            Some(EnvelopeError::Decryption),
            "{p}"
        );
    }
    // A flipped byte in a ciphertext: the digest binds the ciphertext through its tag, so the
    // signature still holds and HPKE refuses it. A flipped tag byte fails both.
    for (party, tag) in [(seeded, false), (seeded.next(), false), (seeded, true)] {
        let ct = view.payload(party).ciphertext;
        let at =
            ct.as_ptr() as usize - bytes.as_ptr() as usize + if tag { ct.len() - 1 } else { 5 };
        let mut bad = bytes.clone();
        bad[at] ^= 1;
        let view = EnvelopeView::parse_v2(&bad).expect("parses");
        let signature = if tag {
            Err(EnvelopeError::Signature)
        } else {
            Ok(())
        };
        assert_eq!(view.verify_signature(), signature, "{party}, tag {tag}");
        assert_eq!(
            open_payload_v2(&view, party, &f.node_keys[party.index()]).err(),
            Some(EnvelopeError::Decryption),
            "{party}, tag {tag}"
        );
    }
}

fn payload(party: PartyId, request_id: &RequestId, seed: bool, eyes: bool) -> Vec<u8> {
    use crate::pb::{len_field_len, Writer};
    let full = payload_len_v2(party, party.next());
    let head = full
        - if eyes {
            0
        } else {
            2 * len_field_len(EYE_INNER)
        };
    let mut out = std::vec![0u8; head];
    let mut w = Writer::new(&mut out);
    write_payload_head(&mut w, VERSION_V2, party, request_id);
    if eyes {
        reserve_eyes(&mut w);
    }
    if seed {
        let mut field = [0u8; 2 + SEED_BYTES];
        Writer::new(&mut field).bytes(6, &[3; SEED_BYTES]);
        out.extend_from_slice(&field);
    }
    out
}

#[test]
fn a_seed_goes_only_to_the_seeded_party_and_shares_only_to_the_others() {
    let rid = meta_for(PartyId::ALL[1]).request_id;
    let (seeded, other) = (PartyId::ALL[1], PartyId::ALL[2]);
    let mut out = Box::new(PartyShares::zero());
    // The well-formed ones.
    decode_payload_v2(&payload(seeded, &rid, true, false), seeded, &rid, &mut out).expect("seed");
    let mut expanded = Box::new(PartyShares::zero());
    crate::shamir::seeded::expand_seed(&ShareSeed([3; SEED_BYTES]), &mut expanded);
    assert!(out == expanded);
    decode_payload_v2(&payload(other, &rid, false, true), other, &rid, &mut out).expect("shares");
    // Shares where the seed belongs, a seed where shares belong, neither.
    assert_eq!(
        decode_payload_v2(&payload(seeded, &rid, false, true), seeded, &rid, &mut out),
        Err(EnvelopeError::Malformed("shares in a seeded payload"))
    );
    assert_eq!(
        decode_payload_v2(&payload(other, &rid, true, true), other, &rid, &mut out),
        Err(EnvelopeError::Malformed("unknown protobuf field"))
    );
    assert_eq!(
        decode_payload_v2(&payload(seeded, &rid, false, false), seeded, &rid, &mut out),
        Err(EnvelopeError::MissingField("seed"))
    );
}

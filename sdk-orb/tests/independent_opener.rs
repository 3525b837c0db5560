//! A second HPKE implementation, hpke-rs with the libcrux provider (not the crate the SDK
//! seals with), opens every payload of a version 2 envelope from the node's 32-byte X-Wing
//! seed alone: the envelope is standard HPKE with KEM 0x647a.

use hpke_rs::hpke_types::{AeadAlgorithm, KdfAlgorithm, KemAlgorithm};
use hpke_rs::libcrux::HpkeLibcrux;
use hpke_rs::{Hpke, HpkePrivateKey, Mode};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use sdk_orb::envelope::v2::{
    decode_payload_v2, hpke_info_v2, open_payload_v2, seal_envelope_v2_to_vec,
};
use sdk_orb::envelope::{EnvelopeView, RequestMeta};
use sdk_orb::keys::{NodeHybridPublicKeys, NodeHybridSecretKey, OrbSigningKey};
use sdk_orb::template::random;
use sdk_orb::{PartyId, PartyShares, RequestId, RequestType};

fn hpke() -> Hpke<HpkeLibcrux> {
    Hpke::new(
        Mode::Base,
        KemAlgorithm::XWingDraft06,
        KdfAlgorithm::HkdfSha256,
        AeadAlgorithm::ChaCha20Poly1305,
    )
}

#[test]
fn hpke_rs_opens_every_payload_of_a_version_2_envelope_to_the_sdks_shares() {
    assert_eq!(KemAlgorithm::XWingDraft06 as u16, 0x647a);
    let mut rng = ChaCha20Rng::seed_from_u64(70);
    let keys: [NodeHybridSecretKey; 3] =
        core::array::from_fn(|_| NodeHybridSecretKey::generate(&mut rng));
    let public = NodeHybridPublicKeys(core::array::from_fn(|i| keys[i].public_key()));
    let orb = OrbSigningKey::generate(&mut rng);
    let (left, right) = (random(&mut rng, 0.2), random(&mut rng, 0.1));
    let meta = RequestMeta {
        request_id: RequestId::random(&mut rng),
        request_type: RequestType::Uniqueness,
        timestamp_ms: 1_790_000_000_000,
        serial_id: 0,
        or_policy: false,
    };
    let bytes =
        seal_envelope_v2_to_vec(&mut rng, &meta, &left, &right, &public, &orb).expect("seals");
    let view = EnvelopeView::parse_v2(&bytes).expect("parses");
    view.verify_signature().expect("verifies");
    let aad = meta.header_v2(&orb.verifying_key().to_bytes());
    for party in PartyId::ALL {
        let sealed = view.payload(party);
        let info = hpke_info_v2(party, &meta.request_id);
        let open_with = |key: &NodeHybridSecretKey| {
            hpke().open(
                sealed.encapsulated_key,
                &HpkePrivateKey::new(key.to_seed().to_vec()),
                &info,
                &aad,
                sealed.ciphertext,
                None,
                None,
                None,
            )
        };
        let plaintext = open_with(&keys[party.index()]).expect("hpke-rs opens");
        let mut theirs = Box::new(PartyShares::zero());
        decode_payload_v2(&plaintext, party, &meta.request_id, &mut theirs).expect("decodes");
        let ours = open_payload_v2(&view, party, &keys[party.index()]).expect("the SDK opens");
        assert!(*theirs == *ours, "{party}");
        assert!(open_with(&keys[party.next().index()]).is_err(), "{party}");
    }
}

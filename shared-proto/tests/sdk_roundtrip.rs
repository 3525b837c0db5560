//! prost decodes the SDK's hand-written envelope bytes and re-encodes them
//! byte for byte (the SDK writes canonical proto3).

use prost::Message;
use rand_chacha::rand_core::SeedableRng;
use sdk_orb::envelope::{seal_envelope_to_vec, RequestMeta};
use sdk_orb::keys::{NodePublicKeys, NodeSecretKey, OrbSigningKey};
use sdk_orb::{RequestId, RequestType};
use shared_proto::v1::Envelope;

#[test]
fn sdk_envelopes_round_trip_through_prost() -> Result<(), Box<dyn std::error::Error>> {
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
    let nodes = NodePublicKeys([0, 1, 2].map(|_| NodeSecretKey::generate(&mut rng).public_key()));
    let orb = OrbSigningKey::generate(&mut rng);
    for (t, serial, or_policy) in [
        (RequestType::Uniqueness, 0, false),
        (RequestType::Deletion, 7, true),
    ] {
        let meta = RequestMeta {
            request_id: RequestId::random(&mut rng),
            request_type: t,
            timestamp_ms: 1_700_000_000_000,
            serial_id: serial,
            or_policy,
        };
        let left = sdk_orb::template::random(&mut rng, 0.1);
        let right = sdk_orb::template::random(&mut rng, 0.1);
        let bytes = seal_envelope_to_vec(&mut rng, &meta, &left, &right, &nodes, &orb)?;
        let env = Envelope::decode(bytes.as_slice())?;
        assert_eq!(env.version, 1);
        assert_eq!(env.request_id, meta.request_id.0);
        assert_eq!(env.serial_id, serial);
        assert_eq!(env.or_policy, or_policy);
        assert_eq!(env.payloads.len(), 3);
        for (i, p) in env.payloads.iter().enumerate() {
            assert_eq!(p.party_id as usize, i);
        }
        assert_eq!(env.encode_to_vec(), bytes, "prost re-encoding differs");
    }
    Ok(())
}

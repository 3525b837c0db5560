//! `payload_rejections_v2`: decrypted version 2 payloads a node must reject, with the exact
//! error: the seed where shares belong and shares where the seed belongs among them.

use sdk_orb::envelope::v2::decode_payload_v2;
use sdk_orb::shamir::seeded::seeded_party;
use sdk_orb::{PartyId, RequestId};

use super::payload_rejections::{vectors, verify_with, Case};
use crate::common::seed;
use crate::envelope::{eye, payload, Pb};
use crate::format::Vector;
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// A payload of version 2 for `party` with a seed field (6) after the given eyes.
pub(crate) fn seeded(
    party: u64,
    request_id: &[u8],
    left: Option<&[u8]>,
    seed: Option<&[u8]>,
) -> Vec<u8> {
    let mut pb = Pb(payload(2, party, request_id, left, None));
    if let Some(s) = seed {
        pb.bytes(6, s);
    }
    pb.0
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::PayloadRejectionsV2;
    const DESCRIPTION: &'static str = "Decrypted version 2 payloads that a node must reject, \
        with the exact EnvelopeError. The party seeded_party(request id) (the request id as a \
        big-endian integer, mod 3) expects version 2, its party id, the request id and field 6, \
        the 32-byte seed, and no eyes; the others expect version 1's fields with version 2 and \
        no field 6.";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        // The first request id of the label's stream whose seeded party is 1.
        let rid: [u8; 16] = (0u32..)
            .map(|i| {
                let mut r = [0u8; 16];
                r.copy_from_slice(&seed(&format!("payload_rejections_v2/request_id/{i}"))[..16]);
                r
            })
            .find(|r| seeded_party(&RequestId(*r)) == PartyId::ALL[1])
            .unwrap_or_else(|| unreachable!("request ids are uniform"));
        let other = [0x55u8; 16];
        let key = [7u8; 32];
        let empty_eye = eye(None, None);
        let cases: Vec<(&str, u8, Vec<u8>)> = vec![
            (
                "the seeded party: version 1",
                1,
                payload(1, 1, &rid, None, None),
            ),
            (
                "the seeded party: eyes instead of the seed",
                1,
                seeded(1, &rid, Some(&empty_eye), None),
            ),
            (
                "the seeded party: eyes and the seed",
                1,
                seeded(1, &rid, Some(&empty_eye), Some(&key)),
            ),
            ("the seeded party: no seed", 1, seeded(1, &rid, None, None)),
            (
                "the seeded party: a 31-byte seed",
                1,
                seeded(1, &rid, None, Some(&key[..31])),
            ),
            (
                "the seeded party: names party 2",
                1,
                seeded(2, &rid, None, Some(&key)),
            ),
            (
                "the seeded party: another request id",
                1,
                seeded(1, &other, None, Some(&key)),
            ),
            (
                "another party: a seed",
                2,
                seeded(2, &rid, None, Some(&key)),
            ),
            (
                "another party: version 1",
                0,
                payload(1, 0, &rid, None, None),
            ),
            ("another party: no eyes", 0, payload(2, 0, &rid, None, None)),
        ];
        let cases = cases
            .into_iter()
            .map(|(comment, p, bytes)| (comment, p, &rid, bytes))
            .collect();
        vectors(decode_payload_v2, cases)
    }

    fn verify(vector: &Vector<Case>, _all: &[Vector<Case>]) -> Result<(), String> {
        verify_with(decode_payload_v2, vector)
    }
}

//! `payload_rejections`: decrypted payloads a node must reject, with the exact error.

use serde::{Deserialize, Serialize};

use sdk_orb::envelope::decode_payload;
use sdk_orb::shamir::PartyShares;
use sdk_orb::{PartyId, RequestId};

use crate::common::{party, seed};
use crate::envelope::{eye, payload, ErrorKind, Pb};
use crate::format::{expect_eq, Flag, Hex, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// A payload vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// `payload` opened by `party` for `request_id` is rejected with `error`.
    Reject {
        /// The party decoding.
        party: u8,
        /// The envelope's request id.
        request_id: Hex,
        /// The decrypted payload bytes.
        payload: Hex,
        /// The exact error.
        error: ErrorKind,
    },
}

/// A payload decoder of one envelope version, as the SDK's `decode_payload` functions.
pub(crate) type Decoder =
    fn(&[u8], PartyId, &RequestId, &mut PartyShares) -> Result<(), sdk_orb::EnvelopeError>;

fn decode(
    decoder: Decoder,
    p: u8,
    request_id: &Hex,
    bytes: &[u8],
) -> Result<Result<(), ErrorKind>, String> {
    let rid = RequestId(request_id.array::<16>("request_id")?);
    let mut out = Box::new(PartyShares::zero());
    match decoder(bytes, party(p)?, &rid, &mut out) {
        Ok(()) => Ok(Ok(())),
        Err(e) => Ok(Err(ErrorKind::from_sdk(e)?)),
    }
}

/// The vectors of `cases` (comment, party, request id, payload), each rejected by `decoder`.
pub(crate) fn vectors(
    decoder: Decoder,
    cases: Vec<(&str, u8, &[u8; 16], Vec<u8>)>,
) -> Result<Vec<Vector<Case>>, String> {
    let mut out = Vec::new();
    for (comment, p, r, bytes) in cases {
        let request_id = Hex(r.to_vec());
        let error = match decode(decoder, p, &request_id, &bytes)? {
            Ok(()) => return Err(format!("{comment}: accepted")),
            Err(e) => e,
        };
        out.push(Vector {
            id: out.len() as u32 + 1,
            comment: comment.to_string(),
            flags: vec![Flag::EdgeCase, Flag::Invalid],
            case: Case::Reject {
                party: p,
                request_id,
                payload: Hex(bytes),
                error,
            },
        });
    }
    Ok(out)
}

/// Replays a vector with `decoder`.
pub(crate) fn verify_with(decoder: Decoder, vector: &Vector<Case>) -> Result<(), String> {
    let Case::Reject {
        party: p,
        request_id,
        payload: bytes,
        error,
    } = &vector.case;
    match decode(decoder, *p, request_id, &bytes.0)? {
        Ok(()) => Err("accepted".to_string()),
        Err(e) => expect_eq("error", &e, error),
    }
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::PayloadRejections;
    const DESCRIPTION: &'static str = "Decrypted payloads (protobuf: version 1, party 2, \
        request_id 3, left 4 and right 5 eyes with code 1 and mask 2 share bytes) that a node \
        must reject, with the exact EnvelopeError. Decoding is strict: canonical encoding, \
        fields in order, each at most once.";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let mut rid = [0u8; 16];
        rid.copy_from_slice(&seed("payload_rejections/request_id")[..16]);
        let other = [0x55u8; 16];
        let code = vec![0u8; 2];
        let empty_eye = eye(None, None);
        let mut pb_unknown = Pb::default();
        pb_unknown.uint(1, 1).bytes(3, &rid).uint(6, 1);
        let mut out_of_order = Pb::default();
        out_of_order.bytes(3, &rid).uint(1, 1);
        let mut repeated = Pb::default();
        repeated.uint(1, 1).uint(1, 1);
        let mut wrong_type = Pb::default();
        wrong_type.bytes(1, &[1]);
        let cases: Vec<(&str, u8, &[u8; 16], Vec<u8>)> = vec![
            ("empty", 0, &rid, vec![]),
            ("version 2", 0, &rid, payload(2, 0, &rid, None, None)),
            (
                "no request id",
                0,
                &rid,
                payload(1, 0, &[], None, None)[..2].to_vec(),
            ),
            (
                "names party 0, opened by party 1",
                1,
                &rid,
                payload(1, 0, &rid, None, None),
            ),
            (
                "names party 2, opened by party 1",
                1,
                &rid,
                payload(1, 2, &rid, None, None),
            ),
            (
                "another request id",
                0,
                &rid,
                payload(1, 0, &other, None, None),
            ),
            (
                "a 15-byte request id",
                2,
                &rid,
                payload(1, 2, &rid[..15], None, None),
            ),
            ("no eyes", 0, &rid, payload(1, 0, &rid, None, None)),
            (
                "an empty left eye, no right eye",
                0,
                &rid,
                payload(1, 0, &rid, Some(&empty_eye), None),
            ),
            (
                "a left code share of 2 bytes",
                0,
                &rid,
                payload(1, 0, &rid, Some(&eye(Some(&code), None)), None),
            ),
            (
                "a right mask share of 2 bytes",
                1,
                &rid,
                payload(1, 1, &rid, None, Some(&eye(None, Some(&code)))),
            ),
            (
                "an empty left eye",
                0,
                &rid,
                payload(1, 0, &rid, Some(&empty_eye), Some(&empty_eye)),
            ),
            ("an unknown field 6", 0, &rid, pb_unknown.0),
            ("fields out of order", 0, &rid, out_of_order.0),
            ("a repeated field", 0, &rid, repeated.0),
            ("version as a length-delimited field", 0, &rid, wrong_type.0),
            ("a truncated varint", 0, &rid, vec![0x08, 0x81]),
            (
                "a varint of 11 bytes",
                0,
                &rid,
                [&[0x08u8][..], &[0xff; 10], &[0x01]].concat(),
            ),
            ("a length beyond the end", 0, &rid, vec![0x1a, 0x10, 0x00]),
            ("wire type 5 (fixed32)", 0, &rid, vec![0x0d, 0, 0, 0, 0]),
        ];
        vectors(decode_payload, cases)
    }

    fn verify(vector: &Vector<Case>, _all: &[Vector<Case>]) -> Result<(), String> {
        verify_with(decode_payload, vector)
    }
}

//! `envelope_header`: the header bytes (HPKE AAD and digest prefix), HPKE info strings and
//! sizes.

use serde::{Deserialize, Serialize};

use sdk_orb::envelope::{ciphertext_len, envelope_len, hpke_info, payload_len, MAX_ENVELOPE_LEN};
use sdk_orb::{PartyId, RequestType};

use crate::envelope::{request, Keys, Request};
use crate::format::{expect_bytes, expect_eq, Flag, Hex, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// A header vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// The header of a request from the orb key `orb_public_key`.
    Header {
        /// The request.
        request: Request,
        /// The orb's Ed25519 public key.
        orb_public_key: Hex,
        /// `"ocelli/envelope/v1" || u32be(version) || request id || u8(type) ||
        /// u64be(timestamp) || u64be(serial id) || u8(or_policy) || orb key`.
        header: Hex,
        /// `"ocelli/payload/v1" || u8(party) || request id` for parties 0, 1, 2.
        hpke_info: Vec<Hex>,
        /// Bytes of the envelope.
        envelope_len: usize,
    },
    /// Payload and ciphertext sizes per party, and the largest envelope.
    Sizes {
        /// Plaintext payload bytes of parties 0, 1, 2.
        payload_len: Vec<usize>,
        /// Ciphertext bytes (tag included).
        ciphertext_len: Vec<usize>,
        /// The largest envelope any request can produce.
        max_envelope_len: usize,
    },
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::EnvelopeHeader;
    const DESCRIPTION: &'static str = "The envelope header (the HPKE AAD and the prefix of the \
        digest input), the HPKE info string per party, and the envelope, payload and \
        ciphertext sizes.";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let keys = Keys::derive("envelope_header");
        let orb = keys.parse()?.orb.verifying_key().to_bytes();
        let mut out = vec![Vector {
            id: 1,
            comment: "sizes".to_string(),
            flags: vec![],
            case: Case::Sizes {
                payload_len: PartyId::ALL.iter().map(|&p| payload_len(p)).collect(),
                ciphertext_len: PartyId::ALL.iter().map(|&p| ciphertext_len(p)).collect(),
                max_envelope_len: MAX_ENVELOPE_LEN,
            },
        }];
        let cases = [
            (RequestType::Uniqueness, 0, false),
            (RequestType::UniquenessCheck, 0, true),
            (RequestType::Deletion, 1, false),
            (RequestType::Reauth, 1 << 40, true),
            (RequestType::Reset, u64::MAX, false),
        ];
        for (t, serial, or_policy) in cases {
            let mut m = request(&format!("envelope_header/{t:?}"), t, serial, or_policy);
            if t == RequestType::Reset {
                m.timestamp_ms = u64::MAX;
            }
            out.push(Vector {
                id: out.len() as u32 + 1,
                comment: format!("{t:?}, serial id {serial}, or_policy {or_policy}"),
                flags: if t == RequestType::Reset {
                    vec![Flag::EdgeCase]
                } else {
                    vec![]
                },
                case: Case::Header {
                    request: Request::of(&m),
                    orb_public_key: Hex(orb.to_vec()),
                    header: Hex(m.header(&orb).to_vec()),
                    hpke_info: PartyId::ALL
                        .iter()
                        .map(|&p| Hex(hpke_info(p, &m.request_id).to_vec()))
                        .collect(),
                    envelope_len: envelope_len(&m),
                },
            });
        }
        Ok(out)
    }

    fn verify(vector: &Vector<Case>, _all: &[Vector<Case>]) -> Result<(), String> {
        match &vector.case {
            Case::Sizes {
                payload_len: pl,
                ciphertext_len: cl,
                max_envelope_len,
            } => {
                let got: Vec<usize> = PartyId::ALL.iter().map(|&p| payload_len(p)).collect();
                expect_eq("payload_len", &got, pl)?;
                let got: Vec<usize> = PartyId::ALL.iter().map(|&p| ciphertext_len(p)).collect();
                expect_eq("ciphertext_len", &got, cl)?;
                expect_eq("max_envelope_len", &MAX_ENVELOPE_LEN, max_envelope_len)
            }
            Case::Header {
                request,
                orb_public_key,
                header,
                hpke_info: info,
                envelope_len: len,
            } => {
                let m = request.meta()?;
                let orb = orb_public_key.array::<32>("orb_public_key")?;
                expect_bytes("header", &m.header(&orb), &header.0)?;
                expect_eq("hpke_info", &info.len(), &3)?;
                for (p, want) in PartyId::ALL.iter().zip(info) {
                    expect_bytes(
                        &format!("hpke_info of {p}"),
                        &hpke_info(*p, &m.request_id),
                        &want.0,
                    )?;
                }
                expect_eq("envelope_len", &envelope_len(&m), len)
            }
        }
    }
}

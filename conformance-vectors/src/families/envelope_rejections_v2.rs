//! `envelope_rejections_v2`: version 2 envelopes a node must reject, with the exact error at
//! each stage of acceptance (parse, signature, open) and the reason the node's intake gives
//! under a stated envelope-version setting. Each is a patch over an accepted base envelope
//! sealed by `seal_envelope_v2`, whose seeded party is party 2, so that edits of party 2's
//! short payload move only the bytes after it.

mod generate;
mod parts;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use sdk_orb::envelope::v2::open_payload_v2;
use sdk_orb::envelope::{envelope_version, EnvelopeError, EnvelopeView, MAX_ENVELOPE_LEN};
use sdk_orb::shamir::PartyShares;
use sdk_orb::PartyId;

use super::envelope_sealing_v2::HybridKeys;
use crate::common::party;
use crate::envelope::{apply, check_bases, Outcome, Patch, Request};
use crate::format::{expect_eq, Flag, Hex, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// The envelope versions a node accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeVersions {
    /// An X-Wing key, and version 1 still accepted.
    Both,
    /// An X-Wing key, version 1 refused (`envelope.refuse_v1`).
    V2Only,
    /// No X-Wing key (`keys.hpke_hybrid_secret` unset): version 1 only.
    V1Only,
}

/// A rejection vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// An envelope every party accepts, under `both` and `v2_only`.
    Base {
        /// The request it carries.
        request: Request,
        /// Node X-Wing keys and the orb key.
        keys: HybridKeys,
        /// The envelope.
        envelope: Hex,
        /// Per party, SHA-256 of its opened shares: left code, left mask, right code, right
        /// mask, each coefficient a little-endian u16 (the seeded party's expanded from its
        /// seed).
        opened_sha256: Vec<Hex>,
    },
    /// The base envelope cut or zero-extended to `length`, then patched; taken in by `party`
    /// with the base's keys.
    Reject {
        /// Id of a `base` vector in this file.
        base: u32,
        /// Bytes of the input.
        length: usize,
        /// Bytes overwritten after resizing.
        patches: Vec<Patch>,
        /// The party that opens.
        party: u8,
        /// The node's envelope-version setting, for `intake`.
        node: NodeVersions,
        /// `EnvelopeView::parse_v2`.
        parse: Outcome,
        /// `verify_signature`; null if parsing fails.
        signature: Option<Outcome>,
        /// `open_payload_v2` of `party`'s payload; null if parsing fails.
        open: Option<Outcome>,
        /// The node's intake: `accept` or its rejection reason.
        intake: String,
    },
}

type Stages = (Outcome, Option<Outcome>, Option<Outcome>);

/// The SDK's stages on `bytes` for party `p`.
fn stages(bytes: &[u8], p: u8, keys: &HybridKeys) -> Result<Stages, String> {
    let (secret, _, _) = keys.parse()?;
    let id = party(p)?;
    let view = match EnvelopeView::parse_v2(bytes) {
        Ok(v) => v,
        Err(e) => return Ok((Outcome::of::<()>(&Err(e))?, None, None)),
    };
    let sig = Outcome::of(&view.verify_signature())?;
    let open = Outcome::of(&open_payload_v2(&view, id, &secret[id.index()]))?;
    Ok((Outcome::Accept, Some(sig), Some(open)))
}

/// The node's rejection reason for an SDK error (its `ocelli-reject-reason`).
fn reason(e: EnvelopeError) -> Result<&'static str, String> {
    Ok(match e {
        EnvelopeError::Malformed(_) | EnvelopeError::MissingField(_) => "malformed",
        EnvelopeError::Oversized { .. } => "oversized",
        EnvelopeError::ShareLength { .. } => "bad_shares",
        EnvelopeError::Length { .. } => "bad_length",
        EnvelopeError::UnsupportedVersion(_) => "unsupported_version",
        EnvelopeError::UnknownRequestType(_) | EnvelopeError::SerialId => "invalid_request",
        EnvelopeError::PayloadParties | EnvelopeError::PayloadParty { .. } => "wrong_party",
        EnvelopeError::Signature => "bad_signature",
        EnvelopeError::Decryption => "decryption_failed",
        EnvelopeError::PayloadRequestId => "request_id_mismatch",
        other => return Err(format!("not an input rejection: {other:?}")),
    })
}

/// The node's intake on `bytes` for party `p`, in its order: size (the node's default limit,
/// the largest version 1 envelope), the version setting, structure, orb key allow-list (the
/// base's orb key), signature, opening. Capture time and request log pass.
fn intake(bytes: &[u8], p: u8, node: NodeVersions, keys: &HybridKeys) -> Result<String, String> {
    let rejected = |e| reason(e).map(str::to_string);
    if bytes.len() > MAX_ENVELOPE_LEN {
        return Ok("oversized".to_string());
    }
    let version = envelope_version(bytes);
    if version != Ok(2) {
        if version == Ok(1) && node == NodeVersions::V2Only {
            return Ok("version1_refused".to_string());
        }
        return match EnvelopeView::parse(bytes) {
            Err(e) => rejected(e),
            Ok(_) => Err("a version 1 envelope that parses: not in this family".to_string()),
        };
    }
    if node == NodeVersions::V1Only {
        return Ok("unsupported_version".to_string());
    }
    let view = match EnvelopeView::parse_v2(bytes) {
        Ok(v) => v,
        Err(e) => return rejected(e),
    };
    if view.orb_key()[..] != keys.orb_public_key.0[..] {
        return Ok("unknown_orb_key".to_string());
    }
    if let Err(e) = view.verify_signature() {
        return rejected(e);
    }
    let (secret, _, _) = keys.parse()?;
    let id = party(p)?;
    match open_payload_v2(&view, id, &secret[id.index()]) {
        Ok(_) => Ok("accept".to_string()),
        Err(e) => rejected(e),
    }
}

/// SHA-256 of opened shares, coefficients as little-endian u16.
fn shares_sha256(s: &PartyShares) -> Hex {
    let mut h = Sha256::new();
    for eye in [&s.left, &s.right] {
        for c in eye.code.0.iter().chain(eye.mask.0.iter()) {
            h.update(c.to_le_bytes());
        }
    }
    Hex(h.finalize().to_vec())
}

fn opened_sha256(bytes: &[u8], keys: &HybridKeys) -> Result<Vec<Hex>, String> {
    let (secret, _, _) = keys.parse()?;
    let view = EnvelopeView::parse_v2(bytes).map_err(|e| e.to_string())?;
    PartyId::ALL
        .iter()
        .map(|&p| {
            open_payload_v2(&view, p, &secret[p.index()])
                .map(|s| shares_sha256(&s))
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// Every party's stages and intake accept `bytes`, under `both` and `v2_only`.
fn accepted_everywhere(bytes: &[u8], keys: &HybridKeys) -> Result<(), String> {
    let accepted = (
        Outcome::Accept,
        Some(Outcome::Accept),
        Some(Outcome::Accept),
    );
    for p in 0..3 {
        for node in [NodeVersions::Both, NodeVersions::V2Only] {
            expect_eq(&format!("party {p}"), &stages(bytes, p, keys)?, &accepted)?;
            expect_eq(
                &format!("party {p}, {node:?}: intake"),
                &intake(bytes, p, node, keys)?,
                &"accept".to_string(),
            )?;
        }
    }
    Ok(())
}

fn base_of(all: &[Vector<Case>], id: u32) -> Result<(&HybridKeys, &Hex), String> {
    match all.get((id as usize).wrapping_sub(1)).map(|v| &v.case) {
        Some(Case::Base { keys, envelope, .. }) => Ok((keys, envelope)),
        _ => Err(format!("base {id} is not a base vector of this file")),
    }
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::EnvelopeRejectionsV2;
    const DESCRIPTION: &'static str = "Version 2 envelopes a node must reject, each a patch over \
        the accepted base envelope (vector 1, sealed by seal_envelope_v2, party 2 seeded), \
        with the exact outcome of each acceptance stage (parse_v2, signature, opening one \
        party's payload with its X-Wing key) and the node intake's rejection reason under the \
        stated envelope-version setting. Validly signed defects are re-signed with the orb key \
        or sealed with hazmat_seal_plaintexts_v2 with the base's RNG stream after the share \
        seed, so they differ from the base only where the defect is.";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        generate::vectors()
    }

    fn check_file(vectors: &[Vector<Case>]) -> Result<(), String> {
        check_bases(
            vectors,
            |c| match c {
                Case::Reject { base, .. } => Some(*base),
                Case::Base { .. } => None,
            },
            |c| matches!(c, Case::Base { .. }),
        )
    }

    fn verify(vector: &Vector<Case>, all: &[Vector<Case>]) -> Result<(), String> {
        match &vector.case {
            Case::Base {
                request,
                keys,
                envelope,
                opened_sha256: hashes,
            } => {
                accepted_everywhere(&envelope.0, keys)?;
                expect_eq("opened_sha256", &opened_sha256(&envelope.0, keys)?, hashes)?;
                let view = EnvelopeView::parse_v2(&envelope.0).map_err(|e| e.to_string())?;
                expect_eq("request", &Request::of(view.meta()), request)
            }
            Case::Reject {
                base,
                length,
                patches,
                party: p,
                node,
                parse,
                signature,
                open,
                intake: reason,
            } => {
                let (keys, envelope) = base_of(all, *base)?;
                let bytes = apply(&envelope.0, *length, patches)?;
                let got = stages(&bytes, *p, keys)?;
                expect_eq("parse", &got.0, parse)?;
                expect_eq("signature", &got.1, signature)?;
                expect_eq("open", &got.2, open)?;
                expect_eq("intake", &intake(&bytes, *p, *node, keys)?, reason)?;
                if vector.flags.contains(&Flag::ValidSignature) {
                    expect_eq("valid signature", &got.1, &Some(Outcome::Accept))?;
                }
                Ok(())
            }
        }
    }
}

/// The bytes of `vector`: a base's envelope, or a rejection's patched input.
///
/// # Errors
/// A dangling base or a patch past the length.
pub fn input(vector: &Vector<Case>, all: &[Vector<Case>]) -> Result<Vec<u8>, String> {
    match &vector.case {
        Case::Base { envelope, .. } => Ok(envelope.0.clone()),
        Case::Reject {
            base,
            length,
            patches,
            ..
        } => apply(&base_of(all, *base)?.1 .0, *length, patches),
    }
}

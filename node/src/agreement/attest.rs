//! Batch attestations: no node signs or applies an outcome it has not computed itself in the
//! MPC, or seen signed by both other nodes for that exact batch.
//!
//! Each node, once it has evaluated a batch, signs a canonical digest of what the batch
//! decided (batch id, attempt, next serial id, the requests run with the envelope digests it
//! holds, the outcomes it opened, and the timed-out, digest-mismatch, unopenable and quarantined
//! items with their reporters) with its result key, in a domain of its own (`ocelli/v1/batch`). Peers return theirs in the commit ack;
//! party 0 applies the batch and finalises it at the peers only with all three, and every
//! node keeps all three in its batch log. Recorded outcomes (the finalising commit, a replay, a
//! fetched batch) are applied only with valid signatures of both other parties, checked with
//! their pinned keys: one node, party 0 included, cannot make another sign an outcome the MPC
//! did not open.
//!
//! A node attests at most one digest per attempt at a batch, records it durably before the
//! signature leaves ([`crate::store::Attestation`]), attests no attempt older than the one it
//! recorded, and applies only the digest it recorded. Applying needs all three attestations
//! of one digest, and a node that applied a batch attests nothing else for it, so two
//! different outcomes of one batch can never both be applied: a coordinator that shows two
//! peers two commits gets at most one of them applied, or none.

use prost::Message;
use sdk_orb::PartyId;
use sha2::{Digest, Sha256};
use shared_proto::v1::{BatchCommit, BatchItem, BatchSignature, RecordedOutcome};

use crate::keys::batch_signing_message;
use crate::node::NodeState;

const DIGEST_DOMAIN: &[u8] = b"ocelli/v2/batch-digest";
/// The digest of batch log entries written before attempts existed (attempt 0).
const DIGEST_DOMAIN_V1: &[u8] = b"ocelli/v1/batch-digest";

/// The digest a batch attestation signs (see `BatchSignature` in node.proto).
/// `envelope_digests` are the digests this node holds for `commit.request_ids`, in order.
pub fn batch_digest(
    commit: &BatchCommit,
    envelope_digests: &[Vec<u8>],
    outcomes: &[RecordedOutcome],
) -> [u8; 32] {
    let mut h = Sha256::new();
    if commit.attempt == 0 {
        h.update(DIGEST_DOMAIN_V1);
        h.update(commit.batch_id.to_be_bytes());
    } else {
        h.update(DIGEST_DOMAIN);
        h.update(commit.batch_id.to_be_bytes());
        h.update(commit.attempt.to_be_bytes());
    }
    h.update(commit.next_serial_id.to_be_bytes());
    let bytes = |h: &mut Sha256, b: &[u8]| {
        h.update(u32::try_from(b.len()).unwrap_or(u32::MAX).to_be_bytes());
        h.update(b);
    };
    let count =
        |h: &mut Sha256, n: usize| h.update(u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes());
    count(&mut h, commit.request_ids.len());
    for (i, id) in commit.request_ids.iter().enumerate() {
        bytes(&mut h, id);
        bytes(
            &mut h,
            envelope_digests.get(i).map_or(&[][..], Vec::as_slice),
        );
    }
    count(&mut h, outcomes.len());
    for o in outcomes {
        bytes(&mut h, &o.encode_to_vec());
    }
    let with_reporters = commit.attempt != 0;
    let items = |h: &mut Sha256, list: &[BatchItem]| {
        count(h, list.len());
        for item in list {
            bytes(h, &item.request_id);
            bytes(h, &item.envelope_digest);
            if with_reporters {
                h.update(item.reported_by.to_be_bytes());
            }
        }
    };
    items(&mut h, &commit.timed_out);
    items(&mut h, &commit.digest_mismatch);
    items(&mut h, &commit.unopenable);
    // Absent from commits without quarantined requests: their digests stay as they were.
    if !commit.quarantined.is_empty() {
        items(&mut h, &commit.quarantined);
    }
    h.finalize().into()
}

/// The attempt at batch `batch_id` this node last attested (0: none).
///
/// # Errors
/// The store.
pub(crate) fn attested_attempt(
    state: &NodeState,
    batch_id: u64,
) -> Result<u32, crate::store::StoreError> {
    Ok(state
        .store
        .attestation()?
        .filter(|a| a.batch_id == batch_id)
        .map_or(0, |a| a.attempt))
}

/// This node's attestation of `digest`.
pub(crate) fn sign(state: &NodeState, digest: &[u8; 32]) -> BatchSignature {
    BatchSignature {
        party_id: u32::from(state.signer.party().get()),
        signature: state.signer.sign_batch(digest).to_vec(),
    }
}

/// Whether `sig` is a valid attestation of `digest` by a party other than this node, by one of
/// that party's pinned keys (its current one, or one from before a rotation).
pub(crate) fn valid_peer_signature(
    state: &NodeState,
    sig: &BatchSignature,
    digest: &[u8; 32],
) -> bool {
    let Ok(party) = PartyId::try_from(sig.party_id) else {
        return false;
    };
    let Some(keys) = state.peer_result_keys.get(&party) else {
        return false;
    };
    let Ok(s) = ed25519_dalek::Signature::from_slice(&sig.signature) else {
        return false;
    };
    let message = batch_signing_message(party, digest);
    keys.iter()
        .any(|key| key.verify_strict(&message, &s).is_ok())
}

/// The valid attestations of `digest` by both other parties, or the first party whose is
/// missing or invalid.
pub(crate) fn by_both_others(
    state: &NodeState,
    signatures: &[BatchSignature],
    digest: &[u8; 32],
) -> Result<Vec<BatchSignature>, PartyId> {
    let mut out = Vec::new();
    for party in crate::ids::others(state.party) {
        match signatures.iter().find(|s| {
            PartyId::try_from(s.party_id) == Ok(party) && valid_peer_signature(state, s, digest)
        }) {
            Some(s) => out.push(s.clone()),
            None => return Err(party),
        }
    }
    Ok(out)
}

/// Adds to `into` the signatures of `from` it lacks (validity is checked where they are used).
pub(crate) fn merge(into: &mut Vec<BatchSignature>, from: &[BatchSignature]) {
    for s in from {
        if !into.contains(s) {
            into.push(s.clone());
        }
    }
}

//! Applying a committed batch on one node: evaluate, assign serial ids,
//! sign, persist atomically, then update memory and publish results.

use std::collections::HashMap;
use std::sync::Arc;

use prost::Message;
use sha2::{Digest, Sha256};
use shared_proto::v1::{BatchCommit, NodeResult, RequestType, ResultStatus, SignedResult};

use shared_proto::v1::recorded_outcome::Kind;
use shared_proto::v1::RecordedOutcome;

use super::{EvalContext, EvalRequest, Outcome};
use crate::ids::{EnvelopeDigest, RequestId, SerialId};
use crate::node::{now_ms, NodeState};
use crate::store::{BatchWrite, FinalWrite, RequestRecord, RequestState, ShareWrite, StoreError};

/// Why a commit could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// This node has not applied the previous batch yet.
    #[error("behind: last applied batch is {last_applied}")]
    Behind {
        /// The last batch this node applied.
        last_applied: u64,
    },
    /// The serial counters disagree.
    #[error("serial id mismatch: this node would assign {ours}, the commit says {theirs}")]
    SerialMismatch {
        /// This node's next serial id.
        ours: u64,
        /// The commit's.
        theirs: u64,
    },
    /// Storage failed; nothing was applied.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The blocking task failed.
    #[error("apply task failed")]
    Join,
    /// The evaluation failed (a peer went away); nothing was applied.
    #[error("evaluation failed: {0}")]
    Evaluation(String),
    /// A replayed commit's recorded outcomes do not fit its requests.
    #[error("recorded outcomes do not match the batch: {0}")]
    Recorded(String),
}

const NOT_EVALUATED_DETAIL: &str =
    "not evaluated: no matching pipeline is configured; nothing was enrolled or changed";

fn result(
    id: &RequestId,
    digest: &[u8],
    status: ResultStatus,
    batch_id: u64,
    detail: &str,
) -> NodeResult {
    NodeResult {
        version: 1,
        request_id: id.0.to_vec(),
        envelope_digest: digest.to_vec(),
        status: status as i32,
        batch_id,
        serial_id: 0,
        matched_serial_ids: Vec::new(),
        detail: detail.to_owned(),
    }
}

/// Applies a committed batch on this node: evaluates, assigns serial ids,
/// signs and durably stores the results. Idempotent for batches already
/// applied. Returns the SHA-256 over the batch's encoded results.
///
/// # Errors
/// [`ApplyError`]; nothing is stored then.
pub async fn apply_commit(
    state: &Arc<NodeState>,
    commit: BatchCommit,
) -> Result<[u8; 32], ApplyError> {
    let guard = state.apply_lock.clone().lock_owned().await;
    let st = state.clone();
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let _guard = guard;
        apply_blocking(&st, &commit, runtime)
    })
    .await
    .map_err(|_| ApplyError::Join)?
}

fn apply_blocking(
    state: &Arc<NodeState>,
    commit: &BatchCommit,
    runtime: tokio::runtime::Handle,
) -> Result<[u8; 32], ApplyError> {
    let store = &state.store;
    let meta = store.meta()?;
    if commit.batch_id <= meta.last_applied_batch {
        if let Some(b) = store.batch(commit.batch_id)? {
            return Ok(b.results_digest);
        }
    }
    if commit.batch_id != meta.last_applied_batch + 1 {
        return Err(ApplyError::Behind {
            last_applied: meta.last_applied_batch,
        });
    }
    if commit.next_serial_id != meta.next_serial {
        return Err(ApplyError::SerialMismatch {
            ours: meta.next_serial,
            theirs: commit.next_serial_id,
        });
    }
    let batch_id = commit.batch_id;

    // Gather the committed requests this node holds.
    let mut eval = Vec::new();
    let mut held: Vec<(RequestId, RequestRecord)> = Vec::new();
    let mut missing: Vec<(RequestId, Vec<u8>)> = Vec::new();
    for raw in &commit.request_ids {
        let Some(id) = RequestId::from_slice(raw) else {
            continue;
        };
        let rec = store.request(&id)?;
        let env = store.envelope(&id)?;
        match (rec, env) {
            (Some(rec), Some(env)) if rec.state() == Some(RequestState::Pending) => {
                match state.intake.reopen(&env) {
                    Ok(shares) => {
                        eval.push(EvalRequest {
                            id,
                            request_type: RequestType::try_from(rec.request_type)
                                .unwrap_or(RequestType::Unspecified),
                            serial_id: SerialId(rec.serial_id),
                            or_policy: rec.or_policy,
                            shares,
                        });
                        held.push((id, rec));
                    }
                    Err(e) => {
                        tracing::error!(request_id = %id, error = %e.message, "stored envelope no longer opens");
                        missing.push((id, rec.digest));
                    }
                }
            }
            (rec, _) => {
                tracing::error!(request_id = %id, batch_id, "committed request is not pending here");
                missing.push((id, rec.map(|r| r.digest).unwrap_or_default()));
            }
        }
    }

    let outcomes = if commit.outcomes_recorded {
        if commit.outcomes.len() != eval.len() {
            return Err(ApplyError::Recorded(format!(
                "{} outcomes for {} requests",
                commit.outcomes.len(),
                eval.len()
            )));
        }
        commit.outcomes.iter().map(outcome_from_record).collect()
    } else {
        let db = state.shares();
        let ctx = EvalContext {
            state,
            batch_id,
            session: commit.mpc_session,
            runtime,
        };
        let started = std::time::Instant::now();
        let o = state
            .evaluator
            .evaluate(&ctx, &eval, &db)
            .map_err(ApplyError::Evaluation)?;
        if o.len() != eval.len() {
            return Err(ApplyError::Evaluation(format!(
                "{} returned {} outcomes for {} requests",
                state.evaluator.name(),
                o.len(),
                eval.len()
            )));
        }
        state
            .metrics
            .evaluation_seconds
            .observe(started.elapsed().as_secs_f64());
        o
    };
    let mut recorded_commit = commit.clone();
    recorded_commit.outcomes_recorded = true;
    recorded_commit.outcomes = outcomes.iter().map(record_outcome).collect();

    // Turn outcomes into results and share changes, in commit order.
    let mut next_serial = meta.next_serial;
    let mut exists: HashMap<SerialId, bool> = HashMap::new();
    let mut share_writes = Vec::new();
    let mut results: Vec<(RequestId, RequestRecord, NodeResult)> = Vec::new();
    let db = state.shares();
    let mut enrolled_at: HashMap<usize, SerialId> = HashMap::new();
    for (position, ((req, (id, rec)), outcome)) in
        eval.into_iter().zip(held).zip(outcomes).enumerate()
    {
        let mut r = result(&id, &rec.digest, ResultStatus::NotEvaluated, batch_id, "");
        let target = req.serial_id;
        let present = *exists.get(&target).unwrap_or(&db.contains(target));
        use RequestType as T;
        match (req.request_type, outcome) {
            (_, Outcome::NotEvaluated) => r.detail = NOT_EVALUATED_DETAIL.to_owned(),
            (T::Uniqueness, Outcome::Unique) => {
                let s = SerialId(next_serial);
                next_serial += 1;
                r.status = ResultStatus::UniqueEnrolled as i32;
                r.serial_id = s.0;
                r.detail = "unique; enrolled".to_owned();
                exists.insert(s, true);
                enrolled_at.insert(position, s);
                share_writes.push((s, ShareWrite::Put(req.shares)));
            }
            (T::UniquenessCheck, Outcome::Unique) => {
                r.status = ResultStatus::Unique as i32;
                r.detail = "unique".to_owned();
            }
            (T::Uniqueness | T::UniquenessCheck, Outcome::Match { entries, earlier }) => {
                r.status = ResultStatus::Match as i32;
                let mut ids: Vec<u64> = entries.iter().map(|s| s.0).collect();
                ids.extend(
                    earlier
                        .iter()
                        .filter_map(|k| enrolled_at.get(k))
                        .map(|s| s.0),
                );
                ids.sort_unstable();
                ids.dedup();
                r.detail = match (entries.is_empty(), earlier.is_empty()) {
                    (true, true) => "matched (privacy-max: which entries is not revealed)",
                    (false, true) => "matched enrolled entries",
                    (true, false) => "matched an earlier request of the same batch",
                    (false, false) => "matched enrolled entries and earlier requests of the batch",
                }
                .to_owned();
                r.matched_serial_ids = ids;
            }
            (T::Reauth, _) if !present => {
                r.serial_id = target.0;
                r.status = ResultStatus::UnknownSerialId as i32;
                r.detail = "no such serial id".to_owned();
            }
            (T::Reauth, Outcome::Reauth(ok)) => {
                r.serial_id = target.0;
                r.status = if ok {
                    ResultStatus::ReauthMatch
                } else {
                    ResultStatus::ReauthNoMatch
                } as i32;
            }
            (T::Deletion | T::Reset, Outcome::Apply) if !present => {
                r.serial_id = target.0;
                r.status = ResultStatus::UnknownSerialId as i32;
                r.detail = "no such serial id".to_owned();
            }
            (T::Deletion, Outcome::Apply) => {
                r.serial_id = target.0;
                r.status = ResultStatus::Deleted as i32;
                r.detail = "shares overwritten and removed".to_owned();
                exists.insert(target, false);
                share_writes.push((target, ShareWrite::Delete));
            }
            (T::Reset, Outcome::Apply) => {
                r.serial_id = target.0;
                r.status = ResultStatus::Reset as i32;
                r.detail = "shares replaced".to_owned();
                share_writes.push((target, ShareWrite::Put(req.shares)));
            }
            (_, _) => r.detail = NOT_EVALUATED_DETAIL.to_owned(),
        }
        results.push((id, rec, r));
    }
    drop(db);
    let timed_out_detail = "timed out: not held by all three nodes with the same digest in time";
    for (id, digest) in missing {
        let r = result(
            &id,
            &digest,
            ResultStatus::TimedOut,
            batch_id,
            timed_out_detail,
        );
        results.push((id, placeholder_record(&digest), r));
    }
    for item in &commit.timed_out {
        if let Some(id) = RequestId::from_slice(&item.request_id) {
            let r = result(
                &id,
                &item.envelope_digest,
                ResultStatus::TimedOut,
                batch_id,
                timed_out_detail,
            );
            results.push((id, placeholder_record(&item.envelope_digest), r));
        }
    }
    for item in &commit.digest_mismatch {
        if let Some(id) = RequestId::from_slice(&item.request_id) {
            let r = result(
                &id,
                &item.envelope_digest,
                ResultStatus::DigestMismatch,
                batch_id,
                "the nodes received different envelopes under this request id",
            );
            results.push((id, placeholder_record(&item.envelope_digest), r));
        }
    }

    // Sign, keep already-final entries untouched, digest, write.
    let mut h = Sha256::new();
    let mut finals = Vec::new();
    let mut signed = Vec::new();
    for (id, rec, r) in results {
        let existing = store.request(&id)?;
        if existing.as_ref().and_then(RequestRecord::state) == Some(RequestState::Final) {
            tracing::warn!(request_id = %id, batch_id, "request already final here; keeping its result");
            if let Some(b) = store.result(&id)? {
                if let Ok(s) = SignedResult::decode(b.as_slice()) {
                    h.update((s.result.len() as u64).to_le_bytes());
                    h.update(&s.result);
                }
            }
            continue;
        }
        let mut record = existing.unwrap_or(rec);
        record.state = RequestState::Final as u32;
        record.batch_id = batch_id;
        let s = sign_result(state, &r);
        h.update((s.result.len() as u64).to_le_bytes());
        h.update(&s.result);
        state
            .metrics
            .results
            .with_label_values(&[status_label(r.status)])
            .inc();
        finals.push(FinalWrite {
            id,
            record,
            signed_result: s.encode_to_vec(),
        });
        signed.push((id, s));
    }
    let results_digest: [u8; 32] = h.finalize().into();
    let write = BatchWrite {
        batch: Some((batch_id, recorded_commit.encode_to_vec(), results_digest)),
        finals,
        shares: share_writes,
        next_serial,
    };
    store.apply_batch(&write)?;
    finish_in_memory(state, &write, signed);
    state
        .metrics
        .last_batch
        .set(i64::try_from(batch_id).unwrap_or(i64::MAX));
    Ok(results_digest)
}

fn record_outcome(o: &Outcome) -> RecordedOutcome {
    let (kind, entries, earlier): (Kind, &[SerialId], &[usize]) = match o {
        Outcome::NotEvaluated => (Kind::NotEvaluated, &[], &[]),
        Outcome::Unique => (Kind::Unique, &[], &[]),
        Outcome::Match { entries, earlier } => (Kind::Match, entries, earlier),
        Outcome::Reauth(true) => (Kind::ReauthMatch, &[], &[]),
        Outcome::Reauth(false) => (Kind::ReauthNoMatch, &[], &[]),
        Outcome::Apply => (Kind::Apply, &[], &[]),
    };
    RecordedOutcome {
        kind: kind as i32,
        matched_serial_ids: entries.iter().map(|s| s.0).collect(),
        matched_earlier: earlier
            .iter()
            .map(|&k| u32::try_from(k).unwrap_or(u32::MAX))
            .collect(),
    }
}

fn outcome_from_record(r: &RecordedOutcome) -> Outcome {
    match Kind::try_from(r.kind).unwrap_or(Kind::Unspecified) {
        Kind::Unique => Outcome::Unique,
        Kind::Match => Outcome::Match {
            entries: r.matched_serial_ids.iter().map(|&s| SerialId(s)).collect(),
            earlier: r.matched_earlier.iter().map(|&k| k as usize).collect(),
        },
        Kind::ReauthMatch => Outcome::Reauth(true),
        Kind::ReauthNoMatch => Outcome::Reauth(false),
        Kind::Apply => Outcome::Apply,
        Kind::NotEvaluated | Kind::Unspecified => Outcome::NotEvaluated,
    }
}

fn placeholder_record(digest: &[u8]) -> RequestRecord {
    RequestRecord {
        state: RequestState::Final as u32,
        digest: digest.to_vec(),
        received_ms: 0,
        request_type: 0,
        serial_id: 0,
        or_policy: false,
        batch_id: 0,
    }
}

/// Encodes and signs a result.
pub(crate) fn sign_result(state: &NodeState, r: &NodeResult) -> SignedResult {
    let bytes = r.encode_to_vec();
    let sig = state.signer.sign(&bytes);
    SignedResult {
        result: bytes,
        party_id: u32::from(state.party),
        signature: sig.to_vec(),
    }
}

/// Updates memory after a durable write and publishes the results.
pub(crate) fn finish_in_memory(
    state: &NodeState,
    write: &BatchWrite,
    signed: Vec<(RequestId, SignedResult)>,
) {
    {
        let mut q = state.queue();
        for f in &write.finals {
            q.remove(&f.id);
        }
        state
            .metrics
            .pending
            .set(i64::try_from(q.len()).unwrap_or(i64::MAX));
    }
    {
        let mut db = state.shares_mut();
        for (serial, w) in &write.shares {
            match w {
                ShareWrite::Put(s) => db.put(*serial, s.clone()),
                ShareWrite::Delete => db.remove(*serial),
            }
        }
        state
            .metrics
            .enrolled
            .set(i64::try_from(db.len()).unwrap_or(i64::MAX));
    }
    state
        .metrics
        .store_bytes
        .set(i64::try_from(state.store.size_bytes()).unwrap_or(i64::MAX));
    for (_, s) in signed {
        let _ = state.results_tx.send(Arc::new(s));
    }
}

/// Finalises, on this node alone, pending requests that no batch took
/// within `2 x request_timeout` (parties 1 and 2; party 0 times requests
/// out through its batches).
///
/// # Errors
/// Storage failure.
pub async fn sweep_expired(state: &Arc<NodeState>) -> Result<usize, ApplyError> {
    let guard = state.apply_lock.clone().lock_owned().await;
    let st = state.clone();
    tokio::task::spawn_blocking(move || {
        let _guard = guard;
        let timeout = st.config.batch.request_timeout_ms.saturating_mul(2);
        let cutoff = now_ms().saturating_sub(timeout);
        let expired = st.queue().expired(cutoff);
        if expired.is_empty() {
            return Ok(0);
        }
        let meta = st.store.meta()?;
        let mut finals = Vec::new();
        let mut signed = Vec::new();
        for c in &expired {
            let Some(mut record) = st.store.request(&c.id)? else {
                continue;
            };
            record.state = RequestState::Final as u32;
            let r = result(
                &c.id,
                &c.digest.0,
                ResultStatus::TimedOut,
                0,
                "timed out: never proposed in a batch",
            );
            let s = sign_result(&st, &r);
            st.metrics
                .results
                .with_label_values(&[status_label(r.status)])
                .inc();
            finals.push(FinalWrite {
                id: c.id,
                record,
                signed_result: s.encode_to_vec(),
            });
            signed.push((c.id, s));
        }
        let n = finals.len();
        let write = BatchWrite {
            batch: None,
            finals,
            shares: Vec::new(),
            next_serial: meta.next_serial,
        };
        st.store.apply_batch(&write)?;
        finish_in_memory(&st, &write, signed);
        tracing::info!(count = n, "pending requests timed out locally");
        Ok(n)
    })
    .await
    .map_err(|_| ApplyError::Join)?
}

/// The metrics label of a result status.
pub fn status_label(status: i32) -> &'static str {
    match ResultStatus::try_from(status) {
        Ok(ResultStatus::NotEvaluated) => "not_evaluated",
        Ok(ResultStatus::UniqueEnrolled) => "unique_enrolled",
        Ok(ResultStatus::Unique) => "unique",
        Ok(ResultStatus::Match) => "match",
        Ok(ResultStatus::Deleted) => "deleted",
        Ok(ResultStatus::Reset) => "reset",
        Ok(ResultStatus::ReauthMatch) => "reauth_match",
        Ok(ResultStatus::ReauthNoMatch) => "reauth_no_match",
        Ok(ResultStatus::TimedOut) => "timed_out",
        Ok(ResultStatus::UnknownSerialId) => "unknown_serial_id",
        Ok(ResultStatus::DigestMismatch) => "digest_mismatch",
        _ => "unspecified",
    }
}

/// Digest type used in votes (re-exported for the coordinator).
pub(crate) fn digest_of(b: &[u8]) -> Option<EnvelopeDigest> {
    EnvelopeDigest::from_slice(b)
}

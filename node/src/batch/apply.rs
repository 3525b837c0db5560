//! Applying a committed batch on one node: evaluate, assign serial ids,
//! sign, persist atomically, then update memory and publish results.

use std::sync::Arc;

use prost::Message;
use sha2::{Digest, Sha256};
use shared_proto::v1::{BatchCommit, NodeResult, ResultStatus, SignedResult};

use super::plan::{
    check_commit, committed_ids, eval_request, plan, record_outcome, recorded_outcomes, result,
    Planned,
};
use super::EvalContext;
use crate::ids::{EnvelopeDigest, RequestId};
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
    /// The commit names a request more than once (to run, as timed out or
    /// as a digest mismatch); party 0 never does.
    #[error("the commit names request {0} more than once")]
    RepeatedRequest(RequestId),
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
    check_commit(commit, &meta)?;
    let batch_id = commit.batch_id;

    // Gather the committed requests this node holds.
    let mut eval = Vec::new();
    let mut held: Vec<(RequestId, RequestRecord)> = Vec::new();
    let mut missing: Vec<(RequestId, Vec<u8>)> = Vec::new();
    for id in committed_ids(commit) {
        let rec = store.request(&id)?;
        let env = store.envelope(&id)?;
        match (rec, env) {
            (Some(rec), Some(env)) if rec.state() == Some(RequestState::Pending) => {
                match state.intake.reopen(&env) {
                    Ok(shares) => {
                        eval.push(eval_request(id, &rec, shares));
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
        recorded_outcomes(commit, eval.len())?
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

    let db = state.shares();
    let Planned {
        results,
        shares: share_writes,
        next_serial,
    } = plan(
        commit,
        meta.next_serial,
        eval,
        held,
        outcomes,
        missing,
        |s| db.contains(s),
    );
    drop(db);

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

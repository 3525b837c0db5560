//! A committed batch on one node, in two steps. [`evaluate_commit`] runs the MPC and signs
//! what it opened, storing only its attestation; [`apply_commit`] applies outcomes attested by
//! all three nodes, this one included: it assigns serial ids, signs the results and persists
//! them atomically, then updates memory and publishes the results.
//!
//! Nothing is applied on one node's own evaluation: the MPC can complete on one node and fail
//! on the others (a party dies after its last message reached one peer but not the other), and
//! outcomes only one node holds could never be attested to the other two. A batch is applied
//! only once all three have signed it, so any node that applied it can bring the others up to
//! it, and a batch nobody applied simply runs again.

use std::sync::Arc;

use prost::Message;
use sha2::{Digest, Sha256};
use shared_proto::v1::{BatchCommit, BatchSignature, NodeResult, ResultStatus, SignedResult};

use super::attest;

use crate::batch::plan::{
    check_commit, check_items, committed_ids, eval_request, plan, record_outcome,
    recorded_outcomes, HeldHere, Planned,
};
use crate::batch::{ApplyError, EvalContext, EvalError, EvalRequest, Outcome};
use crate::counting::batch::{count_words, StatsSlot};
use crate::ids::{EnvelopeDigest, RequestId, SerialId};
use crate::node::NodeState;
use crate::store::period::{StatsPeriod, StatsWrite};
use crate::store::{Attestation, BatchWrite, FinalWrite, RequestRecord, RequestState, ShareWrite};

/// What applying a batch gave: what the node answers party 0 in its ack.
#[derive(Clone, Debug)]
pub struct Applied {
    /// SHA-256 over the batch's encoded results, in commit order.
    pub results_digest: [u8; 32],
    /// The batch digest this node attested (see [`BatchSignature`]).
    pub batch_digest: [u8; 32],
    /// This node's attestation of it.
    pub signature: BatchSignature,
}

/// What evaluating a batch gave; nothing of it is stored.
#[derive(Clone, Debug)]
pub struct Evaluated {
    /// The commit with the outcomes this node computed (`outcomes_recorded`) and its own
    /// attestation as the only signature.
    pub recorded: BatchCommit,
    /// The batch digest this node attested.
    pub batch_digest: [u8; 32],
    /// This node's attestation of it.
    pub signature: BatchSignature,
}

/// Evaluates a fresh commit on this node (the three-party matching runs with the peers) and
/// signs the outcomes it opened, once per attempt: an attempt not newer than the last one
/// this node attested for the batch is refused ([`ApplyError::StaleAttempt`]), and the
/// attestation is recorded durably before it is returned; nothing else is stored. The batch
/// is applied by [`apply_commit`] once both other nodes' attestations of the same outcomes are
/// in. For a batch this node already applied, answers with the logged outcomes.
///
/// # Errors
/// [`ApplyError`]: out of sequence, a commit that claims recorded outcomes, storage, or a
/// failed evaluation.
pub async fn evaluate_commit(
    state: &Arc<NodeState>,
    commit: BatchCommit,
) -> Result<Evaluated, ApplyError> {
    let guard = state.apply_lock.clone().lock_owned().await;
    let st = state.clone();
    let runtime = tokio::runtime::Handle::current();
    // A panic stays in this task: what it held (links, buffers, the lock) is dropped, and the
    // node goes on with the next round.
    tokio::task::spawn_blocking(move || {
        let _guard = guard;
        evaluate_blocking(&st, &commit, runtime)
    })
    .await
    .map_err(|e| {
        if e.is_panic() {
            tracing::error!("batch evaluation panicked; the batch is aborted");
            ApplyError::Panicked
        } else {
            ApplyError::Join
        }
    })?
}

fn evaluate_blocking(
    state: &Arc<NodeState>,
    commit: &BatchCommit,
    runtime: tokio::runtime::Handle,
) -> Result<Evaluated, ApplyError> {
    if commit.outcomes_recorded {
        return Err(ApplyError::Recorded(
            "a commit to evaluate carries recorded outcomes".to_owned(),
        ));
    }
    let meta = state.store.meta()?;
    if commit.batch_id <= meta.last_applied_batch {
        if let Some(b) = state.store.batch(commit.batch_id)? {
            let logged = logged_commit(commit.batch_id, &b)?;
            let applied = already_applied(state, &logged, &b)?;
            let mut recorded = logged;
            recorded.signatures = vec![applied.signature.clone()];
            return Ok(Evaluated {
                recorded,
                batch_digest: applied.batch_digest,
                signature: applied.signature,
            });
        }
    }
    check_commit(commit, &meta)?;
    let attested = attest::attested_attempt(state, commit.batch_id)?;
    if commit.attempt <= attested {
        tracing::warn!(
            batch_id = commit.batch_id,
            attempt = commit.attempt,
            attested,
            "refused a commit attempt not newer than the one attested"
        );
        state.metrics.batch("refused_stale_attempt");
        return Err(ApplyError::StaleAttempt {
            batch_id: commit.batch_id,
            attempt: commit.attempt,
            attested,
        });
    }
    check_evidence(state, commit)?;
    let envelope_digests = committed_digests(state, commit)?;
    let held = read_committed(state, commit)?;
    let outcomes = evaluate(state, commit, &held.eval, runtime)?;
    let mut recorded = commit.clone();
    recorded.outcomes_recorded = true;
    recorded.outcomes = outcomes.iter().map(record_outcome).collect();
    let batch_digest = attest::batch_digest(commit, &envelope_digests, &recorded.outcomes);
    // Durable before the signature leaves: after a restart this node still knows which
    // outcomes of the batch it vouched for.
    state.store.record_attestation(&Attestation {
        batch_id: commit.batch_id,
        attempt: commit.attempt,
        digest: batch_digest,
    })?;
    let signature = attest::sign(state, &batch_digest);
    recorded.signatures = vec![signature.clone()];
    Ok(Evaluated {
        recorded,
        batch_digest,
        signature,
    })
}

/// Applies a batch's recorded outcomes on this node once it holds valid attestations of them
/// by both other parties and they are the outcomes this node itself attested for that attempt
/// (every node computed them in the MPC): assigns serial ids, signs and durably stores the
/// results and the batch log entry with all three attestations. Idempotent for batches
/// already applied.
///
/// # Errors
/// [`ApplyError`]; nothing is stored then. Recorded outcomes without both other parties'
/// valid attestations are [`ApplyError::Unattested`] (`ocelli_batches_total{outcome=
/// "refused_unattested"}`), and outcomes this node did not attest itself
/// [`ApplyError::NotAttestedHere`] (`outcome="refused_not_attested_here"`); both are logged.
pub async fn apply_commit(
    state: &Arc<NodeState>,
    commit: BatchCommit,
) -> Result<Applied, ApplyError> {
    let guard = state.apply_lock.clone().lock_owned().await;
    let st = state.clone();
    tokio::task::spawn_blocking(move || {
        let _guard = guard;
        apply_blocking(&st, &commit)
    })
    .await
    .map_err(|_| ApplyError::Join)?
}

fn apply_blocking(state: &Arc<NodeState>, commit: &BatchCommit) -> Result<Applied, ApplyError> {
    let meta = state.store.meta()?;
    if commit.batch_id <= meta.last_applied_batch {
        if let Some(b) = state.store.batch(commit.batch_id)? {
            return already_applied(state, &logged_commit(commit.batch_id, &b)?, &b);
        }
    }
    if !commit.outcomes_recorded {
        return Err(ApplyError::Recorded(
            "a commit to apply carries no recorded outcomes".to_owned(),
        ));
    }
    check_commit(commit, &meta)?;
    let envelope_digests = committed_digests(state, commit)?;
    let digest = attest::batch_digest(commit, &envelope_digests, &commit.outcomes);
    let mut signatures = match attest::by_both_others(state, &commit.signatures, &digest) {
        Ok(valid) => valid,
        Err(party) => {
            tracing::error!(
                batch_id = commit.batch_id,
                party = party.get(),
                "refused outcomes not attested by both other nodes"
            );
            state.metrics.batch("refused_unattested");
            return Err(ApplyError::Unattested {
                batch_id: commit.batch_id,
                party,
            });
        }
    };
    let own_attestation = Attestation {
        batch_id: commit.batch_id,
        attempt: commit.attempt,
        digest,
    };
    if state.store.attestation()? != Some(own_attestation) {
        tracing::error!(
            batch_id = commit.batch_id,
            attempt = commit.attempt,
            "refused outcomes this node did not attest (a coordinator showing the peers different commits, or a superseded attempt)"
        );
        state.metrics.batch("refused_not_attested_here");
        return Err(ApplyError::NotAttestedHere {
            batch_id: commit.batch_id,
            attempt: commit.attempt,
        });
    }
    let held = read_committed(state, commit)?;
    let outcomes = recorded_outcomes(commit, held.eval.len())?;
    let own = attest::sign(state, &digest);
    signatures.push(own.clone());
    let mut logged = commit.clone();
    logged.signatures = signatures;

    let db = state.shares();
    let Planned {
        results,
        shares,
        next_serial,
    } = plan(
        commit,
        meta.next_serial,
        held.eval,
        held.records,
        outcomes,
        held.missing,
        |s| db.contains(s),
    );
    drop(db);

    let mut finals = Finals::default();
    for (id, rec, r) in results {
        let existing = state.store.request(&id)?;
        if existing.as_ref().and_then(RequestRecord::state) == Some(RequestState::Final) {
            tracing::warn!(request_id = %id, batch_id = commit.batch_id, "request already final here; keeping its result");
            if let Some(b) = state.store.result(&id)? {
                finals.keep(&b);
            }
            continue;
        }
        finals.sign(
            state,
            id,
            existing.unwrap_or(rec),
            &r,
            Some(commit.batch_id),
        );
    }
    let batch = (commit.batch_id, logged.encode_to_vec());
    let stats = counted_stats(state, commit);
    let results_digest = write(state, Some(batch), finals, shares, next_serial, stats)?;
    state
        .metrics
        .last_batch
        .set(i64::try_from(commit.batch_id).unwrap_or(i64::MAX));
    state.health.committed();
    Ok(Applied {
        results_digest,
        batch_digest: digest,
        signature: own,
    })
}

/// Refuses a commit whose timed-out, digest-mismatch or unopenable items this node's own
/// evidence contradicts (see [`check_items`]); logged and counted as
/// `ocelli_batches_total{outcome="refused_unfounded"}`.
fn check_evidence(state: &NodeState, commit: &BatchCommit) -> Result<(), ApplyError> {
    let timeout = state.config.batch.request_timeout_ms;
    // A quarter of the time-out for the nodes' clocks and arrival times to differ.
    let min_wait_ms = timeout - timeout / 4;
    let lookup = |id: &RequestId| -> Result<Option<HeldHere>, ApplyError> {
        Ok(state.store.request(id)?.map(|rec| HeldHere {
            pending: rec.state() == Some(RequestState::Pending),
            received_ms: rec.received_ms,
            digest: rec.digest,
            opens: !state.unopenable.contains(id),
        }))
    };
    let checked = check_items(
        commit,
        state.party,
        crate::clock::now_ms(),
        min_wait_ms,
        lookup,
    );
    if let Err(e) = &checked {
        tracing::error!(batch_id = commit.batch_id, error = %e, "refused a commit against this node's evidence");
        state.metrics.batch("refused_unfounded");
    }
    checked
}

/// The envelope digests this node holds for the requests a commit runs, in order (empty
/// for one it does not hold: its attestation then cannot match the others').
fn committed_digests(state: &NodeState, commit: &BatchCommit) -> Result<Vec<Vec<u8>>, ApplyError> {
    commit
        .request_ids
        .iter()
        .map(|raw| {
            Ok(match RequestId::from_slice(raw) {
                Some(id) => state
                    .store
                    .request(&id)?
                    .map(|r| r.digest)
                    .unwrap_or_default(),
                None => Vec::new(),
            })
        })
        .collect()
}

/// Batch `batch_id` as this node's batch log holds it.
fn logged_commit(batch_id: u64, b: &crate::store::StoredBatch) -> Result<BatchCommit, ApplyError> {
    BatchCommit::decode(b.commit.as_slice())
        .map_err(|_| ApplyError::Recorded(format!("batch {batch_id} in the batch log is corrupt")))
}

/// The answer for a batch already in the batch log: its results digest and this node's
/// attestation, re-derived from the logged commit.
fn already_applied(
    state: &NodeState,
    logged: &BatchCommit,
    b: &crate::store::StoredBatch,
) -> Result<Applied, ApplyError> {
    let digests = committed_digests(state, logged)?;
    let batch_digest = attest::batch_digest(logged, &digests, &logged.outcomes);
    Ok(Applied {
        results_digest: b.results_digest,
        batch_digest,
        signature: attest::sign(state, &batch_digest),
    })
}

/// The committed requests as this node holds them.
struct Held {
    /// Pending here and opened: evaluated.
    eval: Vec<EvalRequest>,
    /// Their request records, in the same order.
    records: Vec<(RequestId, RequestRecord)>,
    /// Not pending here, or no longer opening: answered without evaluation.
    missing: Vec<(RequestId, Vec<u8>)>,
}

/// The committed requests as this node holds them: the shares the pending queue kept from
/// intake, or else the stored envelope opened again.
fn read_committed(state: &NodeState, commit: &BatchCommit) -> Result<Held, ApplyError> {
    let mut held = Held {
        eval: Vec::new(),
        records: Vec::new(),
        missing: Vec::new(),
    };
    for id in committed_ids(commit) {
        let rec = state.store.request(&id)?;
        // Shares the intake kept for a pending request; otherwise its envelope opened again.
        let opened = match &rec {
            Some(rec) if rec.state() == Some(RequestState::Pending) => {
                let kept = state.queue().opened(&id);
                match kept {
                    Some(shares) => Some(Ok(shares)),
                    None => state
                        .store
                        .envelope(&id)?
                        .map(|env| state.intake.reopen(&env)),
                }
            }
            _ => None,
        };
        match (rec, opened) {
            (Some(rec), Some(Ok(shares))) => match eval_request(id, &rec, shares) {
                Some(request) => {
                    held.eval.push(request);
                    held.records.push((id, rec));
                }
                None => {
                    tracing::error!(request_id = %id, "stored request has an unknown type");
                    held.missing.push((id, rec.digest));
                }
            },
            (Some(rec), Some(Err(e))) => {
                tracing::error!(request_id = %id, error = %e.message, "stored envelope no longer opens");
                held.missing.push((id, rec.digest));
            }
            (rec, _) => {
                tracing::error!(request_id = %id, batch_id = commit.batch_id, "committed request is not pending here");
                held.missing
                    .push((id, rec.map(|r| r.digest).unwrap_or_default()));
            }
        }
    }
    Ok(held)
}

/// Runs the node's evaluator on the batch, against the database as it was before it.
fn evaluate(
    state: &NodeState,
    commit: &BatchCommit,
    eval: &[EvalRequest],
    runtime: tokio::runtime::Handle,
) -> Result<Vec<Outcome>, ApplyError> {
    let db = state.shares();
    let stats = stats_slot(state, commit)?;
    let ctx = EvalContext {
        links: &state.links,
        peers: state.peers.get(),
        metrics: &state.metrics,
        batch_id: commit.batch_id,
        session: commit.mpc_session,
        runtime,
        stats: stats.as_ref(),
    };
    let started = std::time::Instant::now();
    let outcomes = state.evaluator.evaluate(&ctx, eval, &db)?;
    let counted = stats.and_then(|s| {
        s.output
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    });
    *state
        .pending_stats
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) =
        counted.map(|w| ((commit.batch_id, commit.attempt), w));
    if outcomes.len() != eval.len() {
        return Err(ApplyError::Evaluation(EvalError::OutcomeCount {
            evaluator: state.evaluator.name(),
            outcomes: outcomes.len(),
            requests: eval.len(),
        }));
    }
    state
        .metrics
        .evaluation_seconds
        .observe(started.elapsed().as_secs_f64());
    Ok(outcomes)
}

/// What the batch's statistics start from, where they are on: the stored period, or a first
/// one beginning with this batch.
fn stats_slot(state: &NodeState, commit: &BatchCommit) -> Result<Option<StatsSlot>, ApplyError> {
    let config = &state.config.stats;
    if !config.enabled {
        return Ok(None);
    }
    let now_unix_s = commit.created_unix_s;
    let period = match state.store.stats_period()? {
        Some(p) => p,
        None => StatsPeriod::begin(
            0,
            commit.batch_id,
            now_unix_s,
            count_words(config.edges.len()),
        ),
    };
    Ok(Some(StatsSlot {
        period,
        config: config.clone(),
        threshold: state.config.matching.threshold,
        batch_id: commit.batch_id,
        now_unix_s,
        output: std::sync::Mutex::new(None),
    }))
}

/// The statistics this node counted for this attempt at the batch, if it evaluated it.
fn counted_stats(state: &NodeState, commit: &BatchCommit) -> Option<StatsWrite> {
    let mut pending = state
        .pending_stats
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match pending.take() {
        Some((key, w)) if key == (commit.batch_id, commit.attempt) => Some(w),
        other => {
            *pending = other;
            None
        }
    }
}

/// Signed results on their way to the store, and the SHA-256 over them in order.
#[derive(Default)]
struct Finals {
    writes: Vec<FinalWrite>,
    signed: Vec<(RequestId, SignedResult)>,
    digest: Sha256,
}

impl Finals {
    /// Signs `r` and finalises `record` with it (as of batch `batch_id`, if any).
    fn sign(
        &mut self,
        state: &NodeState,
        id: RequestId,
        mut record: RequestRecord,
        r: &NodeResult,
        batch_id: Option<u64>,
    ) {
        record.state = RequestState::Final as u32;
        if let Some(batch_id) = batch_id {
            record.batch_id = batch_id;
        }
        let s = sign_result(state, r);
        self.absorb(&s);
        state
            .metrics
            .results
            .with_label_values(&[status_label(r.status)])
            .inc();
        self.writes.push(FinalWrite {
            id,
            record,
            signed_result: s.encode_to_vec(),
        });
        self.signed.push((id, s));
    }

    /// Counts an already-stored signed result into the digest, leaving it as it is.
    fn keep(&mut self, stored: &[u8]) {
        if let Ok(s) = SignedResult::decode(stored) {
            self.absorb(&s);
        }
    }

    fn absorb(&mut self, s: &SignedResult) {
        self.digest.update((s.result.len() as u64).to_le_bytes());
        self.digest.update(&s.result);
    }
}

/// Writes the finals (and the batch record, if any) in one transaction, then updates memory
/// and publishes the results. Returns the results digest.
fn write(
    state: &NodeState,
    batch: Option<(u64, Vec<u8>)>,
    finals: Finals,
    shares: Vec<(SerialId, ShareWrite)>,
    next_serial: u64,
    stats: Option<StatsWrite>,
) -> Result<[u8; 32], ApplyError> {
    let results_digest: [u8; 32] = finals.digest.finalize().into();
    let write = BatchWrite {
        batch: batch.map(|(id, commit)| (id, commit, results_digest)),
        finals: finals.writes,
        shares,
        next_serial,
        stats,
    };
    state.store.apply_batch(&write)?;
    if let Some(h) = write.stats.as_ref().and_then(|s| s.opened.as_ref()) {
        tracing::info!(
            period = h.period,
            impostor_pairs = h.impostor_pairs,
            genuine_pairs = h.genuine_pairs,
            reauthentication_pairs = h.reauthentication_pairs,
            "statistics period opened"
        );
        state.metrics.record_opened_histograms(h);
    }
    finish_in_memory(state, &write, finals.signed);
    Ok(results_digest)
}

/// Encodes and signs a result.
pub(crate) fn sign_result(state: &NodeState, r: &NodeResult) -> SignedResult {
    let bytes = r.encode_to_vec();
    let sig = state.signer.sign(&bytes);
    SignedResult {
        result: bytes,
        party_id: u32::from(state.party.get()),
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
        if let Some((batch, _, _)) = &write.batch {
            db.set_applied_batch(*batch);
        }

        state
            .metrics
            .enrolled
            .set(i64::try_from(db.len()).unwrap_or(i64::MAX));
    }
    let deleted: Vec<u64> = (write.shares.iter())
        .filter(|(_, w)| matches!(w, ShareWrite::Delete))
        .map(|(s, _)| s.0)
        .collect();
    if !deleted.is_empty() {
        crate::node::forget_in_snapshot(state, &deleted);
    }
    state
        .metrics
        .store_bytes
        .set(i64::try_from(state.store.size_bytes()).unwrap_or(i64::MAX));
    for (_, s) in signed {
        let _ = state.results_tx.send(Arc::new(s));
    }
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
        Ok(ResultStatus::Unopenable) => "unopenable",
        Ok(ResultStatus::MirrorAttack) => "mirror_attack",
        Ok(ResultStatus::MalformedShares) => "malformed_shares",
        Ok(ResultStatus::Quarantined) => "quarantined",
        _ => "unspecified",
    }
}

/// Digest type used in votes (re-exported for the coordinator).
pub(crate) fn digest_of(b: &[u8]) -> Option<EnvelopeDigest> {
    EnvelopeDigest::from_slice(b)
}

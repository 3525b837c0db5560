//! From a commit to results, without a store: the checks a commit must pass
//! before anything of it runs, and the turning of the outcomes of its
//! requests into results and share changes. Pure functions, so the three
//! nodes compute them alike and the `peer_message` fuzz target runs them.

use std::collections::{HashMap, HashSet};

use sdk_orb::{PartyId, RequestType};
use shared_proto::v1::recorded_outcome::Kind;
use shared_proto::v1::{BatchCommit, NodeResult, RecordedOutcome, ResultStatus};

use crate::batch::{ApplyError, EvalRequest, Outcome};
use crate::ids::{RequestId, SerialId};
use crate::shares::StoredShares;
use crate::store::{Meta, RequestRecord, RequestState, ShareWrite};

const NOT_EVALUATED_DETAIL: &str =
    "not evaluated: no matching pipeline is configured; nothing was enrolled or changed";

/// The result of one request in batch `batch_id` (0: timed out outside a batch).
pub(crate) fn result(
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
        mirror_attack: false,
    }
}

/// Checks a commit before anything of it runs: it is the batch after this
/// node's last applied one, agrees on the next serial id, and names every
/// request once (a batch already applied is answered from the batch log
/// before this check). A request named twice would get two results, and
/// could be enrolled and reported timed out at once.
///
/// # Errors
/// [`ApplyError::Behind`], [`ApplyError::SerialMismatch`] or
/// [`ApplyError::RepeatedRequest`].
pub(crate) fn check_commit(commit: &BatchCommit, meta: &Meta) -> Result<(), ApplyError> {
    if Some(commit.batch_id) != meta.last_applied_batch.checked_add(1) {
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
    // Ids that are not 16 bytes name nothing and are skipped everywhere.
    let listed = commit
        .timed_out
        .iter()
        .chain(&commit.digest_mismatch)
        .chain(&commit.unopenable)
        .chain(&commit.quarantined)
        .filter_map(|item| RequestId::from_slice(&item.request_id));
    let mut named = HashSet::new();
    for id in committed_ids(commit).chain(listed) {
        if !named.insert(id) {
            return Err(ApplyError::RepeatedRequest(id));
        }
    }
    Ok(())
}

/// What this node holds of a request a commit lists as timed out, digest-mismatched or
/// unopenable: its own evidence.
#[derive(Clone, Debug)]
pub(crate) struct HeldHere {
    /// Pending here (not yet final).
    pub pending: bool,
    /// When this node received it, ms since the epoch.
    pub received_ms: u64,
    /// The envelope digest this node holds.
    pub digest: Vec<u8>,
    /// Whether this node can open its payload.
    pub opens: bool,
}

/// The bit of `party` in a batch item's `reported_by` (bit p for party p).
pub(crate) fn reporter_bit(party: PartyId) -> u32 {
    1 << party.get()
}

/// Checks a commit's timed-out, digest-mismatch, unopenable and quarantined items against this node's own
/// evidence (`held` looks a request up here): a request pending here is timed out only once
/// it has waited here for most of the request time-out (`min_wait_ms`, which leaves room for
/// the nodes' clocks and arrival times to differ), and an item that names this node
/// (`reported_by`) must be true of it; a quarantined request must be held here. Items naming no
/// node are refused. A coordinator
/// therefore cannot finalise a request against the evidence of a node that attests the batch.
///
/// # Errors
/// [`ApplyError::Unfounded`] for the first item this node's evidence contradicts, or the
/// lookup's error.
pub(crate) fn check_items(
    commit: &BatchCommit,
    me: PartyId,
    now_ms: u64,
    min_wait_ms: u64,
    held: impl Fn(&RequestId) -> Result<Option<HeldHere>, ApplyError>,
) -> Result<(), ApplyError> {
    let unfounded = |id, reason| Err(ApplyError::Unfounded { id, reason });
    let named = |item: &shared_proto::v1::BatchItem| item.reported_by & reporter_bit(me) != 0;
    for (id, _) in listed(&commit.timed_out) {
        if let Some(h) = held(&id)? {
            if h.pending && now_ms.saturating_sub(h.received_ms) < min_wait_ms {
                return unfounded(id, "timed out, but pending here for less than the time-out");
            }
        }
    }
    for (id, item) in listed(&commit.digest_mismatch) {
        if item.reported_by == 0 {
            return unfounded(id, "digest mismatch reported by no node");
        }
        if named(item) && held(&id)?.is_none_or(|h| h.digest == item.envelope_digest) {
            return unfounded(id, "digest mismatch, but this node holds the listed digest");
        }
    }
    for (id, item) in listed(&commit.unopenable) {
        if item.reported_by == 0 {
            return unfounded(id, "unopenable reported by no node");
        }
        if named(item) && held(&id)?.is_some_and(|h| h.opens) {
            return unfounded(id, "unopenable, but this node opens it");
        }
    }
    for (id, _) in listed(&commit.quarantined) {
        if held(&id)?.is_none() {
            return unfounded(id, "quarantined, but not held here");
        }
    }
    Ok(())
}

/// The items of a commit list with a request id (others name nothing and are skipped).
fn listed(
    list: &[shared_proto::v1::BatchItem],
) -> impl Iterator<Item = (RequestId, &shared_proto::v1::BatchItem)> {
    list.iter()
        .filter_map(|item| Some((RequestId::from_slice(&item.request_id)?, item)))
}

/// A held request as the evaluator gets it: its log entry and this party's
/// shares.
/// `None` if the log entry's request type is unknown (a corrupt entry).
pub(crate) fn eval_request(
    id: RequestId,
    rec: &RequestRecord,
    shares: StoredShares,
) -> Option<EvalRequest> {
    Some(EvalRequest {
        id,
        request_type: rec.request_type()?,
        serial_id: SerialId(rec.serial_id),
        or_policy: rec.or_policy,
        or_serial_ids: rec.or_serial_ids.iter().map(|&s| SerialId(s)).collect(),
        shares,
    })
}

/// The requests a commit runs, in commit order. An id that is not 16 bytes
/// names no stored request: it is skipped.
pub(crate) fn committed_ids(commit: &BatchCommit) -> impl Iterator<Item = RequestId> + '_ {
    commit
        .request_ids
        .iter()
        .filter_map(|raw| RequestId::from_slice(raw))
}

/// The outcomes a replayed commit carries, one per request this node runs
/// (`runs` of them).
///
/// # Errors
/// [`ApplyError::Recorded`] when the counts differ.
pub(crate) fn recorded_outcomes(
    commit: &BatchCommit,
    runs: usize,
) -> Result<Vec<Outcome>, ApplyError> {
    if commit.outcomes.len() != runs {
        return Err(ApplyError::Recorded(format!(
            "{} outcomes for {} requests",
            commit.outcomes.len(),
            runs
        )));
    }
    Ok(commit.outcomes.iter().map(outcome_from_record).collect())
}

/// The results of a batch and the share changes they make, in commit order,
/// before signing.
#[derive(Debug)]
pub(crate) struct Planned {
    /// Per answered request: its id, its request log entry (or a
    /// placeholder) and its result.
    pub(crate) results: Vec<(RequestId, RequestRecord, NodeResult)>,
    /// Enrolments, resets and deletions.
    pub(crate) shares: Vec<(SerialId, ShareWrite)>,
    /// The serial id the first enrolment after this batch gets.
    pub(crate) next_serial: u64,
}

/// Turns the outcomes of the requests this node ran (`eval` with their log
/// entries `held`, one outcome each) into results and share changes, in
/// commit order; then answers the committed requests it could not run
/// (`missing`) and those the commit records as timed out or with differing
/// digests. Enrolments get serial ids from `next_serial` on; `enrolled` says
/// whether a serial id is in the share database before the batch.
pub(crate) fn plan(
    commit: &BatchCommit,
    next_serial: u64,
    eval: Vec<EvalRequest>,
    held: Vec<(RequestId, RequestRecord)>,
    outcomes: Vec<Outcome>,
    missing: Vec<(RequestId, Vec<u8>)>,
    enrolled: impl Fn(SerialId) -> bool,
) -> Planned {
    let batch_id = commit.batch_id;
    let mut next_serial = next_serial;
    let mut exists: HashMap<SerialId, bool> = HashMap::new();
    let mut share_writes = Vec::new();
    let mut results: Vec<(RequestId, RequestRecord, NodeResult)> = Vec::new();
    let mut enrolled_at: HashMap<usize, SerialId> = HashMap::new();
    for (position, ((req, (id, rec)), outcome)) in
        eval.into_iter().zip(held).zip(outcomes).enumerate()
    {
        let mut r = result(&id, &rec.digest, ResultStatus::NotEvaluated, batch_id, "");
        let target = req.serial_id;
        let present = exists
            .get(&target)
            .copied()
            .unwrap_or_else(|| enrolled(target));
        use RequestType as T;
        match (req.request_type, outcome) {
            (_, Outcome::NotEvaluated) => r.detail = NOT_EVALUATED_DETAIL.to_owned(),
            (T::Uniqueness | T::Reset | T::Reauth, Outcome::Malformed) => {
                if req.request_type != T::Uniqueness {
                    r.serial_id = target.0;
                }
                r.status = ResultStatus::MalformedShares as i32;
                r.detail =
                    "the shares do not encode iris templates; refused, nothing stored".to_owned();
            }
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
                let ids = matched_serial_ids(&entries, &earlier, &enrolled_at);
                r.detail = match (entries.is_empty(), earlier.is_empty()) {
                    (true, true) => "matched (privacy-max: which entries is not revealed)",
                    (false, true) => "matched enrolled entries",
                    (true, false) => "matched an earlier request of the same batch",
                    (false, false) => "matched enrolled entries and earlier requests of the batch",
                }
                .to_owned();
                r.matched_serial_ids = ids;
            }
            (
                T::Uniqueness | T::UniquenessCheck,
                Outcome::MirrorAttack {
                    matched,
                    entries,
                    earlier,
                },
            ) => {
                r.mirror_attack = true;
                r.status = if matched {
                    ResultStatus::Match
                } else {
                    ResultStatus::MirrorAttack
                } as i32;
                let ids = matched_serial_ids(&entries, &earlier, &enrolled_at);
                r.matched_serial_ids = ids;
                r.detail =
                    "the mirrored capture matched an enrolled person; not enrolled".to_owned();
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
    // The listed items are finalised as their list says, with nothing evaluated.
    let lists: [(&[shared_proto::v1::BatchItem], ResultStatus, &str); 4] = [
        (&commit.timed_out, ResultStatus::TimedOut, timed_out_detail),
        (
            &commit.digest_mismatch,
            ResultStatus::DigestMismatch,
            "the nodes received different envelopes under this request id",
        ),
        (
            &commit.unopenable,
            ResultStatus::Unopenable,
            "a node could not open its payload; nothing was evaluated or changed",
        ),
        (
            &commit.quarantined,
            ResultStatus::Quarantined,
            "evaluation failed on every attempt; quarantined, nothing was evaluated or changed",
        ),
    ];
    for (list, status, detail) in lists {
        for (id, item) in listed(list) {
            let r = result(&id, &item.envelope_digest, status, batch_id, detail);
            results.push((id, placeholder_record(&item.envelope_digest), r));
        }
    }

    Planned {
        results,
        shares: share_writes,
        next_serial,
    }
}

/// The recorded form of an outcome (batch log, replays).
pub(crate) fn record_outcome(o: &Outcome) -> RecordedOutcome {
    let mut mirror_attack = false;
    let (kind, entries, earlier): (Kind, &[SerialId], &[usize]) = match o {
        Outcome::MirrorAttack {
            matched,
            entries,
            earlier,
        } => {
            mirror_attack = true;
            let kind = if *matched { Kind::Match } else { Kind::Unique };
            (kind, entries, earlier)
        }
        Outcome::NotEvaluated => (Kind::NotEvaluated, &[], &[]),
        Outcome::Unique => (Kind::Unique, &[], &[]),
        Outcome::Match { entries, earlier } => (Kind::Match, entries, earlier),
        Outcome::Reauth(true) => (Kind::ReauthMatch, &[], &[]),
        Outcome::Reauth(false) => (Kind::ReauthNoMatch, &[], &[]),
        Outcome::Apply => (Kind::Apply, &[], &[]),
        Outcome::Malformed => (Kind::Malformed, &[], &[]),
    };
    RecordedOutcome {
        kind: kind as i32,
        matched_serial_ids: entries.iter().map(|s| s.0).collect(),
        matched_earlier: earlier
            .iter()
            .map(|&k| u32::try_from(k).unwrap_or(u32::MAX))
            .collect(),
        mirror_attack,
    }
}

/// An outcome from its recorded form; an unknown kind is "not evaluated".
pub(crate) fn outcome_from_record(r: &RecordedOutcome) -> Outcome {
    let kind = Kind::try_from(r.kind).unwrap_or(Kind::Unspecified);
    if r.mirror_attack && matches!(kind, Kind::Unique | Kind::Match) {
        return Outcome::MirrorAttack {
            matched: kind == Kind::Match,
            entries: r.matched_serial_ids.iter().map(|&s| SerialId(s)).collect(),
            earlier: r.matched_earlier.iter().map(|&k| k as usize).collect(),
        };
    }
    match kind {
        Kind::Unique => Outcome::Unique,
        Kind::Match => Outcome::Match {
            entries: r.matched_serial_ids.iter().map(|&s| SerialId(s)).collect(),
            earlier: r.matched_earlier.iter().map(|&k| k as usize).collect(),
        },
        Kind::ReauthMatch => Outcome::Reauth(true),
        Kind::ReauthNoMatch => Outcome::Reauth(false),
        Kind::Apply => Outcome::Apply,
        Kind::Malformed => Outcome::Malformed,
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
        submitter: Vec::new(),
        or_serial_ids: Vec::new(),
    }
}

/// The serial ids a match names: the matched enrolled entries and the serial ids the batch
/// gave the matched earlier requests, sorted, each once.
fn matched_serial_ids(
    entries: &[SerialId],
    earlier: &[usize],
    enrolled_at: &HashMap<usize, SerialId>,
) -> Vec<u64> {
    let mut ids: Vec<u64> = entries.iter().map(|s| s.0).collect();
    ids.extend(
        earlier
            .iter()
            .filter_map(|k| enrolled_at.get(k))
            .map(|s| s.0),
    );
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared_proto::v1::BatchItem;

    fn commit(request_ids: &[[u8; 16]], timed_out: &[[u8; 16]]) -> BatchCommit {
        BatchCommit {
            batch_id: 7,
            request_ids: request_ids.iter().map(|id| id.to_vec()).collect(),
            timed_out: timed_out
                .iter()
                .map(|id| BatchItem {
                    request_id: id.to_vec(),
                    envelope_digest: vec![1; 32],
                    reported_by: 0,
                })
                .collect(),
            next_serial_id: 4,
            ..BatchCommit::default()
        }
    }

    /// Found by the `peer_message` fuzz target: a commit that ran a request and also
    /// listed it as timed out answered it twice.
    #[test]
    fn a_commit_naming_a_request_twice_is_refused() {
        let meta = Meta {
            last_applied_batch: 6,
            next_serial: 4,
        };
        let (a, b) = ([0x12; 16], [0x14; 16]);
        assert!(check_commit(&commit(&[a, b], &[]), &meta).is_ok());
        for c in [
            commit(&[a, b], &[a]),
            commit(&[a, b, a], &[]),
            commit(&[b], &[a, a]),
        ] {
            assert!(
                matches!(check_commit(&c, &meta), Err(ApplyError::RepeatedRequest(id)) if id == RequestId(a)),
                "{c:?}"
            );
        }
        // Malformed ids name nothing: repeating one is not a repeated request.
        let mut c = commit(&[a], &[]);
        c.request_ids.extend([vec![1, 2], vec![1, 2]]);
        assert!(check_commit(&c, &meta).is_ok());
    }

    /// A node catching up applies the outcomes recorded in the batch log: a refused request
    /// must stay refused there.
    #[test]
    fn every_outcome_survives_its_record() {
        for o in [
            Outcome::NotEvaluated,
            Outcome::Unique,
            Outcome::Match {
                entries: vec![SerialId(3)],
                earlier: vec![1],
            },
            Outcome::MirrorAttack {
                matched: false,
                entries: Vec::new(),
                earlier: Vec::new(),
            },
            Outcome::Reauth(true),
            Outcome::Reauth(false),
            Outcome::Apply,
            Outcome::Malformed,
        ] {
            assert_eq!(outcome_from_record(&record_outcome(&o)), o);
        }
    }

    #[test]
    fn items_are_checked_against_this_nodes_evidence() {
        let (recent, old, other) = ([1; 16], [2; 16], [3; 16]);
        let held = |id: &RequestId| {
            Ok((id.0 != other).then(|| HeldHere {
                pending: true,
                received_ms: if id.0 == recent { 9_000 } else { 1_000 },
                digest: vec![1; 32],
                opens: id.0 == recent,
            }))
        };
        let item = |id: [u8; 16], digest: u8, reported_by: u32| BatchItem {
            request_id: id.to_vec(),
            envelope_digest: vec![digest; 32],
            reported_by,
        };
        let check = |c: &BatchCommit| check_items(c, PartyId::ALL[1], 10_000, 7_500, held);
        let unfounded = |c: &BatchCommit| matches!(check(c), Err(ApplyError::Unfounded { .. }));
        // Time-outs: pending here for 1 s of 10 is too early; 9 s, or not held here, is fine.
        assert!(unfounded(&commit(&[], &[recent])));
        assert!(check(&commit(&[], &[old, other])).is_ok());
        // Digest mismatch naming this node (bit 1): only if it holds another digest.
        let mut c = commit(&[], &[]);
        c.digest_mismatch = vec![item(old, 1, 0b010)];
        assert!(unfounded(&c));
        c.digest_mismatch = vec![item(old, 2, 0b010), item(recent, 1, 0b100)];
        assert!(check(&c).is_ok());
        c.digest_mismatch = vec![item(old, 2, 0)];
        assert!(unfounded(&c), "reported by no node");
        // Unopenable naming this node: only if it cannot open it.
        let mut c = commit(&[], &[]);
        c.unopenable = vec![item(recent, 1, 0b010)];
        assert!(unfounded(&c));
        c.unopenable = vec![item(old, 1, 0b010), item(recent, 1, 0b001)];
        assert!(check(&c).is_ok());
        c.unopenable = vec![item(old, 1, 0)];
        assert!(unfounded(&c), "reported by no node");
    }
}

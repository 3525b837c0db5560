//! Party 0's batch loop: propose the oldest pending requests, keep those
//! both peers hold with the same digest, time out those that stay missing,
//! commit the batch (all three evaluate it and sign their outcomes), then,
//! once all three signatures agree, apply it locally (durably) and finalise
//! it at the peers. A peer that is behind (it was down) first gets the
//! batches it missed, replayed from the batch log, so the three stores
//! converge.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use prost::Message;
use sdk_orb::PartyId;
use shared_proto::v1::peer_service_client::PeerServiceClient;
use shared_proto::v1::{
    BatchAbort, BatchCommit, BatchCommitAck, BatchItem, BatchProposal, BatchVote,
    FetchBatchRequest, Vote,
};
use tokio::sync::watch;
use tonic::transport::Channel;

use super::poison::Suspects;
use super::{apply_commit, digest_of, evaluate_commit};
use crate::batch::plan::{committed_ids, reporter_bit};
use crate::batch::ApplyError;
use crate::clock::now_ms;
use crate::ids::RequestId;
use crate::links::Peers;
use crate::node::NodeState;
use crate::queue::{Candidate, PendingQueue};
use crate::store::{RequestState, StoreError};

/// The party that runs the batch loop; the other two vote.
pub const COORDINATOR: PartyId = PartyId::ALL[0];

/// Runs rounds until `shutdown` turns true; a round in flight is finished
/// (committed, or aborted and left pending) before returning.
pub async fn run(state: Arc<NodeState>, peers: Peers, mut shutdown: watch::Receiver<bool>) {
    let interval = state.config.batch.interval();
    let mut committed_last = false;
    let mut suspects = Suspects::default();
    loop {
        if *shutdown.borrow() {
            break;
        }
        // Go again at once only after a committed round with a full queue.
        let full = state.pending_len() >= state.config.batch.max_size;
        if !(full && committed_last) {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = state.batch_wakeup.notified() => {}
                _ = shutdown.changed() => {}
            }
            if *shutdown.borrow() {
                break;
            }
        }
        let r = round(&state, &peers, &mut suspects).await;
        committed_last = matches!(r, Ok(Round::Committed { .. }));
        match r {
            Ok(Round::Idle) => {}
            Ok(Round::Committed { batch_id, size }) => {
                tracing::debug!(batch_id, size, "batch committed");
            }
            Ok(r) => tracing::debug!(?r, "batch round"),
            Err(e) => {
                tracing::warn!(error = %e, "batch round failed; requests stay pending");
                state.metrics.batch("failed");
                state.metrics.batch_aborted(e.cause());
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
    }
    tracing::info!("batch coordinator stopped");
}

/// Why a coordinator round failed; the requests stay pending.
#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    /// The store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A peer did not answer a call.
    #[error("{party}: {call}: {failure}")]
    Peer {
        /// The peer.
        party: PartyId,
        /// What was asked.
        call: &'static str,
        /// What went wrong.
        failure: PeerFailure,
    },
    /// Applying a batch here failed.
    #[error("applying batch {batch_id}: {source}")]
    Apply {
        /// The batch.
        batch_id: u64,
        /// Why.
        source: ApplyError,
    },
    /// A peer that is not configured.
    #[error("unknown peer: {0}")]
    UnknownPeer(PartyId),
    /// A batch to replay is not in this node's batch log.
    #[error("batch {0} missing from the batch log")]
    MissingBatch(u64),
    /// A batch log entry does not decode.
    #[error("batch {0} in the batch log is corrupt")]
    CorruptBatch(u64),
    /// The evaluation failed deterministically at the nodes `reported_by` (bit p for party
    /// p): nothing was applied; the batch's requests run apart until the one that fails is
    /// found.
    #[error("batch {batch_id}: the evaluation failed deterministically (nodes {reported_by:#05b}); its requests run apart")]
    Poisoned {
        /// The batch.
        batch_id: u64,
        /// The nodes whose evaluation failed so.
        reported_by: u32,
        /// This node's evaluation panicked.
        panicked_here: bool,
    },
    /// Not every peer attested the outcomes of an evaluated batch; nothing was applied and the
    /// batch runs again.
    #[error("batch {batch_id}: not every node attested its outcomes; it runs again")]
    Unattested {
        /// The batch.
        batch_id: u64,
    },
    /// A fetched batch carries no outcomes to apply.
    #[error("batch {batch_id} from {party} has no recorded outcomes")]
    NotRecorded {
        /// The peer.
        party: PartyId,
        /// The batch.
        batch_id: u64,
    },
}

impl RoundError {
    /// The label of `ocelli_batches_aborted_total{cause}` (one of
    /// [`crate::metrics::ABORT_CAUSES`]).
    pub fn cause(&self) -> &'static str {
        use crate::batch::EvalError;
        match self {
            Self::Store(_) => "store",
            Self::Peer {
                failure: PeerFailure::TimedOut,
                ..
            } => "peer_timeout",
            Self::Peer {
                failure: PeerFailure::Refused(_),
                ..
            } => "peer_refused",
            Self::Apply {
                source:
                    ApplyError::Evaluation(EvalError::KeyAgreement { .. } | EvalError::KeyMessage(_)),
                ..
            } => "key_agreement",
            Self::Apply {
                source: ApplyError::Evaluation(_),
                ..
            } => "evaluation",
            Self::Apply { .. } => "apply",
            Self::Unattested { .. } => "unattested",
            Self::Poisoned {
                panicked_here: true,
                ..
            } => "panic",
            Self::Poisoned { .. } => "deterministic",
            Self::UnknownPeer(_)
            | Self::MissingBatch(_)
            | Self::CorruptBatch(_)
            | Self::NotRecorded { .. } => "catch_up",
        }
    }
}

/// How a call to a peer failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerFailure {
    /// No answer within the deadline.
    #[error("no answer in time")]
    TimedOut,
    /// The peer answered with an error.
    #[error("{0}")]
    Refused(tonic::Status),
}

impl PeerFailure {
    fn of<T>(
        r: Result<Result<tonic::Response<T>, tonic::Status>, tokio::time::error::Elapsed>,
    ) -> Result<T, PeerFailure> {
        match r {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(PeerFailure::Refused(status)),
            Err(_) => Err(PeerFailure::TimedOut),
        }
    }
}

#[derive(Debug)]
enum Round {
    Idle,
    CaughtUp,
    NothingAgreed,
    Committed { batch_id: u64, size: usize },
}

async fn round(
    state: &Arc<NodeState>,
    peers: &Peers,
    suspects: &mut Suspects,
) -> Result<Round, RoundError> {
    let meta = state.store_call(|s| s.store.meta()).await?;
    let batch_id = meta.last_applied_batch + 1;
    let now = now_ms();
    let cutoff = now.saturating_sub(state.config.batch.request_timeout_ms);
    let candidates: Vec<Candidate> = state.queue().to_propose(state.config.batch.max_size);
    if candidates.is_empty() {
        return Ok(Round::Idle);
    }
    let started = Instant::now();
    let proposal = BatchProposal {
        batch_id,
        items: candidates
            .iter()
            .map(|c| BatchItem {
                request_id: c.id.0.to_vec(),
                envelope_digest: c.digest.0.to_vec(),
                reported_by: 0,
            })
            .collect(),
    };
    let timeout = state.config.batch.peer_rpc_timeout();
    let mut votes: BTreeMap<PartyId, BatchVote> = BTreeMap::new();
    let mut failure = None;
    let calls = peers.clients.iter().map(|(party, client)| {
        let mut client = client.clone();
        let proposal = proposal.clone();
        async move {
            let r = tokio::time::timeout(timeout, client.propose_batch(proposal)).await;
            (*party, r)
        }
    });
    for (party, r) in futures::future::join_all(calls).await {
        match PeerFailure::of(r) {
            Ok(v) => {
                votes.insert(party, v);
            }
            Err(failure_) => {
                failure = Some(RoundError::Peer {
                    party,
                    call: "proposal",
                    failure: failure_,
                })
            }
        }
        if failure.is_some() {
            state.metrics.peer_error(party);
        }
    }
    if let Some(f) = failure {
        abort(peers, batch_id, timeout).await;
        return Err(f);
    }
    match catching_up(meta.last_applied_batch, &votes) {
        CatchingUp::Fetch { party, to } => {
            abort(peers, batch_id, timeout).await;
            fetch_missed(state, peers, party, batch_id, to).await?;
            return Ok(Round::CaughtUp);
        }
        CatchingUp::Replay(behind) => {
            for (party, from) in behind {
                catch_up(state, peers, party, from, meta.last_applied_batch).await?;
            }
            abort(peers, batch_id, timeout).await;
            return Ok(Round::CaughtUp);
        }
        CatchingUp::No => {}
    }

    let mut commit = BatchCommit {
        batch_id,
        request_ids: Vec::new(),
        timed_out: Vec::new(),
        next_serial_id: meta.next_serial,
        digest_mismatch: Vec::new(),
        unopenable: Vec::new(),
        // A fresh name per attempt, so no link of a failed attempt is reused.
        mpc_session: rand::random(),
        outcomes_recorded: false,
        outcomes: Vec::new(),
        signatures: Vec::new(),
        attempt: 0,
        quarantined: Vec::new(),
        created_unix_s: crate::clock::now_ms() / 1000,
    };
    let own_attempt = state
        .store_call(move |s| super::attest::attested_attempt(s, batch_id))
        .await?;
    commit.attempt = next_attempt(own_attempt, &votes);
    // Party 0 votes too: a request it cannot open cannot be evaluated either.
    mark_missing(state, &candidates, &votes);
    let unopenable_here: std::collections::HashSet<RequestId> = candidates
        .iter()
        .filter(|c| !opens(state, &c.id))
        .map(|c| c.id)
        .collect();
    tally(
        &candidates,
        &votes,
        cutoff,
        |id| !unopenable_here.contains(id),
        &mut commit,
    );
    // The proposal looks past requests a peer lacks; a batch still runs at most max_size.
    commit.request_ids.truncate(state.config.batch.max_size);
    commit.quarantined = suspects
        .select(&mut commit.request_ids)
        .into_iter()
        .map(|(request_id, reported_by)| {
            let envelope_digest = candidates
                .iter()
                .find(|c| c.id.0[..] == request_id[..])
                .map(|c| c.digest.0.to_vec())
                .unwrap_or_default();
            BatchItem {
                request_id,
                envelope_digest,
                reported_by,
            }
        })
        .collect();
    let commit = {
        let votes = votes.clone();
        state
            .store_call(move |s| {
                expired_at_peers(s, &votes, &mut commit)?;
                Ok::<_, StoreError>(commit)
            })
            .await?
    };
    if commit.request_ids.is_empty()
        && commit.timed_out.is_empty()
        && commit.digest_mismatch.is_empty()
        && commit.unopenable.is_empty()
        && commit.quarantined.is_empty()
    {
        abort(peers, batch_id, timeout).await;
        return Ok(Round::NothingAgreed);
    }
    let size = commit.request_ids.len();
    // All three nodes evaluate together (the matching pipeline is a three-party computation);
    // each signs the outcomes it opened and stores nothing yet.
    let commit_timeout = state.config.batch.commit_timeout();
    let remote = futures::future::join_all(peers.clients.iter().map(|(party, client)| {
        let commit = &commit;
        async move { (*party, send_commit(client, commit, commit_timeout).await) }
    }));
    let (ours, theirs) = tokio::join!(evaluate_commit(state, commit.clone()), remote);
    let reported_by = failed_deterministically(state.party, &ours, &theirs);
    if reported_by != 0 {
        abort(peers, batch_id, timeout).await;
        let panicked_here = matches!(ours, Err(ApplyError::Panicked));
        let ran: Vec<RequestId> = committed_ids(&commit).collect();
        if let Some(id) = suspects.failed(&ran) {
            let attempts = state
                .store_call(move |s| s.store.record_failed_attempt(&id))
                .await?;
            tracing::warn!(request_id = %id, batch_id, attempts, "a request alone in its batch failed evaluation");
            if attempts >= state.config.batch.max_failed_attempts {
                suspects.quarantine(id, reported_by);
            }
        }
        return Err(RoundError::Poisoned {
            batch_id,
            reported_by,
            panicked_here,
        });
    }
    let ours = match ours {
        Ok(e) => e,
        Err(source) => {
            abort(peers, batch_id, timeout).await;
            return Err(RoundError::Apply { batch_id, source });
        }
    };
    let mut recorded = ours.recorded;
    let mut attested = 0;
    for (party, r) in theirs {
        match r {
            Ok(ack) => match ack.signature {
                Some(s)
                    if PartyId::try_from(s.party_id) == Ok(party)
                        && super::attest::valid_peer_signature(state, &s, &ours.batch_digest) =>
                {
                    super::attest::merge(&mut recorded.signatures, &[s]);
                    attested += 1;
                }
                _ => {
                    tracing::error!(
                        batch_id,
                        party = party.get(),
                        "peer's attestation is missing or differs from this node's outcomes"
                    );
                    state.metrics.batch("results_differ");
                }
            },
            Err(e) => {
                tracing::warn!(batch_id, party = party.get(), error = %e, "peer did not evaluate the batch");
                state.metrics.peer_error(party);
            }
        }
    }
    if attested < peers.clients.len() {
        // Nobody applies outcomes one party lacks: the batch runs again.
        abort(peers, batch_id, timeout).await;
        return Err(RoundError::Unattested { batch_id });
    }
    // Attested by all three: applied here and finalised at the peers together.
    let finalize = futures::future::join_all(peers.clients.iter().map(|(party, client)| {
        let recorded = &recorded;
        async move { (*party, send_commit(client, recorded, commit_timeout).await) }
    }));
    let (ours, theirs) = tokio::join!(apply_commit(state, recorded.clone()), finalize);
    let ours = ours.map_err(|source| RoundError::Apply { batch_id, source })?;
    for (party, r) in theirs {
        match r {
            Ok(ack) if ack.results_digest == ours.results_digest => {}
            Ok(_) => {
                tracing::error!(
                    batch_id,
                    party = party.get(),
                    "peer results differ from ours"
                );
                state.metrics.batch("results_differ");
            }
            Err(e) => {
                tracing::warn!(batch_id, party = party.get(), error = %e, "batch not finalised at the peer; it catches up later");
                state.metrics.peer_error(party);
            }
        }
    }
    state
        .metrics
        .batch_latency
        .observe(started.elapsed().as_secs_f64());
    state.metrics.batch_size.observe(size as f64);
    suspects.committed(
        commit
            .request_ids
            .iter()
            .chain(commit.quarantined.iter().map(|i| &i.request_id))
            .map(Vec::as_slice),
    );
    state.metrics.batch("committed");
    Ok(Round::Committed { batch_id, size })
}

/// The nodes (bit p for party p) whose evaluation of a fresh commit failed in a way that
/// repeats (see [`ApplyError::is_deterministic`]): this one by its own result, the peers by
/// their acks. A peer that did not answer is never counted.
fn failed_deterministically(
    me: PartyId,
    ours: &Result<super::Evaluated, ApplyError>,
    theirs: &[(PartyId, Result<BatchCommitAck, PeerFailure>)],
) -> u32 {
    let here = match ours {
        Err(e) if e.is_deterministic() => reporter_bit(me),
        _ => 0,
    };
    theirs
        .iter()
        .filter(|(_, r)| matches!(r, Ok(ack) if ack.evaluation_failed))
        .fold(here, |bits, (p, _)| bits | reporter_bit(*p))
}

/// Records which candidates a peer voted missing, so later proposals put them behind the
/// requests the peers hold.
fn mark_missing(state: &NodeState, candidates: &[Candidate], votes: &BTreeMap<PartyId, BatchVote>) {
    let mut q = state.queue();
    for (i, c) in candidates.iter().enumerate() {
        let missing = votes
            .values()
            .any(|v| v.votes.get(i).copied() == Some(Vote::Missing as i32));
        q.record_vote(&c.id, missing);
    }
}

/// The attempt to commit batch `batch_id` as: past every attempt at it that this node or a
/// peer attested (each node refuses to attest an attempt not newer than its last).
fn next_attempt(own: u32, votes: &BTreeMap<PartyId, BatchVote>) -> u32 {
    let highest = votes
        .values()
        .map(|v| v.attested_attempt)
        .fold(own, u32::max);
    highest.saturating_add(1)
}

/// Adds to `commit.timed_out` the requests a peer reports expired that this node never
/// received (nothing in its request log): no batch would ever propose them otherwise. One it
/// holds is proposed from its own queue and timed out by [`tally`] if need be.
fn expired_at_peers(
    state: &NodeState,
    votes: &BTreeMap<PartyId, BatchVote>,
    commit: &mut BatchCommit,
) -> Result<(), StoreError> {
    let mut named: std::collections::HashSet<Vec<u8>> = commit
        .request_ids
        .iter()
        .cloned()
        .chain(
            commit
                .timed_out
                .iter()
                .chain(&commit.digest_mismatch)
                .chain(&commit.unopenable)
                .map(|i| i.request_id.clone()),
        )
        .collect();
    for item in votes.values().flat_map(|v| &v.expired) {
        let Some(id) = RequestId::from_slice(&item.request_id) else {
            continue;
        };
        if digest_of(&item.envelope_digest).is_none() || named.contains(&item.request_id) {
            continue;
        }
        if state.store.request(&id)?.is_some() {
            continue;
        }
        named.insert(item.request_id.clone());
        commit.timed_out.push(item.clone());
    }
    Ok(())
}

async fn send_commit(
    client: &PeerServiceClient<Channel>,
    commit: &BatchCommit,
    timeout: std::time::Duration,
) -> Result<BatchCommitAck, PeerFailure> {
    let mut client = client.clone();
    let r = tokio::time::timeout(timeout, client.commit_batch(commit.clone())).await;
    PeerFailure::of(r)
}

/// Batch `batch_id` from `party`'s batch log.
async fn fetch_from(
    state: &NodeState,
    peers: &Peers,
    party: PartyId,
    batch_id: u64,
) -> Result<BatchCommit, RoundError> {
    let mut c = peers
        .client(party)
        .ok_or(RoundError::UnknownPeer(party))?
        .clone();
    let r = tokio::time::timeout(
        state.config.batch.peer_rpc_timeout(),
        c.fetch_batch(FetchBatchRequest { batch_id }),
    )
    .await;
    PeerFailure::of(r).map_err(|failure| RoundError::Peer {
        party,
        call: "batch fetch",
        failure,
    })
}

async fn abort(peers: &Peers, batch_id: u64, timeout: std::time::Duration) {
    for (_, client) in &peers.clients {
        let mut c = client.clone();
        let _ = tokio::time::timeout(timeout, c.abort_batch(BatchAbort { batch_id })).await;
    }
}

async fn catch_up(
    state: &Arc<NodeState>,
    peers: &Peers,
    party: PartyId,
    from: u64,
    to: u64,
) -> Result<(), RoundError> {
    let client = peers.client(party).ok_or(RoundError::UnknownPeer(party))?;
    tracing::info!(
        party = party.get(),
        from,
        to,
        "replaying batches to a peer that is behind"
    );
    for id in from..=to {
        let b = state
            .store_call(move |s| s.store.batch(id))
            .await?
            .ok_or(RoundError::MissingBatch(id))?;
        let mut commit =
            BatchCommit::decode(b.commit.as_slice()).map_err(|_| RoundError::CorruptBatch(id))?;
        // The peer applies the recorded outcomes only with the attestations of both other
        // parties: this node's, and the third's (from its ack, or else from its batch log).
        let third = crate::ids::third(state.party, party);
        if !commit
            .signatures
            .iter()
            .any(|s| PartyId::try_from(s.party_id) == Ok(third))
        {
            let theirs = fetch_from(state, peers, third, id).await?;
            super::attest::merge(&mut commit.signatures, &theirs.signatures);
        }
        let theirs = send_commit(client, &commit, state.config.batch.commit_timeout())
            .await
            .map_err(|failure| RoundError::Peer {
                party,
                call: "replayed commit",
                failure,
            })?;
        if theirs.results_digest != b.results_digest {
            tracing::error!(
                batch_id = id,
                party = party.get(),
                "replayed batch: peer results differ"
            );
        }
    }
    Ok(())
}

/// Fetches batches `from..=to` from `party`'s batch log and applies their
/// recorded outcomes here.
async fn fetch_missed(
    state: &Arc<NodeState>,
    peers: &Peers,
    party: PartyId,
    from: u64,
    to: u64,
) -> Result<(), RoundError> {
    tracing::warn!(
        party = party.get(),
        from,
        to,
        "a peer applied batches this node lacks; fetching them"
    );
    for id in from..=to {
        let mut commit = fetch_from(state, peers, party, id).await?;
        // Applied only with both peers' attestations: the other peer's comes from its own
        // batch log if `party`'s lacks it.
        let other = crate::ids::third(state.party, party);
        if !commit
            .signatures
            .iter()
            .any(|s| PartyId::try_from(s.party_id) == Ok(other))
        {
            if let Ok(theirs) = fetch_from(state, peers, other, id).await {
                super::attest::merge(&mut commit.signatures, &theirs.signatures);
            }
        }
        if !commit.outcomes_recorded {
            return Err(RoundError::NotRecorded {
                party,
                batch_id: id,
            });
        }
        apply_commit(state, commit)
            .await
            .map_err(|source| RoundError::Apply {
                batch_id: id,
                source,
            })?;
    }
    Ok(())
}

/// Whether the nodes stand at different batches, by the peers' votes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CatchingUp {
    /// No: every peer has applied exactly this node's last batch.
    No,
    /// `party` applied batches up to `to` that this node lacks (it crashed
    /// after an evaluation the peers stored): fetch them from it first.
    Fetch {
        /// The peer that is ahead (the furthest, the lowest id among equals).
        party: PartyId,
        /// Its last applied batch.
        to: u64,
    },
    /// These peers lack batches: replay each, from the first it lacks, up to
    /// this node's last applied batch.
    Replay(Vec<(PartyId, u64)>),
}

/// Compares the peers' last applied batches with this node's `last_applied`.
pub fn catching_up(last_applied: u64, votes: &BTreeMap<PartyId, BatchVote>) -> CatchingUp {
    let ahead = votes
        .iter()
        .filter(|(_, v)| v.last_applied_batch_id > last_applied)
        .max_by_key(|(party, v)| (v.last_applied_batch_id, std::cmp::Reverse(**party)));
    if let Some((party, v)) = ahead {
        return CatchingUp::Fetch {
            party: *party,
            to: v.last_applied_batch_id,
        };
    }
    let behind: Vec<(PartyId, u64)> = votes
        .iter()
        .filter(|(_, v)| v.last_applied_batch_id < last_applied)
        .map(|(party, v)| (*party, v.last_applied_batch_id + 1))
        .collect();
    if behind.is_empty() {
        CatchingUp::No
    } else {
        CatchingUp::Replay(behind)
    }
}

/// Whether this node can open its payload of the held request `id` (checked once, at
/// intake or when the node started: decrypting at every vote would slow every round).
fn opens(state: &NodeState, id: &RequestId) -> bool {
    !state.unopenable.contains(id)
}

/// Sorts the proposed `candidates` into `commit` by the peers' votes (one
/// vote per candidate, in order; an absent or unknown vote counts as
/// missing) and by whether party 0 opens them (`opens_here`): run when every
/// peer accepted and party 0 opens it; recorded as a digest mismatch when a
/// peer holds another envelope; as unopenable when a node cannot open its
/// payload (no three-party evaluation is possible); timed out when received
/// before `cutoff_ms` or already final at a peer. The rest stay pending.
pub fn tally(
    candidates: &[Candidate],
    votes: &BTreeMap<PartyId, BatchVote>,
    cutoff_ms: u64,
    opens_here: impl Fn(&RequestId) -> bool,
    commit: &mut BatchCommit,
) {
    for (i, c) in candidates.iter().enumerate() {
        let vs: Vec<Vote> = votes
            .values()
            .map(|v| {
                v.votes
                    .get(i)
                    .and_then(|x| Vote::try_from(*x).ok())
                    .unwrap_or(Vote::Missing)
            })
            .collect();
        // The parties whose vote is `v` (bit p for party p), and party 0 if `here`.
        let reporters = |v: Vote, here: bool| {
            votes
                .keys()
                .zip(&vs)
                .filter(|(_, x)| **x == v)
                .fold(u32::from(here), |bits, (p, _)| bits | reporter_bit(*p))
        };
        let item = |reported_by| BatchItem {
            request_id: c.id.0.to_vec(),
            envelope_digest: c.digest.0.to_vec(),
            reported_by,
        };
        let opens = opens_here(&c.id);
        if opens && vs.iter().all(|v| *v == Vote::Accept) {
            commit.request_ids.push(c.id.0.to_vec());
        } else if vs.contains(&Vote::DigestMismatch) {
            commit
                .digest_mismatch
                .push(item(reporters(Vote::DigestMismatch, false)));
        } else if !opens || vs.contains(&Vote::Unopenable) {
            commit
                .unopenable
                .push(item(reporters(Vote::Unopenable, !opens)));
        } else if c.received_ms < cutoff_ms || vs.contains(&Vote::AlreadyFinal) {
            commit.timed_out.push(item(0));
        }
    }
}

/// Votes on a proposal (parties 1 and 2).
pub fn vote(state: &NodeState, proposal: &BatchProposal) -> Result<BatchVote, StoreError> {
    let meta = state.store.meta()?;
    let attested_attempt = super::attest::attested_attempt(state, proposal.batch_id)?;
    let mut q = state.queue();
    Ok(vote_on(
        &mut q,
        meta.last_applied_batch,
        proposal,
        |id| matches!(state.store.request(id), Ok(Some(r)) if r.state() == Some(RequestState::Final)),
        |id| opens(state, id),
    ))
    .map(|mut v| {
        // What only a peer holds: party 0 never proposes it, so it must hear of it to time
        // it out for all three (parties 1 and 2 never do so on their own).
        let proposed: std::collections::HashSet<&[u8]> = proposal
            .items
            .iter()
            .map(|i| i.request_id.as_slice())
            .collect();
        let cutoff = now_ms().saturating_sub(state.config.batch.request_timeout_ms);
        v.expired = q
            .expired(cutoff)
            .into_iter()
            .filter(|c| !proposed.contains(&c.id.0[..]))
            .take(state.config.batch.max_size)
            .map(|c| BatchItem {
                request_id: c.id.0.to_vec(),
                envelope_digest: c.digest.0.to_vec(),
                reported_by: 0,
            })
            .collect();
        v.attested_attempt = attested_attempt;
        v
    })
}

/// Votes on a proposal against this node's pending `queue`, reserving the
/// accepted requests for it. A node whose last applied batch is not the one
/// before the proposal's votes "missing" on everything. `is_final` says
/// whether the request log holds a request as final; `opens` whether this
/// node can open its payload of a held request (one it cannot is voted
/// unopenable and not reserved).
pub fn vote_on(
    queue: &mut PendingQueue,
    last_applied: u64,
    proposal: &BatchProposal,
    is_final: impl Fn(&RequestId) -> bool,
    opens: impl Fn(&RequestId) -> bool,
) -> BatchVote {
    let behind = proposal.batch_id != last_applied + 1;
    queue.release_all_but(Some(proposal.batch_id));
    let mut votes = Vec::with_capacity(proposal.items.len());
    for item in &proposal.items {
        let id = RequestId::from_slice(&item.request_id);
        let want = digest_of(&item.envelope_digest);
        let v = match (id, want) {
            (Some(id), Some(want)) if !behind => match queue.digest(&id) {
                Some(d) if d == want && !opens(&id) => Vote::Unopenable,
                Some(d) if d == want => {
                    queue.reserve(&id, proposal.batch_id);
                    Vote::Accept
                }
                Some(_) => Vote::DigestMismatch,
                // Intake stores a request before queueing it: one that is
                // stored but still pending is on its way into the queue.
                None if is_final(&id) => Vote::AlreadyFinal,
                None => Vote::Missing,
            },
            _ => Vote::Missing,
        };
        votes.push(v as i32);
    }
    BatchVote {
        batch_id: proposal.batch_id,
        votes,
        last_applied_batch_id: last_applied,
        expired: Vec::new(),
        attested_attempt: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::EvalError;

    #[test]
    fn only_failures_that_repeat_are_reported_never_a_peer_that_did_not_answer() {
        let [p0, p1, p2] = PartyId::ALL;
        let failed = BatchCommitAck {
            evaluation_failed: true,
            ..BatchCommitAck::default()
        };
        let link_closed = || Err(ApplyError::Evaluation(EvalError::LinkClosed(p1)));
        let timed_out = (p2, Err(PeerFailure::TimedOut));
        assert_eq!(
            failed_deterministically(p0, &link_closed(), &[(p1, Ok(failed.clone())), timed_out]),
            0b010
        );
        let timed_out = (p2, Err(PeerFailure::TimedOut));
        assert_eq!(
            failed_deterministically(p0, &link_closed(), &[timed_out]),
            0,
            "a network fault and a silent peer are blamed on nobody"
        );
        assert_eq!(
            failed_deterministically(
                p0,
                &Err(ApplyError::Panicked),
                &[(p1, Ok(failed.clone())), (p2, Ok(failed))]
            ),
            0b111
        );
        let contract = Err(ApplyError::Evaluation(EvalError::OutcomeCount {
            evaluator: "test",
            outcomes: 0,
            requests: 1,
        }));
        assert_eq!(failed_deterministically(p0, &contract, &[]), 0b001);
    }
}

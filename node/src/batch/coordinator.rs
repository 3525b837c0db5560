//! Party 0's batch loop: propose the oldest pending requests, keep those
//! both peers hold with the same digest, time out those that stay missing,
//! apply the batch locally (durably), then commit it to the peers. A peer
//! that is behind (it was down) first gets the batches it missed, replayed
//! from the batch log, so the three stores converge.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use prost::Message;
use shared_proto::v1::peer_service_client::PeerServiceClient;
use shared_proto::v1::{
    BatchAbort, BatchCommit, BatchItem, BatchProposal, BatchVote, FetchBatchRequest, Vote,
};
use tokio::sync::watch;
use tonic::transport::Channel;

use super::{apply_commit, digest_of};
use crate::node::{now_ms, NodeState};
use crate::queue::Candidate;
use crate::store::RequestState;

/// Clients for the two peers, by party id.
#[derive(Clone, Debug)]
pub struct Peers {
    clients: Vec<(u8, PeerServiceClient<Channel>)>,
}

impl Peers {
    /// Lazily connecting mTLS clients for every configured peer.
    ///
    /// # Errors
    /// Bad TLS material or addresses.
    pub fn connect(state: &NodeState, tls: &crate::tls::NodeTls) -> Result<Self, String> {
        let mut clients = Vec::new();
        for p in &state.config.peers {
            let cfg = tls
                .peer_clients
                .get(&p.party_id)
                .ok_or_else(|| format!("no TLS client config for party {}", p.party_id))?;
            let name = p
                .server_name
                .clone()
                .unwrap_or_else(|| p.address.ip().to_string());
            let ch = crate::tls::channel(
                p.address,
                &name,
                cfg.clone(),
                state.config.batch.peer_rpc_timeout(),
            )
            .map_err(|e| e.to_string())?;
            let client = PeerServiceClient::new(ch)
                .max_decoding_message_size(64 << 20)
                .max_encoding_message_size(64 << 20);
            clients.push((p.party_id, client));
        }
        Ok(Self { clients })
    }

    /// The client for `party`.
    pub fn client(&self, party: u8) -> Option<&PeerServiceClient<Channel>> {
        self.clients
            .iter()
            .find(|(p, _)| *p == party)
            .map(|(_, c)| c)
    }
}

/// Runs rounds until `shutdown` turns true; a round in flight is finished
/// (committed, or aborted and left pending) before returning.
pub async fn run(state: Arc<NodeState>, peers: Peers, mut shutdown: watch::Receiver<bool>) {
    let interval = state.config.batch.interval();
    let mut committed_last = false;
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
        let r = round(&state, &peers).await;
        committed_last = matches!(r, Ok(Round::Committed { .. }));
        match r {
            Ok(Round::Idle) => {}
            Ok(Round::Committed { batch_id, size }) => {
                tracing::debug!(batch_id, size, "batch committed");
            }
            Ok(r) => tracing::debug!(?r, "batch round"),
            Err(e) => {
                tracing::warn!(error = %e, "batch round failed; requests stay pending");
                state.metrics.batches.with_label_values(&["failed"]).inc();
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
    }
    tracing::info!("batch coordinator stopped");
}

#[derive(Debug)]
enum Round {
    Idle,
    CaughtUp,
    NothingAgreed,
    Committed { batch_id: u64, size: usize },
}

async fn round(state: &Arc<NodeState>, peers: &Peers) -> Result<Round, String> {
    let meta = state.store.meta().map_err(|e| e.to_string())?;
    let batch_id = meta.last_applied_batch + 1;
    let now = now_ms();
    let cutoff = now.saturating_sub(state.config.batch.request_timeout_ms);
    let candidates: Vec<Candidate> = state.queue().oldest(state.config.batch.max_size);
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
            })
            .collect(),
    };
    let timeout = state.config.batch.peer_rpc_timeout();
    let mut votes: HashMap<u8, BatchVote> = HashMap::new();
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
        match r {
            Ok(Ok(v)) => {
                votes.insert(party, v.into_inner());
            }
            Ok(Err(status)) => {
                failure = Some(format!("party {party} refused the proposal: {status}"))
            }
            Err(_) => failure = Some(format!("party {party} did not answer the proposal in time")),
        }
        if failure.is_some() {
            state
                .metrics
                .peer_errors
                .with_label_values(&[&party.to_string()])
                .inc();
        }
    }
    if let Some(f) = failure {
        abort(peers, batch_id, timeout).await;
        return Err(f);
    }
    // Party 0 may lack batches a peer applied (it crashed after an
    // evaluation the peers stored): fetch them from that peer first.
    if let Some((party, v)) = votes
        .iter()
        .max_by_key(|(_, v)| v.last_applied_batch_id)
        .filter(|(_, v)| v.last_applied_batch_id > meta.last_applied_batch)
    {
        abort(peers, batch_id, timeout).await;
        fetch_missed(state, peers, *party, batch_id, v.last_applied_batch_id).await?;
        return Ok(Round::CaughtUp);
    }
    // Peers that missed batches get them first.
    let mut caught_up = false;
    for (party, v) in &votes {
        if v.last_applied_batch_id < meta.last_applied_batch {
            catch_up(
                state,
                peers,
                *party,
                v.last_applied_batch_id + 1,
                meta.last_applied_batch,
            )
            .await?;
            caught_up = true;
        }
    }
    if caught_up {
        abort(peers, batch_id, timeout).await;
        return Ok(Round::CaughtUp);
    }

    let mut commit = BatchCommit {
        batch_id,
        request_ids: Vec::new(),
        timed_out: Vec::new(),
        next_serial_id: meta.next_serial,
        digest_mismatch: Vec::new(),
        // A fresh name per attempt, so no link of a failed attempt is reused.
        mpc_session: rand::random(),
        outcomes_recorded: false,
        outcomes: Vec::new(),
    };
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
        let item = || BatchItem {
            request_id: c.id.0.to_vec(),
            envelope_digest: c.digest.0.to_vec(),
        };
        if vs.iter().all(|v| *v == Vote::Accept) {
            commit.request_ids.push(c.id.0.to_vec());
        } else if vs.contains(&Vote::DigestMismatch) {
            commit.digest_mismatch.push(item());
        } else if c.received_ms < cutoff || vs.contains(&Vote::AlreadyFinal) {
            commit.timed_out.push(item());
        }
    }
    if commit.request_ids.is_empty()
        && commit.timed_out.is_empty()
        && commit.digest_mismatch.is_empty()
    {
        abort(peers, batch_id, timeout).await;
        return Ok(Round::NothingAgreed);
    }
    let size = commit.request_ids.len();
    // All three nodes evaluate together (the matching pipeline is a
    // three-party computation), so the peers get the commit while this node
    // applies it.
    let commit_timeout = state.config.batch.commit_timeout();
    let remote = futures::future::join_all(peers.clients.iter().map(|(party, client)| {
        let commit = &commit;
        async move { (*party, send_commit(client, commit, commit_timeout).await) }
    }));
    let (ours, theirs) = tokio::join!(apply_commit(state, commit.clone()), remote);
    let ours = ours.map_err(|e| format!("local apply of batch {batch_id}: {e}"))?;
    for (party, r) in theirs {
        match r {
            Ok(theirs) if theirs == ours => {}
            Ok(_) => {
                tracing::error!(batch_id, party, "peer results differ from ours");
                state
                    .metrics
                    .batches
                    .with_label_values(&["results_differ"])
                    .inc();
            }
            Err(e) => {
                tracing::warn!(batch_id, party, error = %e, "commit not acknowledged; the peer catches up later");
                state
                    .metrics
                    .peer_errors
                    .with_label_values(&[&party.to_string()])
                    .inc();
            }
        }
    }
    state
        .metrics
        .batch_latency
        .observe(started.elapsed().as_secs_f64());
    state.metrics.batch_size.observe(size as f64);
    state
        .metrics
        .batches
        .with_label_values(&["committed"])
        .inc();
    Ok(Round::Committed { batch_id, size })
}

async fn send_commit(
    client: &PeerServiceClient<Channel>,
    commit: &BatchCommit,
    timeout: std::time::Duration,
) -> Result<Vec<u8>, String> {
    let mut client = client.clone();
    match tokio::time::timeout(timeout, client.commit_batch(commit.clone())).await {
        Ok(Ok(ack)) => Ok(ack.into_inner().results_digest),
        Ok(Err(s)) => Err(s.to_string()),
        Err(_) => Err("timed out".to_owned()),
    }
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
    party: u8,
    from: u64,
    to: u64,
) -> Result<(), String> {
    let Some((_, client)) = peers.clients.iter().find(|(p, _)| *p == party) else {
        return Err(format!("unknown peer {party}"));
    };
    tracing::info!(
        party,
        from,
        to,
        "replaying batches to a peer that is behind"
    );
    for id in from..=to {
        let b = state
            .store
            .batch(id)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("batch {id} missing from the batch log"))?;
        let commit =
            BatchCommit::decode(b.commit.as_slice()).map_err(|_| format!("batch {id} corrupt"))?;
        let theirs = send_commit(client, &commit, state.config.batch.commit_timeout()).await?;
        if theirs != b.results_digest {
            tracing::error!(batch_id = id, party, "replayed batch: peer results differ");
        }
    }
    Ok(())
}

/// Fetches batches `from..=to` from `party`'s batch log and applies their
/// recorded outcomes here.
async fn fetch_missed(
    state: &Arc<NodeState>,
    peers: &Peers,
    party: u8,
    from: u64,
    to: u64,
) -> Result<(), String> {
    let client = peers
        .client(party)
        .ok_or_else(|| format!("unknown peer {party}"))?;
    tracing::warn!(
        party,
        from,
        to,
        "a peer applied batches this node lacks; fetching them"
    );
    for id in from..=to {
        let mut c = client.clone();
        let commit = tokio::time::timeout(
            state.config.batch.peer_rpc_timeout(),
            c.fetch_batch(FetchBatchRequest { batch_id: id }),
        )
        .await
        .map_err(|_| format!("party {party} did not send batch {id} in time"))?
        .map_err(|s| format!("party {party} could not send batch {id}: {}", s.message()))?
        .into_inner();
        if !commit.outcomes_recorded {
            return Err(format!(
                "batch {id} from party {party} has no recorded outcomes"
            ));
        }
        apply_commit(state, commit)
            .await
            .map_err(|e| format!("applying fetched batch {id}: {e}"))?;
    }
    Ok(())
}

/// Votes on a proposal (parties 1 and 2).
pub fn vote(state: &NodeState, proposal: &BatchProposal) -> Result<BatchVote, String> {
    let meta = state.store.meta().map_err(|e| e.to_string())?;
    let behind = proposal.batch_id != meta.last_applied_batch + 1;
    let mut q = state.queue();
    q.release_all_but(Some(proposal.batch_id));
    let mut votes = Vec::with_capacity(proposal.items.len());
    for item in &proposal.items {
        let id = crate::ids::RequestId::from_slice(&item.request_id);
        let want = digest_of(&item.envelope_digest);
        let v = match (id, want) {
            (Some(id), Some(want)) if !behind => match q.digest(&id) {
                Some(d) if d == want => {
                    q.reserve(&id, proposal.batch_id);
                    Vote::Accept
                }
                Some(_) => Vote::DigestMismatch,
                // Intake stores a request before queueing it: one that is
                // stored but still pending is on its way into the queue.
                None => match state.store.request(&id) {
                    Ok(Some(r)) if r.state() == Some(RequestState::Final) => Vote::AlreadyFinal,
                    _ => Vote::Missing,
                },
            },
            _ => Vote::Missing,
        };
        votes.push(v as i32);
    }
    Ok(BatchVote {
        batch_id: proposal.batch_id,
        votes,
        last_applied_batch_id: meta.last_applied_batch,
    })
}

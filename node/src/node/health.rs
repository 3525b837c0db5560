//! Liveness and readiness that mean progress: what `/livez` and `/readyz` answer, the peer
//! probe behind readiness, and the gauges for the same (refreshed on every scrape).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sdk_orb::PartyId;
use shared_proto::v1::PingRequest;
use tokio::sync::watch;

use super::NodeState;
use crate::clock::now_ms;
use crate::links::Peers;

/// Progress and peer state, one per node.
#[derive(Debug)]
pub struct Health {
    last_commit: Mutex<Instant>,
    peers: Vec<PeerHealth>,
}

#[derive(Debug)]
struct PeerHealth {
    party: PartyId,
    /// The last ping answered, by that party.
    up: AtomicBool,
    /// When a ping was last answered; `None`: never since start.
    last_ok: Mutex<Option<Instant>>,
}

impl Health {
    /// Starts the commit clock now: a node that just started has not been stuck yet.
    pub(crate) fn new(peers: impl IntoIterator<Item = PartyId>) -> Self {
        Self {
            last_commit: Mutex::new(Instant::now()),
            peers: peers
                .into_iter()
                .map(|party| PeerHealth {
                    party,
                    up: AtomicBool::new(false),
                    last_ok: Mutex::new(None),
                })
                .collect(),
        }
    }

    /// A batch was applied here.
    pub(crate) fn committed(&self) {
        *self.last_commit.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Seconds since the last batch applied here (or since start).
    pub fn since_commit(&self) -> Duration {
        self.last_commit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// Records a ping of `party`.
    pub(crate) fn probed(&self, party: PartyId, ok: bool) {
        if let Some(p) = self.peers.iter().find(|p| p.party == party) {
            p.up.store(ok, Ordering::SeqCst);
            if ok {
                *p.last_ok.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            }
        }
    }

    /// Whether the last ping of `party` was answered.
    pub fn peer_up(&self, party: PartyId) -> bool {
        self.peers
            .iter()
            .any(|p| p.party == party && p.up.load(Ordering::SeqCst))
    }

    fn all_peers_up(&self) -> bool {
        self.peers.iter().all(|p| p.up.load(Ordering::SeqCst))
    }

    fn peers_down(&self) -> Vec<PeerDown> {
        self.peers
            .iter()
            .filter(|p| !p.up.load(Ordering::SeqCst))
            .map(|p| PeerDown {
                party: p.party,
                last_answer_s: p
                    .last_ok
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .map(|t| t.elapsed().as_secs()),
            })
            .collect()
    }
}

/// Why `/livez` answers 503: the batch loop makes no progress while work waits.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Stuck {
    /// The oldest pending request outlived its bound although both peers answer.
    #[error("stuck: oldest pending request {age_s} s old (bound {bound_s} s) while peers are up")]
    OldestPending {
        /// Its age.
        age_s: u64,
        /// `health.max_pending_age_s`.
        bound_s: u64,
    },
    /// No batch applied for longer than the bound while requests wait.
    #[error(
        "stuck: no batch committed for {gap_s} s (bound {bound_s} s) while {pending} requests wait"
    )]
    NoCommit {
        /// Seconds without a commit, counted from when the oldest waiting request arrived
        /// if that is later.
        gap_s: u64,
        /// `health.max_commit_gap_s`.
        bound_s: u64,
        /// Requests waiting.
        pending: usize,
    },
}

/// A peer whose last ping went unanswered.
#[derive(Debug, PartialEq, Eq)]
pub struct PeerDown {
    /// The peer.
    pub party: PartyId,
    /// Seconds since it last answered; `None`: never since this node started.
    pub last_answer_s: Option<u64>,
}

impl std::fmt::Display for PeerDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.last_answer_s {
            None => write!(
                f,
                "peer {} unreachable (never answered: peer identity not confirmed yet)",
                self.party.get()
            ),
            Some(s) => write!(
                f,
                "peer {} unreachable (last answered {s} s ago)",
                self.party.get()
            ),
        }
    }
}

/// Why `/readyz` answers 503.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NotReady {
    /// The store and share database are still loading, or the servers are starting.
    #[error("not ready: starting (store not loaded or not serving yet)")]
    Starting,
    /// Shutting down.
    #[error("not ready: shutting down")]
    Draining,
    /// A peer does not answer.
    #[error("not ready: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Peers(Vec<PeerDown>),
}

/// Seconds the oldest pending request has waited (0: none) and how many wait.
fn pending(state: &NodeState) -> (u64, usize) {
    let q = state.queue();
    let oldest = q.oldest(1).first().map(|c| c.received_ms);
    let age = oldest.map_or(0, |ms| now_ms().saturating_sub(ms) / 1000);
    (age, q.len())
}

/// `/livez`: the batch loop is not stuck.
///
/// # Errors
/// [`Stuck`], with the reason an operator reads.
pub fn liveness(state: &NodeState) -> Result<(), Stuck> {
    let cfg = &state.config.health;
    let (age_s, pending) = pending(state);
    if pending == 0 {
        return Ok(());
    }
    if age_s > cfg.max_pending_age_s && state.health.all_peers_up() {
        return Err(Stuck::OldestPending {
            age_s,
            bound_s: cfg.max_pending_age_s,
        });
    }
    // Idle time before the oldest request arrived is not stuck time.
    let gap_s = state.health.since_commit().as_secs().min(age_s);
    if gap_s > cfg.max_commit_gap_s {
        return Err(Stuck::NoCommit {
            gap_s,
            bound_s: cfg.max_commit_gap_s,
            pending,
        });
    }
    Ok(())
}

/// `/readyz`: store loaded, serving, not draining, and both peers answer over their
/// authenticated channels.
///
/// # Errors
/// [`NotReady`], with the reason an operator reads.
pub fn readiness(state: &NodeState) -> Result<(), NotReady> {
    if state.is_draining() {
        return Err(NotReady::Draining);
    }
    if !state.is_ready() {
        return Err(NotReady::Starting);
    }
    let down = state.health.peers_down();
    if !down.is_empty() {
        return Err(NotReady::Peers(down));
    }
    Ok(())
}

/// Sets the health gauges from the current state (called before each scrape).
pub fn refresh_metrics(state: &NodeState) {
    let m = &state.metrics;
    let (age_s, _) = pending(state);
    m.oldest_pending_age
        .set(i64::try_from(age_s).unwrap_or(i64::MAX));
    m.since_commit
        .set(i64::try_from(state.health.since_commit().as_secs()).unwrap_or(i64::MAX));
    for p in &state.health.peers {
        m.set_peer_up(p.party, p.up.load(Ordering::SeqCst));
    }
    m.ready.set(i64::from(readiness(state).is_ok()));
}

/// Pings every peer each `health.peer_probe_interval_ms` until `shutdown` turns true.
pub async fn probe_peers(
    state: std::sync::Arc<NodeState>,
    peers: Peers,
    mut shutdown: watch::Receiver<bool>,
) {
    let interval = state.config.health.peer_probe_interval();
    let timeout = state.config.batch.peer_rpc_timeout();
    let cfg = &state.config;
    if cfg.health.max_pending_age_s.saturating_mul(1000) <= cfg.batch.request_timeout_ms {
        tracing::warn!(
            max_pending_age_s = cfg.health.max_pending_age_s,
            request_timeout_ms = cfg.batch.request_timeout_ms,
            "health.max_pending_age_s is not above the request time-out: /livez may read a \
             request that waits for its time-out as stuck"
        );
    }
    loop {
        let pings = peers.clients.iter().map(|(party, client)| {
            let mut client = client.clone();
            async move {
                let r = tokio::time::timeout(timeout, client.ping(PingRequest {})).await;
                (*party, r)
            }
        });
        for (party, r) in futures::future::join_all(pings).await {
            let ok = match r {
                Ok(Ok(resp)) if PartyId::try_from(resp.get_ref().party_id) == Ok(party) => true,
                Ok(Ok(resp)) => {
                    tracing::warn!(
                        party = party.get(),
                        answered = resp.get_ref().party_id,
                        "peer answered a ping with another party id"
                    );
                    false
                }
                Ok(Err(status)) => {
                    tracing::debug!(party = party.get(), code = ?status.code(), "peer ping refused");
                    false
                }
                Err(_) => false,
            };
            if ok != state.health.peer_up(party) {
                tracing::info!(
                    party = party.get(),
                    reachable = ok,
                    "peer reachability changed"
                );
            }
            state.health.probed(party, ok);
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.wait_for(|s| *s) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_read_as_an_operator_needs_them() {
        let s = Stuck::OldestPending {
            age_s: 412,
            bound_s: 300,
        };
        assert_eq!(
            s.to_string(),
            "stuck: oldest pending request 412 s old (bound 300 s) while peers are up"
        );
        let r = NotReady::Peers(vec![
            PeerDown {
                party: PartyId::ALL[1],
                last_answer_s: None,
            },
            PeerDown {
                party: PartyId::ALL[2],
                last_answer_s: Some(12),
            },
        ]);
        assert_eq!(
            r.to_string(),
            "not ready: peer 1 unreachable (never answered: peer identity not confirmed yet); \
             peer 2 unreachable (last answered 12 s ago)"
        );
    }

    #[test]
    fn a_peer_is_up_only_while_its_last_ping_was_answered() {
        let [_, one, two] = PartyId::ALL;
        let h = Health::new([one, two]);
        assert!(!h.all_peers_up());
        h.probed(one, true);
        h.probed(two, true);
        assert!(h.all_peers_up());
        h.probed(two, false);
        assert_eq!(
            h.peers_down(),
            vec![PeerDown {
                party: two,
                last_answer_s: Some(0)
            }]
        );
    }
}

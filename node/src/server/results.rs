//! `StreamResults`: where its calls wait, and what each sends.
//!
//! A call naming request ids registers them with [`ResultWaiters`]; one task takes the node's
//! finalised results and hands each to the calls that named its id, and to no other, so a
//! result costs one wake-up per call that asked for it. A call without ids (a results
//! consumer's) follows every result. Store reads run on the blocking pool.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use prost::Message;
use shared_proto::v1::{NodeResult, SignedResult};
use tokio::sync::{broadcast, mpsc, OwnedSemaphorePermit};
use tonic::Status;

use super::orb::may_read;
use crate::ids::RequestId;
use crate::node::NodeState;
use crate::tls::OrbCaller;

type Sent = mpsc::Sender<Result<SignedResult, Status>>;
type Arrival = (RequestId, Arc<SignedResult>);
/// Per request id, the calls waiting on it (by registration key).
type Waiting = HashMap<RequestId, Vec<(u64, mpsc::Sender<Arrival>)>>;

/// The calls waiting on named request ids.
#[derive(Debug, Default)]
pub(crate) struct ResultWaiters {
    waiting: Mutex<Waiting>,
    next_key: AtomicU64,
}

impl ResultWaiters {
    fn waiting(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands each result broadcast on `results` to the calls waiting on its id, until the
    /// broadcast closes. Where it fell behind, every registration is dropped instead: each call
    /// then registers again and reads the store for what it still waits on.
    pub(crate) async fn dispatch(&self, mut results: broadcast::Receiver<Arc<SignedResult>>) {
        loop {
            match results.recv().await {
                Ok(result) => {
                    let id = NodeResult::decode(result.result.as_slice())
                        .ok()
                        .and_then(|r| RequestId::from_slice(&r.request_id));
                    let Some(id) = id else { continue };
                    let waiting = self.waiting().remove(&id);
                    for (_, call) in waiting.into_iter().flatten() {
                        // Never full: a registration holds room for one arrival per id.
                        let _ = call.try_send((id, result.clone()));
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(
                        missed = n,
                        "result streams fell behind; they read the store again"
                    );
                    self.waiting().clear();
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Registers a call waiting on `ids`.
    fn register(self: &Arc<Self>, ids: &HashSet<RequestId>) -> Registration {
        let (tx, arrivals) = mpsc::channel(ids.len().max(1));
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let mut waiting = self.waiting();
        for id in ids {
            waiting.entry(*id).or_default().push((key, tx.clone()));
        }
        Registration {
            waiters: self.clone(),
            key,
            ids: ids.clone(),
            arrivals,
        }
    }
}

/// A call's place in [`ResultWaiters`]; its arrivals end once each id it named was handed
/// over or the registrations were dropped. Unregisters on drop.
struct Registration {
    waiters: Arc<ResultWaiters>,
    key: u64,
    ids: HashSet<RequestId>,
    arrivals: mpsc::Receiver<Arrival>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut waiting = self.waiters.waiting();
        for id in &self.ids {
            if let Entry::Occupied(mut calls) = waiting.entry(*id) {
                calls.get_mut().retain(|(key, _)| *key != self.key);
                if calls.get().is_empty() {
                    calls.remove();
                }
            }
        }
    }
}

/// Sends `who` the results of `waiting` it may read, already final ones first, then each as
/// it is finalised; ends when all were sent, the caller hangs up, or the node shuts down. An id
/// `who` may not read (another gateway's request) is waited on like one not received yet, and
/// never sent.
pub(crate) async fn stream_named(
    st: Arc<NodeState>,
    who: OrbCaller,
    waiters: Arc<ResultWaiters>,
    mut waiting: HashSet<RequestId>,
    tx: Sent,
    _permit: OwnedSemaphorePermit,
) {
    let drained = st.drained();
    tokio::pin!(drained);
    loop {
        // Register before reading the store, so that no result falls in between.
        let mut registration = waiters.register(&waiting);
        let stored = match stored_results(&st, who, &waiting).await {
            Ok(stored) => stored,
            Err(s) => {
                let _ = tx.send(Err(s)).await;
                return;
            }
        };
        for (id, result) in stored {
            waiting.remove(&id);
            if tx.send(Ok(result)).await.is_err() {
                return;
            }
        }
        if waiting.is_empty() {
            return;
        }
        loop {
            let arrived = tokio::select! {
                a = registration.arrivals.recv() => a,
                () = &mut drained => {
                    let _ = tx.send(Err(shutting_down())).await;
                    return;
                }
                () = tx.closed() => return,
            };
            let Some((id, result)) = arrived else {
                break;
            };
            if !waiting.contains(&id) {
                continue;
            }
            match readable(&st, who, id).await {
                Ok(true) => {}
                Ok(false) => continue,
                Err(s) => {
                    let _ = tx.send(Err(s)).await;
                    return;
                }
            }
            waiting.remove(&id);
            if tx.send(Ok((*result).clone())).await.is_err() || waiting.is_empty() {
                return;
            }
        }
    }
}

/// Sends every result finalised from now on (a results consumer's call without ids), until the
/// caller hangs up or the node shuts down.
pub(crate) async fn stream_all(
    st: Arc<NodeState>,
    mut results: broadcast::Receiver<Arc<SignedResult>>,
    tx: Sent,
    _permit: OwnedSemaphorePermit,
) {
    let drained = st.drained();
    tokio::pin!(drained);
    loop {
        let received = tokio::select! {
            r = results.recv() => r,
            () = &mut drained => {
                let _ = tx.send(Err(shutting_down())).await;
                return;
            }
            () = tx.closed() => return,
        };
        match received {
            Ok(result) => {
                if tx.send(Ok((*result).clone())).await.is_err() {
                    return;
                }
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                let _ = tx
                    .send(Err(Status::resource_exhausted(format!(
                        "stream fell behind by {n} results; use GetResult"
                    ))))
                    .await;
                return;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// A graceful shutdown waits on open calls: a stream ends, so the server stops and the orb,
/// told why, asks the restarted node with `GetResult`.
fn shutting_down() -> Status {
    Status::unavailable("node shutting down; use GetResult once it is back")
}

/// The stored results among `ids` that `who` may read.
async fn stored_results(
    st: &Arc<NodeState>,
    who: OrbCaller,
    ids: &HashSet<RequestId>,
) -> Result<Vec<(RequestId, SignedResult)>, Status> {
    let (st, ids) = (st.clone(), ids.clone());
    tokio::task::spawn_blocking(move || {
        let mut found = Vec::new();
        for id in ids {
            if !may_read_stored(&st, &who, &id)? {
                continue;
            }
            if let Some(bytes) = st.store.result(&id).map_err(store_error)? {
                let result = SignedResult::decode(bytes.as_slice())
                    .map_err(|_| Status::internal("stored result is corrupt"))?;
                found.push((id, result));
            }
        }
        Ok(found)
    })
    .await
    .map_err(|_| Status::internal("lookup failed"))?
}

/// Whether `who` may read the result of `id`.
async fn readable(st: &Arc<NodeState>, who: OrbCaller, id: RequestId) -> Result<bool, Status> {
    let st = st.clone();
    tokio::task::spawn_blocking(move || may_read_stored(&st, &who, &id))
        .await
        .map_err(|_| Status::internal("lookup failed"))?
}

/// [`may_read`] by the request's record in the store; a results consumer needs no read.
fn may_read_stored(st: &NodeState, who: &OrbCaller, id: &RequestId) -> Result<bool, Status> {
    if who.role == crate::tls::OrbRole::ResultsConsumer {
        return Ok(true);
    }
    let record = st.store.request(id).map_err(store_error)?;
    Ok(may_read(who, record.as_ref()))
}

fn store_error(e: crate::store::StoreError) -> Status {
    Status::internal(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result_of(id: RequestId) -> Arc<SignedResult> {
        let result = NodeResult {
            request_id: id.0.to_vec(),
            ..NodeResult::default()
        };
        Arc::new(SignedResult {
            result: result.encode_to_vec(),
            ..SignedResult::default()
        })
    }

    /// Whether a call's arrivals have ended (without waiting).
    fn ended(r: &mut Registration) -> bool {
        matches!(
            r.arrivals.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        )
    }

    #[tokio::test]
    async fn a_result_reaches_only_the_calls_that_named_it() {
        let waiters = Arc::new(ResultWaiters::default());
        let (results, rx) = broadcast::channel(16);
        let dispatch = tokio::spawn({
            let waiters = waiters.clone();
            async move { waiters.dispatch(rx).await }
        });
        let (a, b) = (RequestId([1; 16]), RequestId([2; 16]));
        let mut named_a = waiters.register(&[a].into());
        let mut named_b = waiters.register(&[b].into());
        let mut named_both = waiters.register(&[a, b].into());
        for id in [a, b] {
            let _ = results.send(result_of(id));
        }
        let first = |r: &mut Registration| r.arrivals.try_recv().ok().map(|(id, _)| id);
        assert_eq!(named_a.arrivals.recv().await.map(|(id, _)| id), Some(a));
        assert_eq!(named_b.arrivals.recv().await.map(|(id, _)| id), Some(b));
        assert_eq!(first(&mut named_both), Some(a));
        assert_eq!(first(&mut named_both), Some(b));
        // Each id was handed over once: the calls' arrivals end, nothing stays registered.
        assert!(ended(&mut named_a) && ended(&mut named_both));
        assert!(waiters.waiting().is_empty());

        // A call that goes away unregisters.
        let gone = waiters.register(&[a, b].into());
        let _kept = waiters.register(&[b].into());
        drop(gone);
        assert_eq!(waiters.waiting().len(), 1);
        assert_eq!(waiters.waiting()[&b].len(), 1);
        drop(named_b);
        drop(results);
        dispatch.await.ok();
    }

    #[tokio::test]
    async fn falling_behind_ends_every_calls_arrivals() {
        let waiters = Arc::new(ResultWaiters::default());
        let (results, rx) = broadcast::channel(1);
        let mut named = waiters.register(&[RequestId([3; 16])].into());
        for n in 0..3 {
            let _ = results.send(result_of(RequestId([n; 16])));
        }
        drop(results);
        waiters.dispatch(rx).await;
        assert!(waiters.waiting().is_empty());
        assert!(
            ended(&mut named),
            "the call is not told to read the store again"
        );
    }
}

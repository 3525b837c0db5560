//! A node's shared state behind one cheap `Arc` handle: the store, the
//! in-memory share database and pending queue, keys, metrics, readiness.

pub mod health;
mod snapshots;
pub(crate) use snapshots::{forget as forget_in_snapshot, maintain as maintain_snapshot};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use sdk_orb::PartyId;
use shared_proto::v1::SignedResult;
use tokio::sync::{broadcast, Notify};

use crate::batch::BatchEvaluator;
use crate::config::NodeConfig;
use crate::ids::EnvelopeDigest;
use crate::intake::IntakePolicy;
use crate::keys::{self, ResultSigner};
use crate::metrics::Metrics;
use crate::queue::PendingQueue;
use crate::shares::ShareDb;
use crate::store::postgres::{PgOptions, PgStore};
use crate::store::redb::RedbStore;
use crate::store::{Store, StoreError};

/// Pending requests whose opened shares stay in memory, in batches of `batch.max_size`: each
/// envelope is then opened once, at intake, rather than again when its batch is evaluated and
/// applied. At the defaults, 256 requests, about 20 MB.
const KEPT_BATCHES: usize = 4;

/// Errors while starting a node.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Key files.
    #[error(transparent)]
    Keys(#[from] keys::KeyError),
    /// TLS files.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The intake policy.
    #[error(transparent)]
    Intake(#[from] crate::intake::IntakeSetupError),
    /// The evaluator cannot work on the loaded database.
    #[error(transparent)]
    Evaluator(#[from] crate::batch::EvalError),
    /// The peer clients.
    #[error(transparent)]
    Peers(#[from] crate::links::PeersError),
    /// The listeners.
    #[error("listeners: {0}")]
    Listen(#[from] std::io::Error),
}

/// The store `config` names: redb in `data_dir`, or PostgreSQL where `store.url` is set,
/// whose connections run on the caller's runtime. Call it from a blocking thread of that
/// runtime (`spawn_blocking`), as every store method.
///
/// # Errors
/// The store cannot be opened; PostgreSQL without a runtime.
pub fn open_store(config: &NodeConfig) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match &config.store.url {
        None => Arc::new(RedbStore::open(&config.data_dir)?),
        Some(url) => {
            let rt = tokio::runtime::Handle::try_current().map_err(|_| StoreError::NoRuntime)?;
            Arc::new(PgStore::open(
                &PgOptions {
                    url: url.clone(),
                    schema: config.store.schema.clone(),
                    pool_size: config.store.pool_size,
                    tls: config.store.pg_tls(),
                },
                rt,
            )?)
        }
    })
}

/// The node's state.
#[derive(Debug)]
pub struct NodeState {
    pub(crate) party: PartyId,
    pub(crate) config: NodeConfig,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) intake: IntakePolicy,
    pub(crate) signer: ResultSigner,
    /// The peers' pinned result verifying keys, by party, the current one first and then those
    /// before a rotation: what their batch attestations are checked against.
    pub(crate) peer_result_keys:
        std::collections::HashMap<PartyId, Vec<ed25519_dalek::VerifyingKey>>,
    pub(crate) metrics: Metrics,
    /// Progress and peer reachability, for `/livez` and `/readyz`.
    pub health: crate::node::health::Health,
    pub(crate) evaluator: Arc<dyn BatchEvaluator>,
    /// Pending requests whose payload this node could not open when it started (sealed to
    /// an HPKE key it no longer holds). Fixed after start: every envelope accepted later was
    /// opened at intake, and the keys change only with a restart.
    pub(crate) unopenable: std::collections::HashSet<crate::ids::RequestId>,
    queue: Mutex<PendingQueue>,
    shares: RwLock<ShareDb>,
    /// A share snapshot should be written now rather than at the next interval.
    pub(crate) snapshot_due: AtomicBool,
    /// Serializes scrubbing deletions from the share snapshot with installing a new one; holds
    /// the serial ids deleted while a new one is being written (scrubbed from it before it is
    /// installed).
    pub(crate) snapshot_deleted: Mutex<Option<Vec<u64>>>,
    pub(crate) results_tx: broadcast::Sender<Arc<SignedResult>>,
    /// Serialises batch application.
    /// Held by the blocking task itself, so an apply whose caller went away
    /// (a peer's commit call cancelled) still excludes the next one until it
    /// ends.
    pub(crate) apply_lock: Arc<tokio::sync::Mutex<()>>,
    /// The statistics this node counted when it evaluated a batch attempt, written when that
    /// attempt is applied.
    pub(crate) pending_stats:
        std::sync::Mutex<Option<((u64, u32), crate::store::period::StatsWrite)>>,
    /// Wakes the batch loop early (queue reached a full batch).
    pub(crate) batch_wakeup: Notify,
    /// Incoming MPC links from the peers.
    pub links: crate::links::LinkHub,
    /// Clients for the two peers, set when the node starts serving.
    pub peers: std::sync::OnceLock<crate::links::Peers>,
    /// Recovery sessions this node helps: nonces served, pad secrets offered.
    pub(crate) recovery: crate::recovery::sessions::Sessions,
    ready: AtomicBool,
    /// Shutting down: submissions are refused and open result streams end.
    draining: tokio::sync::watch::Sender<bool>,
}

impl NodeState {
    /// Opens the store (redb in `data_dir`, or PostgreSQL where
    /// `store.url` is set), loads the share database (with a progress bar and a
    /// load-speed log line) and requeues pending requests.
    ///
    /// # Errors
    /// Unreadable keys, store failure.
    pub fn open(
        config: NodeConfig,
        evaluator: Arc<dyn BatchEvaluator>,
    ) -> Result<Arc<Self>, StartError> {
        let store = open_store(&config)?;
        Self::with_store(config, store, evaluator)
    }

    /// Like [`NodeState::open`] with a given store implementation.
    ///
    /// # Errors
    /// Unreadable keys, store failure.
    pub fn with_store(
        config: NodeConfig,
        store: Arc<dyn Store>,
        evaluator: Arc<dyn BatchEvaluator>,
    ) -> Result<Arc<Self>, StartError> {
        let party = config.party_id;
        let hpke = keys::read_key32(&config.keys.hpke_secret)?;
        let sign = keys::read_key32(&config.keys.result_signing)?;
        let orbs = keys::read_allow_list(&config.keys.orb_allow_list)?;
        let mut intake = IntakePolicy::new(party, &hpke, orbs, &config.intake)?;
        if let Some(previous) = &config.keys.hpke_previous_secret {
            intake = intake.with_previous_key(&*keys::read_key32(previous)?)?;
        }
        let hybrid = (config.keys.hpke_hybrid_secret.as_deref())
            .map(keys::read_key32)
            .transpose()?;
        intake = intake.with_envelope_versions(hybrid.as_deref(), &config.envelope)?;
        let signer = ResultSigner::from_seed(&sign, party);
        let mut peer_result_keys = std::collections::HashMap::new();
        for p in &config.peers {
            let Some(current) = &p.result_key else {
                continue;
            };
            let accepted = std::iter::once(current)
                .chain(&p.previous_result_keys)
                .map(|path| {
                    ed25519_dalek::VerifyingKey::from_bytes(&*keys::read_key32(path)?).map_err(
                        |_| keys::KeyError::Format {
                            path: path.clone(),
                            what: "not an Ed25519 verifying key",
                        },
                    )
                })
                .collect::<Result<Vec<_>, _>>()?;
            peer_result_keys.insert(p.party_id, accepted);
        }
        let metrics = Metrics::new(party);
        metrics.init_peers(config.peers.iter().map(|p| p.party_id));
        if let Some(tuning) = evaluator.cpu_tuning() {
            metrics.cpu_tuning(tuning);
        }
        // The gauges show the latest opened period from the start, not only after the next.
        if let Some(h) = store.opened_histograms(None)? {
            metrics.record_opened_histograms(&h);
        }
        let health = crate::node::health::Health::new(config.peers.iter().map(|p| p.party_id));

        let (shares, snapshot_due) = load_shares(store.as_ref(), &config, &metrics)?;
        evaluator.prepare(&shares)?;
        let mut queue = PendingQueue::keeping_opened(KEPT_BATCHES * config.batch.max_size);
        let mut unopenable = std::collections::HashSet::new();
        let pending = store.pending_requests()?;
        for (id, rec) in &pending {
            let opened = store.envelope(id)?.and_then(|env| intake.reopen(&env).ok());
            let opens = opened.is_some();
            if let Some(d) = EnvelopeDigest::from_slice(&rec.digest) {
                queue.push(*id, d, rec.received_ms, opened);
            }
            if !opens {
                tracing::warn!(request_id = %id, "pending request no longer opens here (HPKE key rotated?); it will fail on all three nodes");
                unopenable.insert(*id);
            }
        }
        if !pending.is_empty() {
            tracing::info!(
                count = pending.len(),
                "requeued pending requests from the store"
            );
        }
        let meta = store.meta()?;
        metrics
            .enrolled
            .set(i64::try_from(shares.len()).unwrap_or(i64::MAX));
        metrics
            .pending
            .set(i64::try_from(queue.len()).unwrap_or(i64::MAX));
        metrics
            .last_batch
            .set(i64::try_from(meta.last_applied_batch).unwrap_or(i64::MAX));
        metrics
            .store_bytes
            .set(i64::try_from(store.size_bytes()).unwrap_or(i64::MAX));
        let (results_tx, _) = broadcast::channel(4096);
        Ok(Arc::new(Self {
            party: signer.party(),
            config,
            store,
            intake,
            signer,
            peer_result_keys,
            metrics,
            health,
            evaluator,
            unopenable,
            queue: Mutex::new(queue),
            shares: RwLock::new(shares),
            snapshot_due: AtomicBool::new(snapshot_due),
            snapshot_deleted: Mutex::new(None),
            results_tx,
            apply_lock: Arc::new(tokio::sync::Mutex::new(())),
            pending_stats: std::sync::Mutex::new(None),
            batch_wakeup: Notify::new(),
            links: crate::links::LinkHub::default(),
            peers: std::sync::OnceLock::new(),
            recovery: Default::default(),
            ready: AtomicBool::new(false),
            draining: tokio::sync::watch::Sender::new(false),
        }))
    }

    /// This node's party id.
    pub fn party(&self) -> PartyId {
        self.party
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The result verifying key.
    pub fn result_verifying_key(&self) -> ed25519_dalek::VerifyingKey {
        self.signer.verifying_key()
    }

    /// The pending queue (poison-tolerant).
    pub(crate) fn queue(&self) -> MutexGuard<'_, PendingQueue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The share database for reading.
    pub fn shares(&self) -> RwLockReadGuard<'_, ShareDb> {
        self.shares.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn shares_mut(&self) -> RwLockWriteGuard<'_, ShareDb> {
        self.shares.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Number of pending requests.
    pub fn pending_len(&self) -> usize {
        self.queue().len()
    }

    /// Ready to serve: loaded and not shutting down.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) && !self.is_draining()
    }

    /// Shutting down.
    pub fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    /// Runs `f`, which calls the store, on a blocking thread: store calls block (the
    /// PostgreSQL store waits on the runtime there), so an async task makes them only here.
    ///
    /// # Errors
    /// What `f` returns; [`StoreError::Unfinished`] where its task panicked or was cancelled.
    pub async fn store_call<T, E>(
        self: &Arc<Self>,
        f: impl FnOnce(&NodeState) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let state = self.clone();
        tokio::task::spawn_blocking(move || f(&state))
            .await
            .map_err(|e| E::from(StoreError::Unfinished(e.to_string())))?
    }

    /// Completes once the node is shutting down.
    pub(crate) async fn drained(&self) {
        // The sender lives as long as `self`, so the wait ends only by draining.
        let _ = self.draining.subscribe().wait_for(|&d| d).await;
    }

    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
        self.metrics
            .ready
            .set(i64::from(ready && !self.is_draining()));
    }

    pub(crate) fn set_draining(&self) {
        self.draining.send_replace(true);
        self.metrics.ready.set(0);
    }
}

/// Loads every enrolled entry into memory (from the share snapshot where one fits, logging
/// the rate) and counts the time taken. Returns whether a new snapshot is due: none was
/// read, or more than [`SNAPSHOT_STALE_FRACTION`] of the entries came from the store.
fn load_shares(
    store: &dyn Store,
    config: &NodeConfig,
    metrics: &Metrics,
) -> Result<(ShareDb, bool), StoreError> {
    let path = config.store.snapshot_path(&config.data_dir);
    if let Some(p) = &path {
        // One a crash cut short holds share bytes and is never read.
        let _ = std::fs::remove_file(p.with_extension("tmp"));
    }
    let (db, report) = crate::store::load::share_db_logged(store, path.as_deref())?;
    metrics
        .load_ms
        .inc_by(u64::try_from(report.took.as_millis()).unwrap_or(u64::MAX));
    let due = path.is_some()
        && report.snapshot.is_none_or(|l| {
            l.from_store as f64 > SNAPSHOT_STALE_FRACTION * (l.from_store + l.from_snapshot) as f64
        });
    Ok((db, due))
}

/// The share of entries fetched from the store past which a start-up writes a new snapshot.
const SNAPSHOT_STALE_FRACTION: f64 = 0.01;

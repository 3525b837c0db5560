//! The production [`BatchEvaluator`]: the three-party matching pipeline of
//! docs/design.md section 6, run over the node-to-node MPC links.
//!
//! Per batch: every party builds the same list of pipeline requests from the
//! committed requests (request types are public), opens its links to the two
//! other parties for the commit's MPC session, agrees and confirms the pairwise
//! PRF seeds on them with fresh ephemeral X25519 keys
//! ([`ocelli_mpc::randomness::PairKeyExchange`]), and runs [`pipeline::evaluate`]. It is the
//! one place a node chooses its compute backend ([`evaluator_for`]).
//! Matching sees the database as it was before the batch; the opened bits are
//! turned into outcomes the same way on all three nodes.

use std::sync::Arc;
use std::time::Duration;

use ocelli_mpc::network::ChannelTransport;
use ocelli_mpc::pipeline::{self, PipelineConfig};
use ocelli_mpc::randomness::{CorrelatedRandomness, KeyAgreementError, PairKeyExchange};
use ocelli_mpc::requests::{
    comparisons, mark_malformed, needs_mpc, outcomes, pipeline_requests, refuse_malformed,
    shares_checked, MatchRules, PublicRequest,
};
use ocelli_mpc::scratch::ScratchPool;
use ocelli_mpc::session::Session;
use ocelli_mpc::Backend;
use rand_core::OsRng;
use sdk_orb::PartyId;
use zeroize::Zeroizing;

use crate::batch::{BatchEvaluator, EvalContext, EvalError, EvalRequest, NotEvaluated, Outcome};
use crate::config::NodeConfig;
use crate::links::MpcLink;
use crate::shares::ShareDb;

/// A pairwise PRF seed.
type Seed = Zeroizing<[u8; 32]>;

/// Why the matching evaluator cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The compute backend.
    #[error(transparent)]
    Backend(#[from] BuildError),
}

/// The evaluator a node runs: the MPC pipeline, or [`NotEvaluated`] when
/// matching is disabled.
///
/// # Errors
/// Unreadable or invalid node keys, or an engine that cannot run here.
pub fn evaluator_for(
    config: &NodeConfig,
) -> Result<std::sync::Arc<dyn BatchEvaluator>, SetupError> {
    if config.matching.enabled {
        mpc_evaluator(config)
    } else {
        Ok(std::sync::Arc::new(NotEvaluated))
    }
}

/// Why a backend cannot be built here.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The CPU backend.
    #[error(transparent)]
    Cpu(#[from] ocelli_cpu::CpuError),
    /// This build has no GPU backend.
    #[error("{}", crate::config::GPU_NOT_BUILT)]
    GpuNotBuilt,
    /// The GPU backend.
    #[cfg(feature = "gpu")]
    #[error("GPU engine: {0}")]
    Gpu(#[from] ocelli_gpu::GpuError),
}

/// The CPU backend on `threads` threads (0: one per core), with `kernel` or the fastest this
/// CPU runs.
///
/// # Errors
/// The kernel is not supported here, or the threads cannot start.
pub fn cpu(
    kernel: Option<ocelli_cpu::Kernel>,
    threads: usize,
) -> Result<ocelli_cpu::CpuEngine, ocelli_cpu::CpuError> {
    match (kernel, threads) {
        (None, 0) => Ok(ocelli_cpu::CpuEngine::new()),
        (kernel, threads) => {
            ocelli_cpu::CpuEngine::with(kernel.unwrap_or_else(ocelli_cpu::Kernel::detect), threads)
        }
    }
}

/// The tile and chunk the CPU engine of `config` runs with its kernel (`matching.cpu_kernel`,
/// the fastest here when `auto`): kept in the data directory for this CPU model, measured now
/// where none is kept, or the defaults where tuning is off ([`ocelli_cpu::tune`]). Logs the
/// choice on one line.
///
/// # Errors
/// A kernel this CPU cannot run, or the tuner's thread cannot start.
pub fn cpu_tuning(config: &NodeConfig) -> Result<ocelli_cpu::Tuning, ocelli_cpu::CpuError> {
    use ocelli_cpu::tune::{self, Source};
    let kernel = match config.matching.cpu_kernel.as_str() {
        "auto" => ocelli_cpu::Kernel::detect(),
        name => ocelli_cpu::Kernel::by_name(name)?,
    };
    let (tuning, source, seconds) = if config.matching.cpu_tuning && !tune::skipped_by_env() {
        let path = config.data_dir.join(tune::FILE_NAME);
        match tune::cached_or_tuned(&path, kernel, tune::BUDGET)? {
            (tuning, Source::Kept) => (tuning, "kept", 0.0),
            (tuning, Source::Measured { report, saved }) => {
                if let Err(e) = saved {
                    tracing::warn!(path = %path.display(), error = %e, "cannot keep the CPU tuning; the next start measures again");
                }
                (tuning, "measured", report.seconds)
            }
        }
    } else {
        (ocelli_cpu::Tuning::default_for(kernel), "default", 0.0)
    };
    let (p, d) = tuning.tile.shape();
    tracing::info!(
        kernel = kernel.name(),
        p,
        d,
        chunk = tuning.chunk,
        source,
        seconds,
        "CPU engine tile"
    );
    Ok(tuning)
}

/// The matching evaluator of `config` on its configured backend: the one place a node
/// chooses its backend; everything downstream is generic over [`Backend`].
///
/// # Errors
/// A backend that cannot run here.
fn mpc_evaluator(config: &NodeConfig) -> Result<Arc<dyn BatchEvaluator>, SetupError> {
    let m = &config.matching;
    match m.engine {
        crate::config::EngineKind::Cpu => {
            let tuning = cpu_tuning(config).map_err(BuildError::from)?;
            let backend = tuning.engine(m.threads).map_err(BuildError::from)?;
            Ok(Arc::new(
                MpcEvaluator::new(config, backend).with_cpu_tuning(tuning),
            ))
        }
        #[cfg(feature = "gpu")]
        crate::config::EngineKind::Gpu => {
            let backend =
                ocelli_gpu::GpuEngine::with_devices(&m.gpu_devices).map_err(BuildError::from)?;
            Ok(Arc::new(MpcEvaluator::new(config, backend)))
        }
        #[cfg(not(feature = "gpu"))]
        crate::config::EngineKind::Gpu => Err(BuildError::GpuNotBuilt.into()),
    }
}

/// The three-party matching pipeline on backend `B` as a batch evaluator.
pub struct MpcEvaluator<B> {
    party: PartyId,
    engine: B,
    cpu_tuning: Option<ocelli_cpu::Tuning>,
    pipeline: PipelineConfig,
    rules: MatchRules,
    round_timeout: Duration,
    /// The buffers of this node's batches, kept from one batch to the next.
    scratch: ScratchPool,
}

impl<B: Backend> std::fmt::Debug for MpcEvaluator<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpcEvaluator")
            .field("party", &self.party)
            .field("engine", &self.engine.name())
            .field("pipeline", &self.pipeline)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> MpcEvaluator<B> {
    /// The evaluator `config` describes, on `engine`. It holds no long-term key: each
    /// session's pairwise seeds are agreed on its links.
    pub fn new(config: &NodeConfig, engine: B) -> Self {
        let m = &config.matching;
        let mut pipeline = PipelineConfig::with_threshold(m.threshold);
        pipeline.privacy_max = m.privacy_max;
        pipeline.chunk_entries = m.chunk_entries;
        pipeline.max_pass_comparisons = m.max_pass_comparisons;
        Self {
            party: config.party_id,
            engine,
            cpu_tuning: None,
            pipeline,
            rules: MatchRules {
                mirror: m.mirror_detection,
                lookback: m.lookback,
            },
            round_timeout: Duration::from_millis(m.round_timeout_ms),
            scratch: ScratchPool::default(),
        }
    }

    /// Names the CPU engine's tuning, for the node's metrics ([`BatchEvaluator::cpu_tuning`]).
    #[must_use]
    pub fn with_cpu_tuning(mut self, tuning: ocelli_cpu::Tuning) -> Self {
        self.cpu_tuning = Some(tuning);
        self
    }

    /// Refuses the requests whose shares do not encode iris templates (docs/threat-model.md):
    /// a compromised orb could otherwise enrol or reset a serial to an "iris" that matches
    /// almost every later query, or re-authenticate as any serial. Runs before matching, on the
    /// backend's circuit over the batch's session.
    fn check_shares<T: ocelli_mpc::Transport>(
        &self,
        session: &mut Session<'_, T>,
        ctx: &EvalContext<'_>,
        public: &[PublicRequest],
        pipeline_requests: &mut [ocelli_mpc::pipeline::PipelineRequest<'_>],
    ) -> Result<Vec<bool>, EvalError> {
        let started = std::time::Instant::now();
        let before = session.traffic();
        let refused = refuse_malformed(
            &mut self.engine.circuit(session),
            public,
            pipeline_requests,
            self.pipeline.max_pass_comparisons,
        )
        .map_err(|source| EvalError::Network {
            batch_id: ctx.batch_id,
            source,
        })?;
        let after = session.traffic();
        let count = refused.iter().filter(|&&r| r).count();
        if count > 0 {
            tracing::warn!(
                batch_id = ctx.batch_id,
                refused = count,
                "malformed shares refused"
            );
        }
        tracing::info!(
            batch_id = ctx.batch_id,
            checked = public.iter().filter(|r| shares_checked(r)).count(),
            rounds = after.rounds - before.rounds,
            bytes_sent = after.bytes_sent - before.bytes_sent,
            seconds = started.elapsed().as_secs_f64(),
            "well-formedness check done"
        );
        Ok(refused)
    }

    /// Counts the batch's distance statistics after its matching, on the same session.
    #[allow(clippy::too_many_arguments)]
    fn count_stats<T: ocelli_mpc::Transport>(
        &self,
        session: &mut Session<'_, T>,
        ctx: &EvalContext<'_>,
        slot: &crate::counting::batch::StatsSlot,
        public: &[PublicRequest],
        outcomes: &[ocelli_mpc::requests::Outcome],
        shares: &[Box<sdk_orb::shamir::PartyShares>],
        db: &ShareDb,
    ) -> Result<(), EvalError> {
        let started = std::time::Instant::now();
        let before = session.traffic();
        let queries: Vec<&sdk_orb::shamir::PartyShares> = shares.iter().map(|s| &**s).collect();
        let write = crate::counting::batch::count_batch(
            session,
            &self.engine,
            slot,
            public,
            outcomes,
            &queries,
            db.rows(),
        )
        .map_err(|source| EvalError::Network {
            batch_id: ctx.batch_id,
            source,
        })?;
        let after = session.traffic();
        tracing::info!(
            batch_id = ctx.batch_id,
            pairs = write.period.impostor_pairs
                + write.period.genuine_pairs
                + write.period.reauthentication_pairs,
            rounds = after.rounds - before.rounds,
            bytes_sent = after.bytes_sent - before.bytes_sent,
            seconds = started.elapsed().as_secs_f64(),
            "distance statistics counted"
        );
        *slot
            .output
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(write);
        Ok(())
    }

    /// Opens this party's two links for `session`: it dials the higher party
    /// id and accepts from the lower one.
    fn links(&self, ctx: &EvalContext<'_>) -> Result<(MpcLink, MpcLink), EvalError> {
        let me = self.party;
        let peers = ctx.peers.ok_or(EvalError::NotServing)?;
        let open = |peer: PartyId| {
            let hub = ctx.links;
            let session = ctx.session;
            let timeout = self.round_timeout;
            async move {
                if me < peer {
                    let dialer = peers.mpc(peer).ok_or(EvalError::NoClient(peer))?;
                    dialer.dial(session).await
                } else {
                    hub.accept(session, peer, timeout).await
                }
                .map_err(|e| EvalError::Link {
                    party: peer,
                    reason: e.to_string(),
                })
            }
        };
        let (next, prev) = ctx
            .runtime
            .block_on(async { tokio::join!(open(me.next()), open(me.prev())) });
        Ok((next?, prev?))
    }

    /// Agrees the two pairwise seeds `(next, prev)` for MPC session `session` with fresh
    /// ephemeral X25519 keys on both links, then confirms them: each end sends a tag only the
    /// same keys and transcript give, and a batch whose ends disagree stops here, before any
    /// round runs. Each step's two messages go out before either is awaited: a party that
    /// waited first would wait on a neighbour waiting on it.
    fn seeds(
        &self,
        session: u64,
        next: &MpcLink,
        prev: &MpcLink,
        metrics: &crate::metrics::Metrics,
    ) -> Result<(Seed, Seed), EvalError> {
        let links = [(self.party.next(), next), (self.party.prev(), prev)];
        let exchanges = links.map(|(peer, _)| PairKeyExchange::new(self.party, peer, &mut OsRng));
        for ((peer, link), ex) in links.iter().zip(&exchanges) {
            send(link, *peer, ex.public_key().to_vec())?;
        }
        let mut keys = Vec::with_capacity(2);
        for ((peer, link), ex) in links.iter().zip(exchanges) {
            let theirs: [u8; 32] = self
                .receive(link, *peer)?
                .as_slice()
                .try_into()
                .map_err(|_| EvalError::KeyMessage(*peer))?;
            let k = ex
                .finish(session, &theirs)
                .map_err(|e| self.key_failure(metrics, *peer, e))?;
            send(link, *peer, k.confirmation().to_vec())?;
            keys.push(k);
        }
        let mut seeds = Vec::with_capacity(2);
        for ((peer, link), k) in links.iter().zip(keys) {
            let tag = self.receive(link, *peer)?;
            seeds.push(
                k.confirm(&tag)
                    .map_err(|e| self.key_failure(metrics, *peer, e))?,
            );
        }
        let prev_seed = seeds
            .pop()
            .ok_or(EvalError::KeyMessage(self.party.prev()))?;
        let next_seed = seeds
            .pop()
            .ok_or(EvalError::KeyMessage(self.party.next()))?;
        Ok((next_seed, prev_seed))
    }

    fn receive(&self, link: &MpcLink, peer: PartyId) -> Result<Vec<u8>, EvalError> {
        link.recv
            .recv_timeout(self.round_timeout)
            .map_err(|_| EvalError::KeyMessage(peer))
    }

    /// Logs and counts a failed key agreement with `peer`.
    fn key_failure(
        &self,
        metrics: &crate::metrics::Metrics,
        peer: PartyId,
        reason: KeyAgreementError,
    ) -> EvalError {
        tracing::error!(peer = peer.get(), %reason, "MPC key agreement failed; the batch stops");
        metrics.key_agreement_failure(peer);
        EvalError::KeyAgreement {
            party: peer,
            reason,
        }
    }
}

fn send(link: &MpcLink, peer: PartyId, message: Vec<u8>) -> Result<(), EvalError> {
    if (link.send)(message) {
        Ok(())
    } else {
        Err(EvalError::LinkClosed(peer))
    }
}

impl<B: Backend + 'static> BatchEvaluator for MpcEvaluator<B> {
    fn name(&self) -> &'static str {
        "mpc"
    }

    fn cpu_tuning(&self) -> Option<ocelli_cpu::Tuning> {
        self.cpu_tuning
    }

    fn prepare(&self, db: &ShareDb) -> Result<(), EvalError> {
        Ok(self.engine.prepare(db.rows())?)
    }

    fn evaluate(
        &self,
        ctx: &EvalContext<'_>,
        requests: &[EvalRequest],
        db: &ShareDb,
    ) -> Result<Vec<Outcome>, EvalError> {
        let public: Vec<PublicRequest> = requests.iter().map(EvalRequest::public).collect();
        let shares: Vec<_> = requests
            .iter()
            .map(|r| r.shares.to_party_shares())
            .collect();
        let mut pipeline_requests = pipeline_requests(&public, &shares, db.rows(), &self.rules);
        if !needs_mpc(&pipeline_requests) && !public.iter().any(shares_checked) {
            let results = vec![Default::default(); requests.len()];
            return Ok(outcomes(&public, &pipeline_requests, results, db.rows()));
        }

        let started = std::time::Instant::now();
        let (next, prev) = self.links(ctx)?;
        let (next_seed, prev_seed) = self.seeds(ctx.session, &next, &prev, ctx.metrics)?;
        let mut randomness = CorrelatedRandomness::from_seeds(&next_seed, &prev_seed);
        let mut transport = ChannelTransport::new(
            next.send,
            prev.send,
            next.recv,
            prev.recv,
            self.round_timeout,
        );
        let mut session = Session::new(self.party, &mut transport, &mut randomness);
        let refused = self.check_shares(&mut session, ctx, &public, &mut pipeline_requests)?;
        let results = pipeline::evaluate_batch(
            &mut session,
            &self.engine,
            db.rows(),
            &pipeline_requests,
            &self.pipeline,
            &self.scratch,
        )
        .map_err(|source| EvalError::Network {
            batch_id: ctx.batch_id,
            source,
        })?;
        let traffic = session.traffic();
        let comparisons = comparisons(&pipeline_requests, db.len());
        ctx.metrics.comparisons.inc_by(comparisons);
        tracing::info!(
            batch_id = ctx.batch_id,
            comparisons,
            rounds = traffic.rounds,
            bytes_sent = traffic.bytes_sent,
            seconds = started.elapsed().as_secs_f64(),
            "matching pipeline done"
        );
        let mut outcomes = outcomes(&public, &pipeline_requests, results, db.rows());
        mark_malformed(&mut outcomes, &refused);
        if let Some(slot) = ctx.stats {
            self.count_stats(&mut session, ctx, slot, &public, &outcomes, &shares, db)?;
        }
        Ok(outcomes)
    }
}

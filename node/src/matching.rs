//! The production [`BatchEvaluator`]: the three-party matching pipeline of
//! DESIGN section 6, run over the node-to-node MPC links.
//!
//! Per batch: every party builds the same list of pipeline requests from the
//! committed requests (request types are public), opens its links to the two
//! other parties for the commit's MPC session, exchanges fresh nonces on them,
//! derives the pairwise PRF seeds from the static X25519 node keys and the
//! nonces, and runs [`pipeline::evaluate`]. Matching sees the database as it
//! was before the batch; the opened bits are turned into outcomes the same way
//! on all three nodes.

use std::time::Duration;

use rand_core::{OsRng, RngCore};
use sdk_orb::rotation::ROTATION_COUNT;
use sdk_orb::shamir::PartyShares;
use sdk_orb::PartyId;
use shared_proto::v1::RequestType;
use zeroize::Zeroizing;

use crate::batch::{BatchEvaluator, EvalContext, EvalRequest, NotEvaluated, Outcome};
use crate::config::NodeConfig;
use crate::engine::DotEngine;
use crate::ids::SerialId;
use crate::links::MpcLink;
use crate::mpc::network::ChannelTransport;
use crate::mpc::randomness::{pair_seed, CorrelatedRandomness};
use crate::mpc::session::Session;
use crate::pipeline::{self, MatchResult, PipelineConfig, PipelineRequest, Target};
use crate::shares::ShareDb;

/// A pairwise PRF seed.
type Seed = Zeroizing<[u8; 32]>;

/// The evaluator a node runs: the MPC pipeline, or [`NotEvaluated`] when
/// matching is disabled.
///
/// # Errors
/// Unreadable or invalid node keys.
pub fn evaluator_for(config: &NodeConfig) -> Result<std::sync::Arc<dyn BatchEvaluator>, String> {
    if config.matching.enabled {
        Ok(std::sync::Arc::new(MpcEvaluator::new(config)?))
    } else {
        Ok(std::sync::Arc::new(NotEvaluated))
    }
}

/// The three-party matching pipeline as a batch evaluator.
pub struct MpcEvaluator {
    party: PartyId,
    secret: x25519_dalek::StaticSecret,
    public: [x25519_dalek::PublicKey; 3],
    engine: Box<dyn DotEngine>,
    pipeline: PipelineConfig,
    round_timeout: Duration,
}

impl std::fmt::Debug for MpcEvaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpcEvaluator")
            .field("party", &self.party)
            .field("engine", &self.engine.name())
            .field("pipeline", &self.pipeline)
            .finish_non_exhaustive()
    }
}

impl MpcEvaluator {
    /// Loads the node's X25519 key and the three public keys named in `config`.
    ///
    /// # Errors
    /// Unreadable key files, a bundle of the wrong size, or a node key that does
    /// not match its entry in the bundle.
    pub fn new(config: &NodeConfig) -> Result<Self, String> {
        let party = PartyId::try_from(config.party_id).map_err(|e| e.to_string())?;
        let secret_bytes =
            crate::keys::read_key32(&config.keys.hpke_secret).map_err(|e| e.to_string())?;
        let secret = x25519_dalek::StaticSecret::from(*secret_bytes);
        let bundle_path = config
            .keys
            .node_public_keys
            .as_ref()
            .ok_or("keys.node_public_keys is required for matching")?;
        let bundle =
            std::fs::read(bundle_path).map_err(|e| format!("{}: {e}", bundle_path.display()))?;
        let bundle: [u8; 96] = bundle.as_slice().try_into().map_err(|_| {
            format!(
                "{}: {} bytes, expected 96 (three X25519 keys)",
                bundle_path.display(),
                bundle.len()
            )
        })?;
        let public: [x25519_dalek::PublicKey; 3] = core::array::from_fn(|i| {
            let mut k = [0u8; 32];
            k.copy_from_slice(&bundle[32 * i..32 * (i + 1)]);
            x25519_dalek::PublicKey::from(k)
        });
        if x25519_dalek::PublicKey::from(&secret) != public[party.index()] {
            return Err(format!(
                "{}: entry {} is not this node's public key",
                bundle_path.display(),
                party.index()
            ));
        }
        let m = &config.matching;
        let engine = crate::engine::build(m.engine, m.threads, &m.gpu_devices)?;
        let mut pipeline = PipelineConfig::with_threshold(m.threshold);
        pipeline.privacy_max = m.privacy_max;
        pipeline.chunk_entries = m.chunk_entries;
        pipeline.max_pass_comparisons = m.max_pass_comparisons;
        Ok(Self {
            party,
            secret,
            public,
            engine,
            pipeline,
            round_timeout: Duration::from_millis(m.round_timeout_ms),
        })
    }

    /// Opens this party's two links for `session`: it dials the higher party
    /// id and accepts from the lower one.
    fn links(&self, ctx: &EvalContext<'_>) -> Result<(MpcLink, MpcLink), String> {
        let me = self.party;
        let peers = ctx
            .state
            .peers
            .get()
            .ok_or("peer clients are not set up (the node is not serving)")?;
        let open = |peer: PartyId| {
            let peers = peers.clone();
            let hub = &ctx.state.links;
            let session = ctx.session;
            let timeout = self.round_timeout;
            async move {
                if me < peer {
                    let client = peers
                        .client(peer.get())
                        .ok_or_else(|| format!("no client for party {}", peer.get()))?;
                    crate::links::dial(client, session)
                        .await
                        .map_err(|e| format!("dialling party {}: {}", peer.get(), e.message()))
                } else {
                    hub.accept(session, peer.get(), timeout)
                        .await
                        .map_err(|e| e.message().to_owned())
                }
            }
        };
        let (next, prev) = ctx
            .runtime
            .block_on(async { tokio::join!(open(me.next()), open(me.prev())) });
        Ok((next?, prev?))
    }

    /// Exchanges fresh nonces on both links and derives the two pairwise
    /// seeds `(next, prev)`. Both nonces go out before either is awaited: a
    /// party that waited first would wait on a neighbour waiting on it.
    fn seeds(&self, next: &MpcLink, prev: &MpcLink) -> Result<(Seed, Seed), String> {
        let links = [(self.party.next(), next), (self.party.prev(), prev)];
        let mut mine = [[0u8; 32]; 2];
        for ((peer, link), nonce) in links.iter().zip(mine.iter_mut()) {
            OsRng.fill_bytes(nonce);
            if !(link.send)(nonce.to_vec()) {
                return Err(format!("link to party {} closed", peer.get()));
            }
        }
        let mut seeds = Vec::with_capacity(2);
        for ((peer, link), nonce) in links.iter().zip(&mine) {
            let theirs = link
                .recv
                .recv_timeout(self.round_timeout)
                .map_err(|_| format!("no nonce from party {}", peer.get()))?;
            let theirs: [u8; 32] = theirs
                .as_slice()
                .try_into()
                .map_err(|_| format!("bad nonce from party {}", peer.get()))?;
            seeds.push(pair_seed(
                self.party,
                &self.secret,
                *peer,
                &self.public[peer.index()],
                nonce,
                &theirs,
            ));
        }
        let prev_seed = seeds.pop().ok_or("two seeds")?;
        let next_seed = seeds.pop().ok_or("two seeds")?;
        Ok((next_seed, prev_seed))
    }
}

/// What a request of each type is matched against.
fn pipeline_role(r: &EvalRequest, db: &ShareDb) -> (Target, bool, bool) {
    match r.request_type {
        RequestType::Uniqueness => (Target::Database, true, true),
        RequestType::UniquenessCheck => (Target::Database, true, false),
        RequestType::Reauth => match db.row_of(r.serial_id) {
            Some(row) => (Target::Entry(row), false, false),
            None => (Target::Nothing, false, false),
        },
        _ => (Target::Nothing, false, false),
    }
}

/// The pipeline's view of a batch: one [`PipelineRequest`] per request, in order, with
/// `shares[j]` as request `j`'s shares. Uniqueness requests are matched against the database
/// and the batch's earlier uniqueness requests, and are enrolment candidates themselves;
/// uniqueness checks likewise but are never candidates; a re-authentication against its
/// serial id's row (nothing if it is not enrolled); deletions and resets against nothing.
/// Request types and serial ids are public, so the three parties build the same list.
///
/// # Panics
/// If `shares` and `requests` differ in length.
pub fn pipeline_requests<'a>(
    requests: &[EvalRequest],
    shares: &'a [Box<PartyShares>],
    db: &ShareDb,
) -> Vec<PipelineRequest<'a>> {
    assert_eq!(requests.len(), shares.len());
    requests
        .iter()
        .zip(shares)
        .map(|(r, s)| {
            let (target, against_earlier, candidate) = pipeline_role(r, db);
            PipelineRequest {
                shares: s,
                target,
                against_earlier,
                candidate,
                or_policy: r.or_policy,
            }
        })
        .collect()
}

/// Each request's outcome from what [`pipeline::evaluate`] opened for it (`results`, for the
/// batch's [`pipeline_requests`]), with database rows reported as serial ids. Identical on the
/// three parties.
///
/// # Panics
/// If the three lists differ in length.
pub fn outcomes(
    requests: &[EvalRequest],
    pipeline_requests: &[PipelineRequest<'_>],
    results: Vec<MatchResult>,
    db: &ShareDb,
) -> Vec<Outcome> {
    assert_eq!(requests.len(), pipeline_requests.len());
    assert_eq!(requests.len(), results.len());
    let serial_of = |row: usize| SerialId(db.rows().serial_ids()[row]);
    requests
        .iter()
        .zip(results)
        .zip(pipeline_requests)
        .map(|((r, m), p)| match r.request_type {
            RequestType::Uniqueness | RequestType::UniquenessCheck if m.any => Outcome::Match {
                entries: m.entries.iter().map(|&row| serial_of(row)).collect(),
                earlier: m.earlier,
            },
            RequestType::Uniqueness | RequestType::UniquenessCheck => Outcome::Unique,
            RequestType::Reauth => Outcome::Reauth(p.target != Target::Nothing && m.any),
            RequestType::Deletion | RequestType::Reset => Outcome::Apply,
            _ => Outcome::NotEvaluated,
        })
        .collect()
}

impl BatchEvaluator for MpcEvaluator {
    fn name(&self) -> &'static str {
        "mpc"
    }

    fn prepare(&self, db: &ShareDb) -> Result<(), String> {
        self.engine.prepare(db.rows())
    }

    fn evaluate(
        &self,
        ctx: &EvalContext<'_>,
        requests: &[EvalRequest],
        db: &ShareDb,
    ) -> Result<Vec<Outcome>, String> {
        let shares: Vec<_> = requests
            .iter()
            .map(|r| r.shares.to_party_shares())
            .collect();
        let pipeline_requests = pipeline_requests(requests, &shares, db);
        let needs_mpc = pipeline_requests
            .iter()
            .any(|r| r.target != Target::Nothing || r.against_earlier);

        let started = std::time::Instant::now();
        let results = if needs_mpc {
            let (next, prev) = self.links(ctx)?;
            let (next_seed, prev_seed) = self.seeds(&next, &prev)?;
            let mut randomness = CorrelatedRandomness::from_seeds(&next_seed, &prev_seed);
            let mut transport = ChannelTransport::new(
                next.send,
                prev.send,
                next.recv,
                prev.recv,
                self.round_timeout,
            );
            let mut session = Session::new(self.party, &mut transport, &mut randomness);
            let results = pipeline::evaluate(
                &mut session,
                self.engine.as_ref(),
                db.rows(),
                &pipeline_requests,
                &self.pipeline,
            )
            .map_err(|e| format!("batch {}: {e}", ctx.batch_id))?;
            let traffic = session.traffic();
            let comparisons = comparisons(&pipeline_requests, db.len());
            ctx.state.metrics.comparisons.inc_by(comparisons);
            tracing::info!(
                batch_id = ctx.batch_id,
                comparisons,
                rounds = traffic.rounds,
                bytes_sent = traffic.bytes_sent,
                seconds = started.elapsed().as_secs_f64(),
                "matching pipeline done"
            );
            results
        } else {
            vec![Default::default(); requests.len()]
        };

        Ok(outcomes(requests, &pipeline_requests, results, db))
    }
}

/// (query rotation, enrolled iris) pairs a batch compares.
fn comparisons(requests: &[PipelineRequest<'_>], db_len: usize) -> u64 {
    let mut pairs = 0usize;
    for (j, r) in requests.iter().enumerate() {
        pairs += match r.target {
            Target::Database => db_len,
            Target::Entry(_) => 1,
            Target::Nothing => 0,
        };
        if r.against_earlier {
            pairs += requests[..j].iter().filter(|e| e.candidate).count();
        }
    }
    (pairs * ROTATION_COUNT * 2) as u64
}

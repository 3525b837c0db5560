//! Batches: what a batch computes ([`BatchEvaluator`]) and the pure functions that plan how
//! its results are applied identically on all three nodes (`plan`). Agreeing on a batch and
//! applying it to a node's state is [`crate::agreement`].
//!
//! The production evaluator is the three-party matching pipeline
//! ([`crate::matching::MpcEvaluator`]). [`NotEvaluated`] answers every request
//! "not evaluated" and changes nothing; no result claims a decision that was
//! not computed.

pub(crate) mod plan;

use ocelli_mpc::requests::PublicRequest;
use sdk_orb::{PartyId, RequestType};

pub use ocelli_mpc::requests::Outcome;

use crate::ids::{RequestId, SerialId};
use crate::links::{LinkHub, Peers};
use crate::metrics::Metrics;
use crate::shares::{ShareDb, StoredShares};
use crate::store::StoreError;

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
    /// The evaluation panicked; the panic was caught at the batch task and everything the
    /// task held was dropped. Nothing was applied.
    #[error("the evaluation panicked")]
    Panicked,
    /// The evaluation failed (a peer went away); nothing was applied.
    #[error("evaluation failed: {0}")]
    Evaluation(#[from] EvalError),
    /// A replayed commit's recorded outcomes do not fit its requests.
    #[error("recorded outcomes do not match the batch: {0}")]
    Recorded(String),
    /// Recorded outcomes (a replay, a fetched batch, or a commit claiming them) without a
    /// valid attestation of this exact batch by `party`, one of the two other nodes: this
    /// node neither computed them nor saw both others sign them, so it applies nothing.
    #[error("batch {batch_id}: recorded outcomes lack a valid signature of {party}")]
    Unattested {
        /// The batch.
        batch_id: u64,
        /// The party whose signature is missing or invalid.
        party: PartyId,
    },
    /// A fresh commit whose attempt is not newer than the one this node last attested for the
    /// batch (or is 0): attesting it could let two different outcomes of the batch be applied.
    #[error("batch {batch_id}: attempt {attempt} is not newer than attempt {attested} this node attested")]
    StaleAttempt {
        /// The batch.
        batch_id: u64,
        /// The commit's attempt.
        attempt: u32,
        /// The attempt this node last attested for the batch (0: none).
        attested: u32,
    },
    /// Recorded outcomes whose digest is not the one this node itself attested for that batch
    /// and attempt: the coordinator showed the peers different commits, or the attempt was
    /// superseded here. Nothing is applied.
    #[error("batch {batch_id} attempt {attempt}: not the outcomes this node attested")]
    NotAttestedHere {
        /// The batch.
        batch_id: u64,
        /// The commit's attempt.
        attempt: u32,
    },
    /// A commit lists a request as timed out, digest-mismatched or unopenable against this
    /// node's own evidence.
    #[error("request {id}: {reason}")]
    Unfounded {
        /// The request.
        id: RequestId,
        /// What this node holds that contradicts the item.
        reason: &'static str,
    },
    /// The commit names a request more than once (to run, as timed out or
    /// as a digest mismatch); party 0 never does.
    #[error("the commit names request {0} more than once")]
    RepeatedRequest(RequestId),
}

impl ApplyError {
    /// Whether the evaluation failed in a way that repeats on every attempt at the same
    /// requests (a panic, an evaluator breaking its contract), as opposed to a network fault,
    /// a peer's death or storage: only these are ever blamed on a request.
    pub fn is_deterministic(&self) -> bool {
        match self {
            Self::Panicked => true,
            Self::Evaluation(e) => e.is_deterministic(),
            _ => false,
        }
    }
}

/// Why a batch could not be evaluated; nothing of it is applied.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The peer clients are not set up (the node is not serving).
    #[error("peer clients are not set up (the node is not serving)")]
    NotServing,
    /// No client is configured for a peer.
    #[error("no client for {0}")]
    NoClient(PartyId),
    /// A link to a peer could not be opened.
    #[error("opening the link to {party}: {reason}")]
    Link {
        /// The peer.
        party: PartyId,
        /// What the transport said.
        reason: String,
    },
    /// A link closed before the session's keys were agreed.
    #[error("link to {0} closed")]
    LinkClosed(PartyId),
    /// A peer sent no key agreement message in time, or a malformed one.
    #[error("no valid key agreement message from {0}")]
    KeyMessage(PartyId),
    /// The pairwise keys with a peer could not be agreed or confirmed: the batch stops before
    /// any round, and runs again.
    #[error("MPC keys with {party}: {reason}")]
    KeyAgreement {
        /// The peer.
        party: PartyId,
        /// Why.
        reason: ocelli_mpc::randomness::KeyAgreementError,
    },
    /// A protocol round failed.
    #[error("batch {batch_id}: {source}")]
    Network {
        /// The batch.
        batch_id: u64,
        /// What failed.
        source: ocelli_mpc::NetworkError,
    },
    /// The backend cannot work on this database.
    #[error(transparent)]
    Backend(#[from] ocelli_mpc::BackendError),
    /// An evaluator broke its contract.
    #[error("{evaluator} returned {outcomes} outcomes for {requests} requests")]
    OutcomeCount {
        /// The evaluator.
        evaluator: &'static str,
        /// Outcomes returned.
        outcomes: usize,
        /// Requests given.
        requests: usize,
    },
}

impl EvalError {
    /// Whether this failure repeats on every attempt at the same requests (see
    /// [`ApplyError::is_deterministic`]).
    pub fn is_deterministic(&self) -> bool {
        matches!(self, Self::OutcomeCount { .. })
    }
}

/// One request of a batch, with this party's shares.
#[derive(Debug)]
pub struct EvalRequest {
    /// Request id.
    pub id: RequestId,
    /// Request type.
    pub request_type: RequestType,
    /// Target serial id (deletion, reauth, reset).
    pub serial_id: SerialId,
    /// Either eye suffices for a match.
    pub or_policy: bool,
    /// Serial ids compared under the OR rule (uniqueness requests).
    pub or_serial_ids: Vec<SerialId>,
    /// This party's shares of the query.
    pub shares: StoredShares,
}

impl EvalRequest {
    /// What the three parties know of the request in the clear.
    pub fn public(&self) -> PublicRequest {
        PublicRequest {
            request_type: self.request_type,
            serial_id: self.serial_id,
            or_policy: self.or_policy,
            or_serial_ids: self.or_serial_ids.clone(),
        }
    }
}

/// What an evaluator gets besides the requests: the node's links to its peers,
/// its metrics, and the names of this batch and of its MPC session.
#[derive(Debug)]
pub struct EvalContext<'a> {
    /// Incoming MPC links.
    pub links: &'a LinkHub,
    /// Clients for dialling the peers (`None` until the node serves).
    pub peers: Option<&'a Peers>,
    /// The node's metrics.
    pub metrics: &'a Metrics,
    /// The batch.
    pub batch_id: u64,
    /// The MPC session of this commit attempt (the same on all three nodes).
    pub session: u64,
    /// The runtime, for the network side of the evaluation.
    pub runtime: tokio::runtime::Handle,
    /// The distance statistics to count in the batch's session (`None`: statistics off).
    pub stats: Option<&'a crate::counting::batch::StatsSlot>,
}

/// Computes the outcome of every request in a batch. All three parties run
/// it on the same batch; an MPC evaluator talks to the peers while doing so.
pub trait BatchEvaluator: Send + Sync + std::fmt::Debug + 'static {
    /// A short name for logs.
    fn name(&self) -> &'static str;
    /// The CPU engine's tile and chunk, where the evaluator runs one.
    fn cpu_tuning(&self) -> Option<ocelli_cpu::Tuning> {
        None
    }
    /// Called once the share database is loaded, before the first batch.
    ///
    /// # Errors
    /// The evaluator cannot work on this database; the node does not start.
    fn prepare(&self, db: &ShareDb) -> Result<(), EvalError> {
        let _ = db;
        Ok(())
    }
    /// One outcome per request, in order; matching sees the database as it was
    /// before the batch.
    ///
    /// # Errors
    /// The evaluation failed (a peer went away); nothing of the batch may be
    /// applied.
    fn evaluate(
        &self,
        ctx: &EvalContext<'_>,
        requests: &[EvalRequest],
        db: &ShareDb,
    ) -> Result<Vec<Outcome>, EvalError>;
}

/// Evaluates nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NotEvaluated;

impl BatchEvaluator for NotEvaluated {
    fn name(&self) -> &'static str {
        "not-evaluated"
    }
    fn evaluate(
        &self,
        _: &EvalContext<'_>,
        requests: &[EvalRequest],
        _: &ShareDb,
    ) -> Result<Vec<Outcome>, EvalError> {
        Ok(vec![Outcome::NotEvaluated; requests.len()])
    }
}

/// TESTS ONLY: declares every uniqueness request unique (and carries out
/// deletions and resets) without computing anything, to exercise enrolment
/// and serial id assignment. Built only with the `test-support` feature, so
/// a deployment build does not contain it.
#[cfg(feature = "test-support")]
#[derive(Clone, Copy, Debug, Default)]
pub struct DangerEnrolEverythingForTests;

#[cfg(feature = "test-support")]
impl BatchEvaluator for DangerEnrolEverythingForTests {
    fn name(&self) -> &'static str {
        "danger-enrol-everything-for-tests"
    }
    fn evaluate(
        &self,
        _: &EvalContext<'_>,
        requests: &[EvalRequest],
        _: &ShareDb,
    ) -> Result<Vec<Outcome>, EvalError> {
        Ok(requests
            .iter()
            .map(|r| match r.request_type {
                RequestType::Uniqueness | RequestType::UniquenessCheck => Outcome::Unique,
                RequestType::Deletion | RequestType::Reset => Outcome::Apply,
                RequestType::Reauth => Outcome::NotEvaluated,
            })
            .collect())
    }
}

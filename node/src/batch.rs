//! Batches: what a batch computes ([`BatchEvaluator`]), how its results are
//! applied identically on all three nodes ([`apply_commit`], planned by pure
//! functions in `plan`), and the agreement on which requests form it (party
//! 0's [`coordinator`]).
//!
//! The production evaluator is the three-party matching pipeline
//! ([`crate::matching::MpcEvaluator`]). [`NotEvaluated`] answers every request
//! "not evaluated" and changes nothing; no result claims a decision that was
//! not computed.

mod apply;
pub mod coordinator;
mod plan;

use shared_proto::v1::RequestType;

pub(crate) use self::apply::digest_of;
pub use self::apply::{apply_commit, status_label, sweep_expired, ApplyError};
pub(crate) use self::plan::{
    check_commit, committed_ids, eval_request, plan, record_outcome, recorded_outcomes, Planned,
};
use crate::ids::{RequestId, SerialId};
use crate::node::NodeState;
use crate::shares::{ShareDb, StoredShares};

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
    /// This party's shares of the query.
    pub shares: StoredShares,
}

/// What the evaluator decided for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing was computed: the request is answered "not evaluated".
    NotEvaluated,
    /// No match (uniqueness: enrol; uniqueness check: report).
    Unique,
    /// Matched: these enrolled entries and these earlier requests of the batch
    /// (by position among the batch's requests). Both empty in the privacy-max
    /// mode, where only the fact of a match is opened.
    Match {
        /// Matched enrolled entries.
        entries: Vec<SerialId>,
        /// Matched earlier requests of the batch.
        earlier: Vec<usize>,
    },
    /// Re-authentication matched / did not match.
    Reauth(bool),
    /// Carry out a deletion or reset.
    Apply,
}

/// What an evaluator gets besides the requests: the node, and the names of
/// this batch and of its MPC session.
#[derive(Debug)]
pub struct EvalContext<'a> {
    /// The node.
    pub state: &'a NodeState,
    /// The batch.
    pub batch_id: u64,
    /// The MPC session of this commit attempt (the same on all three nodes).
    pub session: u64,
    /// The runtime, for the network side of the evaluation.
    pub runtime: tokio::runtime::Handle,
}

/// Computes the outcome of every request in a batch. All three parties run
/// it on the same batch; an MPC evaluator talks to the peers while doing so.
pub trait BatchEvaluator: Send + Sync + std::fmt::Debug + 'static {
    /// A short name for logs.
    fn name(&self) -> &'static str;
    /// Called once the share database is loaded, before the first batch.
    ///
    /// # Errors
    /// The evaluator cannot work on this database; the node does not start.
    fn prepare(&self, db: &ShareDb) -> Result<(), String> {
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
    ) -> Result<Vec<Outcome>, String>;
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
    ) -> Result<Vec<Outcome>, String> {
        Ok(vec![Outcome::NotEvaluated; requests.len()])
    }
}

/// TESTS ONLY: declares every uniqueness request unique (and carries out
/// deletions and resets) without computing anything, to exercise enrolment
/// and serial id assignment. Never select it in a deployment; the binary
/// cannot.
#[derive(Clone, Copy, Debug, Default)]
pub struct DangerEnrolEverythingForTests;

impl BatchEvaluator for DangerEnrolEverythingForTests {
    fn name(&self) -> &'static str {
        "danger-enrol-everything-for-tests"
    }
    fn evaluate(
        &self,
        _: &EvalContext<'_>,
        requests: &[EvalRequest],
        _: &ShareDb,
    ) -> Result<Vec<Outcome>, String> {
        Ok(requests
            .iter()
            .map(|r| match r.request_type {
                RequestType::Uniqueness | RequestType::UniquenessCheck => Outcome::Unique,
                RequestType::Deletion | RequestType::Reset => Outcome::Apply,
                _ => Outcome::NotEvaluated,
            })
            .collect())
    }
}

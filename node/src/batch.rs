//! Batches: what a batch computes ([`BatchEvaluator`]), how its results are
//! applied identically on all three nodes ([`apply_commit`]), and the
//! agreement on which requests form it (party 0's [`coordinator`]).
//!
//! Until the MPC matching pipeline is plugged in, [`NotEvaluated`] is the
//! evaluator: every request is answered "not evaluated" and nothing is
//! enrolled or changed; no result claims a decision that was not computed.

mod apply;
pub mod coordinator;

use shared_proto::v1::RequestType;

pub(crate) use self::apply::digest_of;
pub use self::apply::{apply_commit, status_label, sweep_expired, ApplyError};
use crate::ids::{RequestId, SerialId};
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
    /// Matched these enrolled entries.
    Match(Vec<SerialId>),
    /// Re-authentication matched / did not match.
    Reauth(bool),
    /// Carry out a deletion or reset.
    Apply,
}

/// Computes the outcome of every request in a batch. All three parties run
/// it on the same batch; an MPC evaluator talks to the peers while doing so.
pub trait BatchEvaluator: Send + Sync + std::fmt::Debug + 'static {
    /// A short name for logs.
    fn name(&self) -> &'static str;
    /// One outcome per request, in order.
    fn evaluate(&self, batch_id: u64, requests: &[EvalRequest], db: &ShareDb) -> Vec<Outcome>;
}

/// The placeholder: evaluates nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NotEvaluated;

impl BatchEvaluator for NotEvaluated {
    fn name(&self) -> &'static str {
        "not-evaluated"
    }
    fn evaluate(&self, _: u64, requests: &[EvalRequest], _: &ShareDb) -> Vec<Outcome> {
        vec![Outcome::NotEvaluated; requests.len()]
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
    fn evaluate(&self, _: u64, requests: &[EvalRequest], _: &ShareDb) -> Vec<Outcome> {
        requests
            .iter()
            .map(|r| match r.request_type {
                RequestType::Uniqueness | RequestType::UniquenessCheck => Outcome::Unique,
                RequestType::Deletion | RequestType::Reset => Outcome::Apply,
                _ => Outcome::NotEvaluated,
            })
            .collect()
    }
}

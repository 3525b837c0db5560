//! Agreeing on batches and applying them: party 0's [`coordinator`] proposes, collects votes
//! and commits; every node [`evaluate_commit`]s what was committed (the MPC, nothing stored),
//! and [`apply_commit`]s it to its store and memory once all three have attested the outcomes.

mod apply;
mod attest;
pub mod coordinator;
pub mod poison;

pub(crate) use self::apply::digest_of;
pub use self::apply::{apply_commit, evaluate_commit, status_label, Applied, Evaluated};
pub use self::attest::batch_digest;

//! Agreeing on batches and applying them: party 0's [`coordinator`] proposes, collects votes
//! and commits; every node [`apply_commit`]s what was committed to its store and memory.

mod apply;
mod attest;
pub mod coordinator;

pub(crate) use self::apply::digest_of;
pub use self::apply::{apply_commit, status_label, Applied};
pub use self::attest::batch_digest;

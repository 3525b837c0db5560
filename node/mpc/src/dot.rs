//! The interface every dot-product engine implements: the party-local heavy lifting of the
//! pipeline.
//!
//! An engine computes, for preprocessed query vectors and database share vectors of one
//! length (12,800 for codes, 6,400 for trimmed masks), every `sum_k db[k] * query[k]` mod 2^16.
//! The CPU engine and the GPU engine (behind the `gpu` feature) pass one parity suite against
//! `sdk_orb::preprocess::dot`.

use core::ops::Range;

use crate::db::{MatchDb, Part};
use crate::error::EngineError;

/// Party-local dot products of share vectors.
pub trait DotEngine: Send + Sync {
    /// A short name for logs and benchmarks.
    fn name(&self) -> String;

    /// `out[q * n_db + d] = sum_k db[d][k] * queries[q][k]` mod 2^16, where `queries` holds
    /// `queries.len() / len` vectors and `db` holds `db.len() / len` vectors, each `len` long.
    ///
    /// # Panics
    /// If a slice length is not a multiple of `len`, `len` is not a multiple of 64, or `out`
    /// has the wrong length.
    fn dot(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]);

    /// Makes the engine ready to match against `db` (a resident copy loaded now, not at the
    /// first batch).
    ///
    /// # Errors
    /// The engine cannot hold the database.
    fn prepare(&self, db: &MatchDb) -> Result<(), EngineError> {
        let _ = db;
        Ok(())
    }

    /// [`DotEngine::dot`] against rows `rows` of one eye's `part` in the enrolled database:
    /// `out[q * rows.len() + d]` for the `d`-th row of the range. An engine that keeps the
    /// database resident (the GPU engine) reads its own copy, kept equal to `db`.
    fn dot_db(
        &self,
        queries: &[u16],
        db: &MatchDb,
        eye: usize,
        part: Part,
        rows: Range<usize>,
        out: &mut [u16],
    ) {
        self.dot(queries, db.vectors(eye, part, rows), part.coefs(), out);
    }

    /// The GPU engine, whose first device also runs the comparison phase
    /// ([`crate::pipeline::evaluate_batch`]); `None` for every other engine.
    #[cfg(feature = "gpu")]
    fn as_gpu(&self) -> Option<&crate::engine::GpuEngine> {
        None
    }
}

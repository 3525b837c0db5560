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
use crate::scratch::ScratchVec;
use sdk_orb::rotation::{rotate_coefs, rotations, ROTATION_COUNT};

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

    /// Lays out a matrix of query vectors (row-major, `len` each) once for many
    /// [`DotEngine::dot_db_prepared`] calls: the database passes of a batch all read the same
    /// queries. The default keeps the rows as they are.
    fn prepare_queries(&self, queries: ScratchVec, len: usize) -> PreparedQueries {
        PreparedQueries {
            rows: queries.len() / len,
            layout: QueryLayout::Rows,
            data: queries,
            resident: None,
        }
    }

    /// [`DotEngine::prepare_queries`] for the 31 rotations of each of `queries` (row-major,
    /// `len` each, unrotated): the prepared rows are query `i`'s rotation `k` at row
    /// `31 i + k + 15`, as [`sdk_orb::rotation::rotate_coefs`] makes them. An engine may use
    /// the rotations' structure instead of writing them out (the CPU engine's
    /// [`crate::engine::correlate`]); the default expands them and lays out the rows.
    fn prepare_rotations(&self, queries: ScratchVec, len: usize) -> PreparedQueries {
        self.prepare_queries(expand_rotations(&queries, len), len)
    }

    /// [`DotEngine::dot`] on queries this engine prepared, against `db` given as rows.
    ///
    /// # Panics
    /// As [`DotEngine::dot`], or if another engine's layout is passed.
    fn dot_prepared(&self, queries: &PreparedQueries, db: &[u16], len: usize, out: &mut [u16]) {
        assert_eq!(
            queries.layout,
            QueryLayout::Rows,
            "queries laid out by another engine"
        );
        self.dot(&queries.data, db, len, out);
    }

    /// [`DotEngine::dot_prepared`] for the first `rows` prepared rows alone: `out[q * n_db + d]`
    /// for `q < rows`. A batch's first pass reads the plain scanning queries this way: they
    /// lead the layout the database passes read. The default computes every row and keeps
    /// the first.
    ///
    /// # Panics
    /// As [`DotEngine::dot_prepared`], if `rows` exceeds the prepared rows, or (where the
    /// engine correlates rotations) if `rows` is not whole queries' rotations.
    fn dot_prepared_rows(
        &self,
        queries: &PreparedQueries,
        rows: usize,
        db: &[u16],
        len: usize,
        out: &mut [u16],
    ) {
        assert!(rows <= queries.rows, "more rows than were prepared");
        assert_eq!(out.len(), rows * (db.len() / len));
        if rows == queries.rows {
            return self.dot_prepared(queries, db, len, out);
        }
        let mut all = vec![0u16; queries.rows * (db.len() / len)];
        self.dot_prepared(queries, db, len, &mut all);
        out.copy_from_slice(&all[..out.len()]);
    }

    /// [`DotEngine::dot_db`] on queries this engine prepared.
    ///
    /// # Panics
    /// As [`DotEngine::dot_db`], or if another engine's layout is passed.
    fn dot_db_prepared(
        &self,
        queries: &PreparedQueries,
        db: &MatchDb,
        eye: usize,
        part: Part,
        rows: Range<usize>,
        out: &mut [u16],
    ) {
        assert_eq!(
            queries.layout,
            QueryLayout::Rows,
            "queries laid out by another engine"
        );
        self.dot_db(&queries.data, db, eye, part, rows, out);
    }

    /// The GPU engine, whose first device also runs the comparison phase
    /// ([`crate::pipeline::evaluate_batch`]); `None` for every other engine.
    #[cfg(feature = "gpu")]
    fn as_gpu(&self) -> Option<&crate::engine::GpuEngine> {
        None
    }
}

/// The 31 rotations of each `len`-long row of `queries`, rotation-major per row.
pub fn expand_rotations(queries: &[u16], len: usize) -> ScratchVec {
    let mut rows = ScratchVec::zeroed(queries.len() * ROTATION_COUNT);
    for (group, query) in rows
        .chunks_exact_mut(ROTATION_COUNT * len)
        .zip(queries.chunks_exact(len))
    {
        for (row, k) in group.chunks_exact_mut(len).zip(rotations()) {
            rotate_coefs(query, k, row);
        }
    }
    rows
}

/// How a [`PreparedQueries`] holds its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryLayout {
    /// Row-major, as given.
    Rows,
    /// Panels of this many rows (the last padded with zero rows), each pair of coefficients
    /// of every row of a panel side by side: the CPU engine's tiles
    /// ([`crate::engine::kernels`]).
    Panels(usize),
    /// The nine leaves of [`crate::engine::correlate`], eight lags per query each, every
    /// leaf in panels of this many rows: the CPU engine's rotation groups.
    Correlated(usize),
}

/// Query vectors in an engine's layout ([`DotEngine::prepare_queries`]). Zeroized on drop.
pub struct PreparedQueries {
    /// Query vectors held.
    pub rows: usize,
    /// How `data` holds them.
    pub layout: QueryLayout,
    /// The coefficients.
    pub data: ScratchVec,
    /// The engine's own copy where it keeps one beside `data` (the GPU engine's, split and
    /// resident on its devices for the batch's passes); wiped and freed with this.
    pub resident: Option<Box<dyn core::any::Any + Send + Sync>>,
}

impl core::fmt::Debug for PreparedQueries {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PreparedQueries")
            .field("rows", &self.rows)
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}

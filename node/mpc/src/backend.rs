//! The one seam between the protocol and a compute backend: the party-local heavy lifting of
//! the pipeline (dot products of share vectors) and the place the comparison phase's shares
//! live (the [`Circuit`]). The pipeline ([`crate::pipeline::evaluate`]) is generic over a
//! [`Backend`]; each backend owns the layout of its prepared queries
//! ([`Backend::Prepared`]), so no other backend's layout can reach it.
//!
//! A backend computes, for preprocessed query vectors and database share vectors of one
//! length (12,800 for codes, 6,400 for trimmed masks), every `sum_k db[k] * query[k]` mod 2^16.
//! Every backend passes one parity suite against `sdk_orb::preprocess::dot`;
//! `RowBackend(Reference)` is the plain one the protocol's own tests run.

use core::ops::Range;

use crate::circuit::Circuit;
use crate::db::{Eye, MatchDb, Part};
use crate::network::Transport;
use crate::scratch::{ScratchPool, ScratchVec};
use crate::session::Session;
use sdk_orb::rotation::{rotate_coefs, rotations, ROTATION_COUNT};

/// Why a backend cannot hold a database or cannot run here.
#[derive(Debug, thiserror::Error)]
#[error("{backend}: {source}")]
pub struct BackendError {
    /// The backend's name.
    pub backend: String,
    /// The backend's own error.
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// A compute backend: dot products of share vectors and the comparison circuit.
pub trait Backend: Send + Sync {
    /// Query vectors laid out for this backend ([`Backend::prepare_queries`]); zeroized on
    /// drop.
    type Prepared: Send + Sync;

    /// The comparison phase's circuit on this backend for one party's session.
    type Circuit<'s, 'n: 's, T: Transport + 'n>: Circuit
    where
        Self: 's;

    /// A short name for logs and benchmarks.
    fn name(&self) -> String;

    /// The circuit that runs the comparison phase of `session`'s party: in host memory, or
    /// where this backend keeps the dot products.
    fn circuit<'s, 'n: 's, T: Transport + 'n>(
        &'s self,
        session: &'s mut Session<'n, T>,
    ) -> Self::Circuit<'s, 'n, T>;

    /// Whether a database pass's dot products may run beside the previous pass's comparison
    /// rounds: on the CPU they take the cores the rounds leave idle while they wait on the
    /// network; a backend that runs both on one device runs them one after the other.
    fn overlaps_passes(&self) -> bool {
        true
    }

    /// `out[q * n_db + d] = sum_k db[d][k] * queries[q][k]` mod 2^16, where `queries` holds
    /// `queries.len() / len` vectors and `db` holds `db.len() / len` vectors, each `len` long.
    ///
    /// # Panics
    /// If a slice length is not a multiple of `len`, `len` is not a multiple of 64, or `out`
    /// has the wrong length.
    fn dot(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]);

    /// [`Backend::dot`] for a few queries against a few database rows, as the statistics' sampled
    /// pairs need them: a handful of products per call, where laying the queries out for the
    /// matching kernels costs more than the products. Row by row on the host unless a backend
    /// has better.
    ///
    /// # Panics
    /// As [`Backend::dot`].
    fn dot_few(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]) {
        Reference.dot(queries, db, len, out);
    }
    /// Makes the backend ready to match against `db` (a resident copy loaded now, not at the
    /// first batch).
    ///
    /// # Errors
    /// The backend cannot hold the database.
    fn prepare(&self, db: &MatchDb) -> Result<(), BackendError> {
        let _ = db;
        Ok(())
    }

    /// [`Backend::dot`] against rows `rows` of one eye's `part` in the enrolled database:
    /// `out[q * rows.len() + d]` for the `d`-th row of the range. A backend that keeps the
    /// database resident reads its own copy, kept equal to `db`.
    fn dot_db(
        &self,
        queries: &[u16],
        db: &MatchDb,
        eye: Eye,
        part: Part,
        rows: Range<usize>,
        out: &mut [u16],
    ) {
        self.dot(queries, db.vectors(eye, part, rows), part.coefs(), out);
    }

    /// Lays out a matrix of query vectors (row-major, `len` each) once for many
    /// [`Backend::dot_db_prepared`] calls: the database passes of a batch all read the same
    /// queries.
    fn prepare_queries(&self, queries: ScratchVec, len: usize) -> Self::Prepared;

    /// [`Backend::prepare_queries`] for the 31 rotations of each of `queries` (row-major,
    /// `len` each, unrotated): the prepared rows are query `i`'s rotation `k` at row
    /// `31 i + k + 15`, as [`sdk_orb::rotation::rotate_coefs`] makes them. A backend may use
    /// the rotations' structure instead of writing them out; the default expands them.
    fn prepare_rotations(&self, queries: ScratchVec, len: usize) -> Self::Prepared {
        self.prepare_queries(expand_rotations(&queries, len, queries.pool()), len)
    }

    /// The query vectors `queries` holds.
    fn prepared_rows(queries: &Self::Prepared) -> usize;

    /// [`Backend::dot`] on prepared queries, against `db` given as rows.
    ///
    /// # Panics
    /// As [`Backend::dot`].
    fn dot_prepared(&self, queries: &Self::Prepared, db: &[u16], len: usize, out: &mut [u16]) {
        self.dot_prepared_rows(queries, Self::prepared_rows(queries), db, len, out);
    }

    /// [`Backend::dot_prepared`] for the first `rows` prepared rows alone: `out[q * n_db + d]`
    /// for `q < rows`. A batch's first pass reads the plain scanning queries this way: they
    /// lead the layout the database passes read.
    ///
    /// # Panics
    /// As [`Backend::dot`], if `rows` exceeds the prepared rows, or (where the backend
    /// correlates rotations) if `rows` is not whole queries' rotations.
    fn dot_prepared_rows(
        &self,
        queries: &Self::Prepared,
        rows: usize,
        db: &[u16],
        len: usize,
        out: &mut [u16],
    );

    /// [`Backend::dot_db`] on prepared queries.
    ///
    /// # Panics
    /// As [`Backend::dot_db`].
    fn dot_db_prepared(
        &self,
        queries: &Self::Prepared,
        db: &MatchDb,
        eye: Eye,
        part: Part,
        rows: Range<usize>,
        out: &mut [u16],
    ) {
        self.dot_prepared(queries, db.vectors(eye, part, rows), part.coefs(), out);
    }
}

/// The 31 rotations of each `len`-long row of `queries`, rotation-major per row, in a buffer
/// from `pool`.
pub fn expand_rotations(queries: &[u16], len: usize, pool: &ScratchPool) -> ScratchVec {
    let mut rows = pool.zeroed(queries.len() * ROTATION_COUNT);
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

/// Query rows as given, row-major: the layout of a [`RowBackend`]. Zeroized on drop.
#[derive(Debug)]
pub struct QueryRows {
    /// Query vectors held.
    pub rows: usize,
    /// The coefficients.
    pub data: ScratchVec,
}

/// Dot products alone, rows as given: made a [`Backend`] by [`RowBackend`].
pub trait RowDot: Send + Sync {
    /// A short name for logs and test failures.
    fn name(&self) -> String;

    /// As [`Backend::dot`].
    fn dot(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]);
}

/// A [`RowDot`] as a backend: queries kept as rows, the comparison phase in host memory (the
/// protocol's [`Session`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct RowBackend<D>(pub D);

impl<D: RowDot> Backend for RowBackend<D> {
    type Prepared = QueryRows;
    type Circuit<'s, 'n: 's, T: Transport + 'n>
        = &'s mut Session<'n, T>
    where
        D: 's;

    fn name(&self) -> String {
        self.0.name()
    }

    fn circuit<'s, 'n: 's, T: Transport + 'n>(
        &'s self,
        session: &'s mut Session<'n, T>,
    ) -> &'s mut Session<'n, T> {
        session
    }

    fn dot(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]) {
        self.0.dot(queries, db, len, out);
    }

    fn prepare_queries(&self, queries: ScratchVec, len: usize) -> QueryRows {
        QueryRows {
            rows: queries.len() / len,
            data: queries,
        }
    }

    fn prepared_rows(queries: &QueryRows) -> usize {
        queries.rows
    }

    fn dot_prepared_rows(
        &self,
        queries: &QueryRows,
        rows: usize,
        db: &[u16],
        len: usize,
        out: &mut [u16],
    ) {
        assert!(rows <= queries.rows, "more rows than were prepared");
        self.0.dot(&queries.data[..rows * len], db, len, out);
    }
}

/// The plain dot products: row by row in portable Rust. The protocol's tests run on
/// `RowBackend(Reference)`; it is the definition the fast backends are held to, not one to
/// match a database with (it is [`Backend::dot_few`]'s default, for a few products at a time).
#[derive(Clone, Copy, Debug, Default)]
pub struct Reference;

impl RowDot for Reference {
    fn name(&self) -> String {
        "reference".into()
    }

    fn dot(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]) {
        assert!(
            len > 0 && len.is_multiple_of(64),
            "vector length must be a multiple of 64"
        );
        assert!(queries.len().is_multiple_of(len) && db.len().is_multiple_of(len));
        let nd = db.len() / len;
        assert_eq!(out.len(), queries.len() / len * nd);
        for (q, query) in queries.chunks_exact(len).enumerate() {
            for (d, row) in db.chunks_exact(len).enumerate() {
                out[q * nd + d] = sdk_orb::preprocess::dot(row, query);
            }
        }
    }
}

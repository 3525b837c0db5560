//! Where a party's pipeline spends its wall time: an engine and a circuit that time the calls
//! they pass on, by part of a pass (dot products, query layout, comparison rounds, openings).
//! Whatever the four leave of the wall time is the pipeline's own work (pass assembly, the
//! accumulation of results) and the waits between.

use core::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use sdk_orb::PartyId;

use ocelli_mpc::backend::{Backend, BackendError};
use ocelli_mpc::circuit::Circuit;
use ocelli_mpc::db::{Eye, MatchDb, Part};
use ocelli_mpc::network::{NetworkError, Transport};
use ocelli_mpc::scratch::ScratchVec;
use ocelli_mpc::session::Session;

/// Nanoseconds spent per part, added up by [`TimedEngine`] and [`TimedCircuit`].
#[derive(Debug, Default)]
pub struct PassTimers {
    dot: AtomicU64,
    layout: AtomicU64,
    compare: AtomicU64,
    open: AtomicU64,
}

/// Seconds per part of one party's pipeline run; `other` is the wall time the four leave.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct PassSeconds {
    /// The run's wall time.
    pub wall: f64,
    /// Dot products (engine calls against the database or the batch).
    pub dot: f64,
    /// Laying out queries (preprocessed rows, their rotations) for the engine.
    pub layout: f64,
    /// The comparison rounds: match bits and the AND gates of the OR trees.
    pub compare: f64,
    /// Openings.
    pub open: f64,
    /// The rest of the wall time. Negative where the engine's passes overlap the rounds
    /// (the CPU engine computes the next pass beside the current one's rounds).
    pub other: f64,
}

impl PassTimers {
    fn add(counter: &AtomicU64, started: Instant) {
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        counter.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The parts so far against `wall` seconds.
    pub fn seconds(&self, wall: f64) -> PassSeconds {
        let s = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 / 1e9;
        let (dot, layout, compare, open) = (
            s(&self.dot),
            s(&self.layout),
            s(&self.compare),
            s(&self.open),
        );
        PassSeconds {
            wall,
            dot,
            layout,
            compare,
            open,
            other: wall - dot - layout - compare - open,
        }
    }
}

/// An engine whose calls add to [`PassTimers`].
pub struct TimedEngine<'a, B: Backend> {
    inner: &'a B,
    timers: &'a PassTimers,
}

impl<B: Backend> core::fmt::Debug for TimedEngine<'_, B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TimedEngine")
            .field("inner", &self.inner.name())
            .finish_non_exhaustive()
    }
}

impl<'a, B: Backend> TimedEngine<'a, B> {
    /// Times `inner`'s calls into `timers`.
    pub fn new(inner: &'a B, timers: &'a PassTimers) -> Self {
        TimedEngine { inner, timers }
    }

    fn dot_timed<R>(&self, f: impl FnOnce() -> R) -> R {
        let started = Instant::now();
        let r = f();
        PassTimers::add(&self.timers.dot, started);
        r
    }

    fn layout_timed<R>(&self, f: impl FnOnce() -> R) -> R {
        let started = Instant::now();
        let r = f();
        PassTimers::add(&self.timers.layout, started);
        r
    }
}

impl<B: Backend> Backend for TimedEngine<'_, B> {
    type Prepared = B::Prepared;
    type Circuit<'s, 'n: 's, T: Transport + 'n>
        = B::Circuit<'s, 'n, T>
    where
        Self: 's;

    fn name(&self) -> String {
        self.inner.name()
    }

    fn circuit<'s, 'n: 's, T: Transport + 'n>(
        &'s self,
        session: &'s mut Session<'n, T>,
    ) -> B::Circuit<'s, 'n, T> {
        self.inner.circuit(session)
    }

    fn overlaps_passes(&self) -> bool {
        self.inner.overlaps_passes()
    }

    fn prepared_rows(queries: &B::Prepared) -> usize {
        B::prepared_rows(queries)
    }

    fn dot(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]) {
        self.dot_timed(|| self.inner.dot(queries, db, len, out));
    }

    fn prepare(&self, db: &MatchDb) -> Result<(), BackendError> {
        self.inner.prepare(db)
    }

    fn dot_db(
        &self,
        queries: &[u16],
        db: &MatchDb,
        eye: Eye,
        part: Part,
        rows: Range<usize>,
        out: &mut [u16],
    ) {
        self.dot_timed(|| self.inner.dot_db(queries, db, eye, part, rows, out));
    }

    fn prepare_queries(&self, queries: ScratchVec, len: usize) -> B::Prepared {
        self.layout_timed(|| self.inner.prepare_queries(queries, len))
    }

    fn prepare_rotations(&self, queries: ScratchVec, len: usize) -> B::Prepared {
        self.layout_timed(|| self.inner.prepare_rotations(queries, len))
    }

    fn dot_prepared(&self, queries: &B::Prepared, db: &[u16], len: usize, out: &mut [u16]) {
        self.dot_timed(|| self.inner.dot_prepared(queries, db, len, out));
    }

    fn dot_prepared_rows(
        &self,
        queries: &B::Prepared,
        rows: usize,
        db: &[u16],
        len: usize,
        out: &mut [u16],
    ) {
        self.dot_timed(|| self.inner.dot_prepared_rows(queries, rows, db, len, out));
    }

    fn dot_db_prepared(
        &self,
        queries: &B::Prepared,
        db: &MatchDb,
        eye: Eye,
        part: Part,
        rows: Range<usize>,
        out: &mut [u16],
    ) {
        self.dot_timed(|| {
            self.inner
                .dot_db_prepared(queries, db, eye, part, rows, out);
        });
    }
}

/// A circuit whose rounds add to [`PassTimers`].
pub struct TimedCircuit<'a, C: Circuit> {
    inner: &'a mut C,
    timers: &'a PassTimers,
}

impl<C: Circuit> core::fmt::Debug for TimedCircuit<'_, C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TimedCircuit")
            .field("party", &self.inner.party())
            .finish_non_exhaustive()
    }
}

impl<'a, C: Circuit> TimedCircuit<'a, C> {
    /// Times `inner`'s rounds into `timers`.
    pub fn new(inner: &'a mut C, timers: &'a PassTimers) -> Self {
        TimedCircuit { inner, timers }
    }
}

impl<C: Circuit> Circuit for TimedCircuit<'_, C> {
    type Bits = C::Bits;

    fn party(&self) -> PartyId {
        self.inner.party()
    }

    fn zeros(&mut self, words: usize) -> Self::Bits {
        self.inner.zeros(words)
    }

    fn and(&mut self, x: &Self::Bits, y: &Self::Bits) -> Result<Self::Bits, NetworkError> {
        let started = Instant::now();
        let r = self.inner.and(x, y);
        PassTimers::add(&self.timers.compare, started);
        r
    }

    fn and_pairs(
        &mut self,
        pairs: &[(&Self::Bits, &Self::Bits)],
    ) -> Result<Vec<Self::Bits>, NetworkError> {
        let started = Instant::now();
        let r = self.inner.and_pairs(pairs);
        PassTimers::add(&self.timers.compare, started);
        r
    }

    fn open(&mut self, x: &Self::Bits) -> Result<Vec<u64>, NetworkError> {
        let started = Instant::now();
        let r = self.inner.open(x);
        PassTimers::add(&self.timers.open, started);
        r
    }

    fn match_bits(&mut self, cd: &[u16], md: &[u16], a: u32) -> Result<Self::Bits, NetworkError> {
        let started = Instant::now();
        let r = self.inner.match_bits(cd, md, a);
        PassTimers::add(&self.timers.compare, started);
        r
    }
}

//! Keeping a resident copy of a [`MatchDb`] (the GPU engine's device memory) equal to it, row
//! for row, by replaying the database's change log in place: appends and replacements write
//! one row, deletions close the gap. A copy too old for the log, or of another database, is
//! rebuilt in full.

use core::ops::Range;

use ocelli_mpc::db::Change;
use ocelli_mpc::db::MatchDb;

/// Row storage a [`Mirror`] keeps in step. Rows are the database's rows, in its order.
pub trait RowStore {
    /// What the storage's operations fail with.
    type Error;

    /// Replaces everything with `db`'s rows `rows`.
    fn load(&mut self, db: &MatchDb, rows: Range<usize>) -> Result<(), Self::Error>;

    /// Rows held.
    fn rows(&self) -> usize;

    /// Whether the rows are spread as they should be; a mirror reloads a store that says no.
    fn balanced(&self) -> bool {
        true
    }

    /// Opens an empty row at `row`, moving rows `row..` one down.
    fn insert_gap(&mut self, row: usize) -> Result<(), Self::Error>;

    /// Removes row `row`, moving rows `row + 1..` one up; nothing of it may stay behind.
    fn remove(&mut self, row: usize) -> Result<(), Self::Error>;

    /// Writes the shares of `db`'s row `from` into row `row`, or zeros where `from` is `None`
    /// (an entry removed again later in the log).
    fn write(&mut self, row: usize, db: &MatchDb, from: Option<usize>) -> Result<(), Self::Error>;
}

/// A [`RowStore`] and the database state it holds.
#[derive(Debug)]
pub struct Mirror<S> {
    store: S,
    serial_ids: Vec<u64>,
    /// `(instance, generation)` of the database the store equals.
    synced: Option<(u64, u64)>,
}

impl<S: RowStore> Mirror<S> {
    /// A mirror of nothing yet; the first [`Mirror::sync`] loads in full.
    pub fn new(store: S) -> Mirror<S> {
        Mirror {
            store,
            serial_ids: Vec::new(),
            synced: None,
        }
    }

    /// The storage, equal to the last database synced.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Brings the storage to `db`'s current rows.
    ///
    /// # Errors
    /// The storage failed; the mirror then reloads in full at the next sync.
    pub fn sync(&mut self, db: &MatchDb) -> Result<(), S::Error> {
        let target = (db.instance(), db.generation());
        if self.synced == Some(target) {
            return Ok(());
        }
        let changes = match self.synced {
            Some((instance, generation)) if instance == db.instance() => {
                db.changes_since(generation)
            }
            _ => None,
        };
        self.synced = None;
        let mut reload = true;
        if let Some(changes) = changes {
            for change in changes {
                self.replay(db, change)?;
            }
            reload = !self.store.balanced();
        }
        if reload {
            self.store.load(db, 0..db.len())?;
            self.serial_ids = db.serial_ids().to_vec();
        }
        assert!(
            self.serial_ids.len() == db.len() && self.store.rows() == db.len(),
            "mirror diverged from its database"
        );
        debug_assert_eq!(self.serial_ids, db.serial_ids());
        self.synced = Some(target);
        Ok(())
    }

    fn replay(&mut self, db: &MatchDb, change: Change) -> Result<(), S::Error> {
        match change {
            Change::Upsert(serial_id) => {
                let row = match self.serial_ids.binary_search(&serial_id) {
                    Ok(row) => row,
                    Err(row) => {
                        self.store.insert_gap(row)?;
                        self.serial_ids.insert(row, serial_id);
                        row
                    }
                };
                // The entry's shares as they are now: later changes to it rewrite the same.
                self.store.write(row, db, db.row_of(serial_id))
            }
            Change::Remove(serial_id) => match self.serial_ids.binary_search(&serial_id) {
                Ok(row) => {
                    self.store.remove(row)?;
                    self.serial_ids.remove(row);
                    Ok(())
                }
                Err(_) => Ok(()),
            },
        }
    }
}

/// Rows spread over several stores (one per GPU) in contiguous ranges, in order: shard `k`
/// holds rows `starts[k]..starts[k + 1]`. Appends go to the last shard; once it holds a
/// quarter more than its share (and 1,024 rows more), the mirror reloads evenly.
#[derive(Debug)]
pub struct Sharded<S> {
    shards: Vec<S>,
    starts: Vec<usize>,
}

impl<S: RowStore> Sharded<S> {
    /// At least one shard.
    ///
    /// # Panics
    /// If `shards` is empty.
    pub fn new(shards: Vec<S>) -> Sharded<S> {
        assert!(!shards.is_empty());
        let starts = vec![0; shards.len() + 1];
        Sharded { shards, starts }
    }

    /// The shards.
    pub fn shards(&self) -> &[S] {
        &self.shards
    }

    /// Where rows `rows` lie: `(shard, rows within the shard, offset within rows)`, for each
    /// shard holding some of them, in order.
    pub fn pieces(&self, rows: Range<usize>) -> Vec<(usize, Range<usize>, usize)> {
        let mut out = Vec::new();
        for k in 0..self.shards.len() {
            let (lo, hi) = (self.starts[k], self.starts[k + 1]);
            let (a, b) = (rows.start.max(lo), rows.end.min(hi));
            if a < b {
                out.push((k, a - lo..b - lo, a - rows.start));
            }
        }
        out
    }

    /// The shard holding row `row` and the row within it; `row == rows()` gives the end of the
    /// last shard.
    fn locate(&self, row: usize) -> (usize, usize) {
        let k = (0..self.shards.len())
            .rev()
            .find(|&k| {
                self.starts[k] <= row && (row < self.starts[k + 1] || k + 1 == self.shards.len())
            })
            .unwrap_or(0);
        (k, row - self.starts[k])
    }
}

impl<S: RowStore> RowStore for Sharded<S> {
    type Error = S::Error;

    fn load(&mut self, db: &MatchDb, rows: Range<usize>) -> Result<(), S::Error> {
        let (n, k) = (rows.len(), self.shards.len());
        for (i, shard) in self.shards.iter_mut().enumerate() {
            let (a, b) = (rows.start + n * i / k, rows.start + n * (i + 1) / k);
            shard.load(db, a..b)?;
            self.starts[i] = n * i / k;
        }
        self.starts[k] = n;
        Ok(())
    }

    fn rows(&self) -> usize {
        self.starts[self.shards.len()]
    }

    fn balanced(&self) -> bool {
        let k = self.shards.len();
        let share = self.rows() / k;
        (0..k).all(|i| self.starts[i + 1] - self.starts[i] <= share + share / 4 + 1024)
    }

    fn insert_gap(&mut self, row: usize) -> Result<(), S::Error> {
        let (k, local) = self.locate(row);
        self.shards[k].insert_gap(local)?;
        self.starts[k + 1..].iter_mut().for_each(|s| *s += 1);
        Ok(())
    }

    fn remove(&mut self, row: usize) -> Result<(), S::Error> {
        let (k, local) = self.locate(row);
        self.shards[k].remove(local)?;
        self.starts[k + 1..].iter_mut().for_each(|s| *s -= 1);
        Ok(())
    }

    fn write(&mut self, row: usize, db: &MatchDb, from: Option<usize>) -> Result<(), S::Error> {
        let (k, local) = self.locate(row);
        self.shards[k].write(local, db, from)
    }
}

#[cfg(test)]
mod tests {
    use ocelli_mpc::synthetic::random_shares;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{RngCore, SeedableRng};
    use sdk_orb::{CODE_COEFS, MASK_COEFS};

    use super::*;
    use ocelli_mpc::db::{Eye, CHANGE_LOG};

    /// Rows in host vectors, counting full loads.
    #[derive(Default)]
    struct HostRows {
        codes: [Vec<u16>; 2],
        masks: [Vec<u16>; 2],
        loads: usize,
    }

    fn parts(rows: &mut HostRows) -> impl Iterator<Item = (Eye, bool, &mut Vec<u16>)> {
        let (codes, masks) = (&mut rows.codes, &mut rows.masks);
        Eye::BOTH
            .into_iter()
            .zip(codes.iter_mut())
            .map(|(eye, v)| (eye, true, v))
            .chain(
                Eye::BOTH
                    .into_iter()
                    .zip(masks.iter_mut())
                    .map(|(eye, v)| (eye, false, v)),
            )
    }

    fn len_of(code: bool) -> usize {
        if code {
            CODE_COEFS
        } else {
            MASK_COEFS
        }
    }

    impl RowStore for HostRows {
        type Error = std::convert::Infallible;

        fn load(&mut self, db: &MatchDb, rows: Range<usize>) -> Result<(), Self::Error> {
            self.loads += 1;
            for (eye, code, v) in parts(self) {
                *v = if code {
                    db.codes(eye, rows.clone()).to_vec()
                } else {
                    db.masks(eye, rows.clone()).to_vec()
                };
            }
            Ok(())
        }

        fn rows(&self) -> usize {
            self.codes[0].len() / CODE_COEFS
        }

        fn insert_gap(&mut self, row: usize) -> Result<(), Self::Error> {
            for (_, code, v) in parts(self) {
                let len = len_of(code);
                v.splice(row * len..row * len, std::iter::repeat_n(0xdead, len));
            }
            Ok(())
        }

        fn remove(&mut self, row: usize) -> Result<(), Self::Error> {
            for (_, code, v) in parts(self) {
                let len = len_of(code);
                v.drain(row * len..(row + 1) * len);
            }
            Ok(())
        }

        fn write(
            &mut self,
            row: usize,
            db: &MatchDb,
            from: Option<usize>,
        ) -> Result<(), Self::Error> {
            for (eye, code, v) in parts(self) {
                let len = len_of(code);
                let dst = &mut v[row * len..(row + 1) * len];
                match (from, code) {
                    (Some(f), true) => dst.copy_from_slice(db.code(eye, f)),
                    (Some(f), false) => dst.copy_from_slice(db.mask(eye, f)),
                    (None, _) => dst.fill(0),
                }
            }
            Ok(())
        }
    }

    fn assert_equal(m: &Mirror<HostRows>, db: &MatchDb) {
        assert_eq!(m.serial_ids, db.serial_ids());
        for eye in Eye::BOTH {
            assert!(m.store.codes[eye.index()] == db.codes(eye, 0..db.len()));
            assert!(m.store.masks[eye.index()] == db.masks(eye, 0..db.len()));
        }
    }

    #[test]
    fn replaying_the_log_keeps_the_mirror_equal_row_for_row() {
        let mut rng = ChaCha20Rng::seed_from_u64(11);
        let mut db = MatchDb::new();
        let mut mirror = Mirror::new(HostRows::default());
        mirror.sync(&db).expect("host");
        for step in 0..12 {
            // A burst of appends, out-of-order inserts, replacements and removals, some of
            // them touching the same serial id twice, then one sync.
            for _ in 0..6 {
                let serial = rng.next_u32() as u64 % 40;
                match rng.next_u32() % 4 {
                    0 | 1 => {
                        db.insert(serial, &random_shares(&mut rng));
                    }
                    2 => {
                        if let Some(row) = db.row_of(serial) {
                            db.replace(row, &random_shares(&mut rng));
                        }
                    }
                    _ => {
                        if let Some(row) = db.row_of(serial) {
                            db.remove(row);
                        }
                    }
                }
            }
            mirror.sync(&db).expect("host");
            assert_equal(&mirror, &db);
            assert_eq!(mirror.store.loads, 1, "step {step} reloaded in full");
        }
    }

    #[test]
    fn a_mirror_behind_the_log_or_of_another_database_reloads() {
        let mut rng = ChaCha20Rng::seed_from_u64(12);
        let shares = random_shares(&mut rng);
        let mut db = MatchDb::new();
        let mut mirror = Mirror::new(HostRows::default());
        db.push(1, &shares);
        mirror.sync(&db).expect("host");
        for _ in 0..CHANGE_LOG + 1 {
            db.replace(0, &shares);
        }
        mirror.sync(&db).expect("host");
        assert_eq!(mirror.store.loads, 2);
        assert_equal(&mirror, &db);

        let mut other = MatchDb::new();
        other.push(1, &random_shares(&mut rng));
        mirror.sync(&other).expect("host");
        assert_eq!(mirror.store.loads, 3);
        assert_equal(&mirror, &other);
    }

    fn assert_sharded_equal(m: &Mirror<Sharded<HostRows>>, db: &MatchDb) {
        assert_eq!(m.serial_ids, db.serial_ids());
        let store = m.store();
        for eye in Eye::BOTH {
            let codes: Vec<u16> = store
                .shards()
                .iter()
                .flat_map(|s| s.codes[eye.index()].iter().copied())
                .collect();
            let masks: Vec<u16> = store
                .shards()
                .iter()
                .flat_map(|s| s.masks[eye.index()].iter().copied())
                .collect();
            assert!(codes == db.codes(eye, 0..db.len()));
            assert!(masks == db.masks(eye, 0..db.len()));
        }
        // Every range splits into pieces that cover it exactly, in order.
        for rows in [0..db.len(), db.len() / 3..db.len(), 0..db.len() / 2] {
            let mut at = rows.start;
            for (k, local, offset) in store.pieces(rows.clone()) {
                assert_eq!(rows.start + offset, at);
                assert_eq!(store.shards()[k].codes[0][local.start * CODE_COEFS], {
                    db.code(Eye::Left, at)[0]
                });
                at += local.len();
            }
            assert_eq!(at, rows.end);
        }
    }

    #[test]
    fn sharded_rows_stay_in_order_across_shards_through_changes() {
        let mut rng = ChaCha20Rng::seed_from_u64(13);
        let mut db = MatchDb::new();
        for serial in 0..40u64 {
            db.push(serial * 4, &random_shares(&mut rng));
        }
        let shards = (0..3).map(|_| HostRows::default()).collect();
        let mut mirror = Mirror::new(Sharded::new(shards));
        mirror.sync(&db).expect("host");
        assert_sharded_equal(&mirror, &db);
        for _ in 0..10 {
            for _ in 0..5 {
                let serial = rng.next_u32() as u64 % 200;
                match rng.next_u32() % 3 {
                    0 => {
                        db.insert(serial, &random_shares(&mut rng));
                    }
                    1 => {
                        let row = rng.next_u32() as usize % db.len();
                        db.replace(row, &random_shares(&mut rng));
                    }
                    _ => {
                        let row = rng.next_u32() as usize % db.len();
                        db.remove(row);
                    }
                }
            }
            mirror.sync(&db).expect("host");
            assert_sharded_equal(&mirror, &db);
        }
        // One load per shard so far: changes were replayed in place.
        assert!(mirror.store().shards().iter().all(|s| s.loads == 1));
    }

    #[test]
    fn appends_past_a_shards_share_reload_evenly() {
        let mut rng = ChaCha20Rng::seed_from_u64(14);
        let shares = random_shares(&mut rng);
        let mut db = MatchDb::new();
        let shards = (0..2).map(|_| HostRows::default()).collect();
        let mut mirror = Mirror::new(Sharded::new(shards));
        mirror.sync(&db).expect("host");
        for serial in 0..3_000u64 {
            db.push(serial, &shares);
            mirror.sync(&db).expect("host");
        }
        // Appends went to the last shard until it held a quarter and 1,024 rows past its
        // share (at 2,731 rows), then both reloaded with half each.
        let store = mirror.store();
        assert!(store.shards().iter().all(|s| s.loads == 2));
        assert_eq!(store.shards()[0].rows(), 2_731 / 2);
        assert_sharded_equal(&mirror, &db);
    }
}

//! The in-memory database matching runs against: one party's shares of every enrolled
//! person, contiguous per eye so engines stream it (codes `n x 12,800`, trimmed masks
//! `n x 6,400`), with the serial id of each row.
//!
//! Rows are kept sorted by serial id. The three parties pair query and database rows by
//! position, so every party must hold the same rows in the same order whatever its history
//! (restarts reload in serial order).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use sdk_orb::shamir::PartyShares;

use sdk_orb::{CODE_COEFS, MASK_COEFS};
use zeroize::Zeroize;

use crate::scratch::{cache_line_start, ALIGN_SLACK};

/// Which eye.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Eye {
    /// The left eye.
    Left,
    /// The right eye.
    Right,
}

impl Eye {
    /// Both eyes, left first: the order of every per-eye layout.
    pub const BOTH: [Eye; 2] = [Eye::Left, Eye::Right];

    /// The eye's position in per-eye layouts (left 0, right 1).
    pub const fn index(self) -> usize {
        match self {
            Eye::Left => 0,
            Eye::Right => 1,
        }
    }
}

/// Advice for the allocations that hold the shares (huge pages, from the service's OS
/// layer): called on each new allocation before the rows move in.
pub type StorageAdvice = fn(&Vec<u16>);

/// Which share vectors of an enrolled entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Code shares, 12,800 coefficients.
    Code,
    /// Trimmed-mask shares, 6,400 coefficients.
    Mask,
}

impl Part {
    /// Coefficients per vector.
    pub const fn coefs(self) -> usize {
        match self {
            Part::Code => CODE_COEFS,
            Part::Mask => MASK_COEFS,
        }
    }
}

/// Row-major shares of one eye and part, from a cache line on. A row is a whole number of
/// cache lines (12,800 or 6,400 values), so every row starts at one too: the engines' SIMD
/// reads of a row never straddle two lines, where from the allocator's pointer (16 bytes past
/// a page) every other 32-byte read would.
#[derive(Default)]
struct Rows {
    /// `start` values of padding, then the rows.
    buf: Vec<u16>,
    start: usize,
    advice: Option<StorageAdvice>,
}

impl Rows {
    fn values(&self) -> &[u16] {
        &self.buf[self.start..]
    }

    fn values_mut(&mut self) -> &mut [u16] {
        &mut self.buf[self.start..]
    }

    /// Inserts `values` as row `row`. Growth goes through [`Rows::reserve_zeroizing`], so no
    /// copy of earlier rows is freed unzeroized.
    fn insert(&mut self, row: usize, values: &[u16]) {
        self.reserve_zeroizing(values.len());
        let at = self.start + row * values.len();
        // Within capacity: `splice` shifts the tail in place and does not reallocate.
        self.buf.splice(at..at, values.iter().copied());
    }

    /// Appends one row from its little-endian bytes, decoded straight into place.
    fn extend_le(&mut self, bytes: &[u8]) {
        self.reserve_zeroizing(bytes.len() / 2);
        self.buf.extend(
            bytes
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]])),
        );
    }

    /// Makes room for `additional` more values. Where the capacity does not suffice, the rows
    /// move to a new allocation (doubling, as `Vec` would) and the old one is zeroized before
    /// it is freed; `Vec::reserve` would free it with the shares still in it.
    fn reserve_zeroizing(&mut self, additional: usize) {
        if self.buf.len() + additional <= self.buf.capacity() {
            return;
        }
        let len = self.values().len();
        let mut grown = Vec::with_capacity((len + additional).max(2 * len) + ALIGN_SLACK);
        if let Some(advise) = self.advice {
            advise(&grown);
        }
        let start = cache_line_start(grown.as_ptr());
        grown.resize(start, 0);
        grown.extend_from_slice(self.values());
        let mut old = core::mem::replace(&mut self.buf, grown);
        self.start = start;
        old.zeroize();
    }

    /// Keeps the first `len` values, zeroizing the rest.
    fn truncate(&mut self, len: usize) {
        self.values_mut()[len..].zeroize();
        self.buf.truncate(self.start + len);
    }
}

impl Drop for Rows {
    fn drop(&mut self) {
        self.buf.zeroize();
    }
}

/// Rows appended by [`MatchDb::append_zeroed`], zeroed until filled.
pub struct NewRows<'a> {
    serial_ids: &'a [u64],
    codes: [&'a mut [u16]; 2],
    masks: [&'a mut [u16]; 2],
}

impl core::fmt::Debug for NewRows<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NewRows")
            .field("rows", &self.serial_ids.len())
            .finish_non_exhaustive()
    }
}

impl<'a> NewRows<'a> {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.serial_ids.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.serial_ids.is_empty()
    }

    /// The serial id of each row.
    pub fn serial_ids(&self) -> &'a [u64] {
        self.serial_ids
    }

    /// The rows before `row` and those from it, to fill on two threads.
    ///
    /// # Panics
    /// If `row` is past the end.
    pub fn split_at(self, row: usize) -> (NewRows<'a>, NewRows<'a>) {
        let (ids_a, ids_b) = self.serial_ids.split_at(row);
        let [lc, rc] = self.codes;
        let [lm, rm] = self.masks;
        let (lc_a, lc_b) = lc.split_at_mut(row * CODE_COEFS);
        let (rc_a, rc_b) = rc.split_at_mut(row * CODE_COEFS);
        let (lm_a, lm_b) = lm.split_at_mut(row * MASK_COEFS);
        let (rm_a, rm_b) = rm.split_at_mut(row * MASK_COEFS);
        (
            NewRows {
                serial_ids: ids_a,
                codes: [lc_a, rc_a],
                masks: [lm_a, rm_a],
            },
            NewRows {
                serial_ids: ids_b,
                codes: [lc_b, rc_b],
                masks: [lm_b, rm_b],
            },
        )
    }

    /// Fills row `row` from its shares' little-endian bytes, `[code, mask]` per eye.
    ///
    /// # Panics
    /// If `row` is past the end or a part has the wrong length.
    pub fn set_le_bytes(&mut self, row: usize, left: [&[u8]; 2], right: [&[u8]; 2]) {
        for (eye, [code, mask]) in [left, right].into_iter().enumerate() {
            assert!(code.len() == 2 * CODE_COEFS && mask.len() == 2 * MASK_COEFS);
            let codes = &mut self.codes[eye][row * CODE_COEFS..(row + 1) * CODE_COEFS];
            let masks = &mut self.masks[eye][row * MASK_COEFS..(row + 1) * MASK_COEFS];
            for (dst, src) in [(codes, code), (masks, mask)] {
                for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
                    *d = u16::from_le_bytes([c[0], c[1]]);
                }
            }
        }
    }
}

/// Writes a zero into every page of `buffers` (unused capacity), each buffer split over
/// `threads` threads.
fn touch_pages<'a>(
    buffers: impl Iterator<Item = &'a mut [core::mem::MaybeUninit<u16>]>,
    threads: usize,
) {
    const PAGE_VALUES: usize = 4096 / core::mem::size_of::<u16>();
    let threads = threads.max(1);
    let mut shares: Vec<Vec<&mut [core::mem::MaybeUninit<u16>]>> =
        (0..threads).map(|_| Vec::new()).collect();
    for buffer in buffers {
        let per_thread = buffer.len().div_ceil(threads).max(1);
        for (share, piece) in shares.iter_mut().zip(buffer.chunks_mut(per_thread)) {
            share.push(piece);
        }
    }
    std::thread::scope(|s| {
        for share in shares {
            s.spawn(move || {
                for piece in share {
                    for page in piece.chunks_mut(PAGE_VALUES) {
                        page[0] = core::mem::MaybeUninit::new(0);
                    }
                }
            });
        }
    });
}

/// Changes a database remembers for mirrors to replay; an older mirror reloads in full.
pub const CHANGE_LOG: usize = 4096;

/// One change to the database, by serial id, for mirrors (a GPU engine's resident copy) to
/// replay in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The entry was added or its shares replaced.
    Upsert(u64),
    /// The entry was removed.
    Remove(u64),
}

/// Distinguishes databases, so a mirror never replays one database's changes onto another's.
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

/// Contiguous share database.
pub struct MatchDb {
    serial_ids: Vec<u64>,
    codes: [Rows; 2],
    masks: [Rows; 2],
    instance: u64,
    /// Changes ever made; the log holds the last `log.len()` of them.
    generation: u64,
    log: VecDeque<Change>,
}

impl Default for MatchDb {
    fn default() -> MatchDb {
        MatchDb {
            serial_ids: Vec::new(),
            codes: Default::default(),
            masks: Default::default(),
            instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            generation: 0,
            log: VecDeque::new(),
        }
    }
}

impl core::fmt::Debug for MatchDb {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MatchDb")
            .field("entries", &self.serial_ids.len())
            .finish_non_exhaustive()
    }
}

impl MatchDb {
    /// An empty database.
    pub fn new() -> MatchDb {
        MatchDb::default()
    }

    /// This database, its share allocations advised by `advice` from now on.
    pub fn with_storage_advice(mut self, advice: StorageAdvice) -> MatchDb {
        for rows in self.codes.iter_mut().chain(self.masks.iter_mut()) {
            rows.advice = Some(advice);
        }
        self
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.serial_ids.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.serial_ids.is_empty()
    }

    /// Serial ids by row.
    pub fn serial_ids(&self) -> &[u64] {
        &self.serial_ids
    }

    /// Identifies this database among all in the process.
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// Number of changes ever made.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The changes after the first `generation`, in order; `None` once they have left the log.
    pub fn changes_since(&self, generation: u64) -> Option<impl Iterator<Item = Change> + '_> {
        let kept = self.log.len() as u64;
        let skip = generation.checked_sub(self.generation - kept)?;
        (generation <= self.generation).then(|| self.log.iter().skip(skip as usize).copied())
    }

    fn record(&mut self, change: Change) {
        if self.log.len() == CHANGE_LOG {
            self.log.pop_front();
        }
        self.log.push_back(change);
        self.generation += 1;
    }

    /// The row of `serial_id`, if enrolled.
    pub fn row_of(&self, serial_id: u64) -> Option<usize> {
        self.serial_ids.binary_search(&serial_id).ok()
    }

    /// Adds an entry with a serial id above every enrolled one (the usual case).
    ///
    /// # Panics
    /// If `serial_id` is not above every enrolled serial id.
    pub fn push(&mut self, serial_id: u64, shares: &PartyShares) {
        assert!(self.serial_ids.last().is_none_or(|&last| last < serial_id));
        self.insert(serial_id, shares);
    }

    /// Makes room for `additional` more entries at once (a load that knows its size), so that
    /// appending them moves no rows, and touches the new room on `threads` threads: the
    /// kernel's zeroing of fresh pages, much of a large load's time, runs on all of them
    /// rather than on the one that fills the rows.
    pub fn reserve(&mut self, additional: usize, threads: usize) {
        self.serial_ids.reserve(additional);
        for (code, mask) in self.codes.iter_mut().zip(self.masks.iter_mut()) {
            code.reserve_zeroizing(additional * CODE_COEFS);
            mask.reserve_zeroizing(additional * MASK_COEFS);
        }
        let spare = self
            .codes
            .iter_mut()
            .chain(self.masks.iter_mut())
            .map(|rows| rows.buf.spare_capacity_mut());
        touch_pages(spare, threads);
    }

    /// Adds an entry with a serial id above every enrolled one from its shares' little-endian
    /// bytes, `[code, mask]` per eye (the stored form), decoded straight into the rows: a
    /// start-up load makes no copy of an entry on the way.
    ///
    /// # Panics
    /// If `serial_id` is not above every enrolled serial id, or a part has the wrong length.
    pub fn push_le_bytes(&mut self, serial_id: u64, left: [&[u8]; 2], right: [&[u8]; 2]) {
        assert!(self.serial_ids.last().is_none_or(|&last| last < serial_id));
        for [code, mask] in [left, right] {
            assert!(code.len() == 2 * CODE_COEFS && mask.len() == 2 * MASK_COEFS);
        }
        self.record(Change::Upsert(serial_id));
        self.serial_ids.push(serial_id);
        for (eye, [code, mask]) in [left, right].into_iter().enumerate() {
            self.codes[eye].extend_le(code);
            self.masks[eye].extend_le(mask);
        }
    }

    /// Appends zeroed rows for `serial_ids` (ascending, above every enrolled one) and returns
    /// them to be filled in place: a load that knows the serial ids first fills disjoint parts
    /// of them on several threads ([`NewRows::split_at`]).
    ///
    /// # Panics
    /// If `serial_ids` is not ascending and above every enrolled serial id.
    pub fn append_zeroed(&mut self, serial_ids: &[u64]) -> NewRows<'_> {
        let above = self.serial_ids.last().copied();
        let ascending = serial_ids.windows(2).all(|w| w[0] < w[1]);
        assert!(ascending && above.is_none_or(|last| serial_ids.first().is_none_or(|&f| last < f)));
        let first = self.len();
        for &serial in serial_ids {
            self.record(Change::Upsert(serial));
        }
        self.serial_ids.extend_from_slice(serial_ids);
        let n = serial_ids.len();
        let [lc, rc] = &mut self.codes;
        let [lm, rm] = &mut self.masks;
        let grow = |rows: &mut Rows, coefs: usize| {
            rows.reserve_zeroizing(n * coefs);
            let len = rows.buf.len();
            rows.buf.resize(len + n * coefs, 0);
        };
        grow(lc, CODE_COEFS);
        grow(rc, CODE_COEFS);
        grow(lm, MASK_COEFS);
        grow(rm, MASK_COEFS);
        NewRows {
            serial_ids: &self.serial_ids[first..],
            codes: [
                &mut lc.values_mut()[first * CODE_COEFS..],
                &mut rc.values_mut()[first * CODE_COEFS..],
            ],
            masks: [
                &mut lm.values_mut()[first * MASK_COEFS..],
                &mut rm.values_mut()[first * MASK_COEFS..],
            ],
        }
    }

    /// Adds an entry at its place in serial order; returns its row. Replaces an entry with the
    /// same serial id.
    pub fn insert(&mut self, serial_id: u64, shares: &PartyShares) -> usize {
        let row = match self.serial_ids.binary_search(&serial_id) {
            Ok(row) => {
                self.replace(row, shares);
                return row;
            }
            Err(row) => row,
        };
        self.record(Change::Upsert(serial_id));
        self.serial_ids.insert(row, serial_id);
        for (eye, e) in [&shares.left, &shares.right].into_iter().enumerate() {
            self.codes[eye].insert(row, e.code.coefs());
            self.masks[eye].insert(row, e.mask.coefs());
        }
        row
    }

    /// Overwrites row `row` with new shares (reset).
    pub fn replace(&mut self, row: usize, shares: &PartyShares) {
        self.record(Change::Upsert(self.serial_ids[row]));
        for (eye, e) in [&shares.left, &shares.right].into_iter().enumerate() {
            self.codes[eye].values_mut()[row * CODE_COEFS..(row + 1) * CODE_COEFS]
                .copy_from_slice(e.code.coefs());
            self.masks[eye].values_mut()[row * MASK_COEFS..(row + 1) * MASK_COEFS]
                .copy_from_slice(e.mask.coefs());
        }
    }

    /// Removes row `row` (deletion): later rows move up, keeping serial order, and the
    /// vacated tail is zeroized, so nothing of the deleted entry stays behind.
    pub fn remove(&mut self, row: usize) {
        let last = self.len() - 1;
        self.record(Change::Remove(self.serial_ids[row]));
        self.serial_ids.remove(row);
        for (v, len) in self
            .codes
            .iter_mut()
            .map(|v| (v, CODE_COEFS))
            .chain(self.masks.iter_mut().map(|v| (v, MASK_COEFS)))
        {
            v.values_mut()
                .copy_within((row + 1) * len..(last + 1) * len, row * len);
            v.truncate(last * len);
        }
    }

    /// One eye's code share of row `row`.
    pub fn code(&self, eye: Eye, row: usize) -> &[u16] {
        &self.codes[eye.index()].values()[row * CODE_COEFS..(row + 1) * CODE_COEFS]
    }

    /// One eye's trimmed mask share of row `row`.
    pub fn mask(&self, eye: Eye, row: usize) -> &[u16] {
        &self.masks[eye.index()].values()[row * MASK_COEFS..(row + 1) * MASK_COEFS]
    }

    /// One eye's code shares of rows `rows`, contiguous.
    pub fn codes(&self, eye: Eye, rows: core::ops::Range<usize>) -> &[u16] {
        &self.codes[eye.index()].values()[rows.start * CODE_COEFS..rows.end * CODE_COEFS]
    }

    /// One eye's `part` shares of rows `rows`, contiguous.
    pub fn vectors(&self, eye: Eye, part: Part, rows: core::ops::Range<usize>) -> &[u16] {
        match part {
            Part::Code => self.codes(eye, rows),
            Part::Mask => self.masks(eye, rows),
        }
    }

    /// One eye's trimmed mask shares of rows `rows`, contiguous.
    pub fn masks(&self, eye: Eye, rows: core::ops::Range<usize>) -> &[u16] {
        &self.masks[eye.index()].values()[rows.start * MASK_COEFS..rows.end * MASK_COEFS]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{RngCore, SeedableRng};

    /// Entries inserted out of order, across many growths of the row vectors, end up in serial
    /// order with their own shares; removals close the gap.
    #[test]
    fn rows_stay_in_serial_order_through_growth_and_removal() {
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let people: Vec<_> = (0..40)
            .map(|_| crate::synthetic::random_shares(&mut rng))
            .collect();
        let mut serials: Vec<u64> = (1..=40).collect();
        for i in (1..serials.len()).rev() {
            serials.swap(i, rng.next_u32() as usize % (i + 1));
        }
        let mut db = MatchDb::new();
        for &s in &serials {
            db.insert(s, &people[s as usize - 1]);
            // Every growth keeps the rows at a cache line.
            for eye in Eye::BOTH {
                for part in [Part::Code, Part::Mask] {
                    assert_eq!(db.vectors(eye, part, 0..1).as_ptr() as usize % 64, 0);
                }
            }
        }
        db.remove(db.row_of(7).expect("enrolled"));
        let expected: Vec<u64> = (1..=40).filter(|&s| s != 7).collect();
        assert_eq!(db.serial_ids(), &expected[..]);
        for (row, &s) in expected.iter().enumerate() {
            let p = &people[s as usize - 1];
            assert_eq!(db.code(Eye::Left, row), p.left.code.coefs());
            assert_eq!(db.mask(Eye::Right, row), p.right.mask.coefs());
        }
    }

    /// Entries appended from their little-endian bytes, one by one into reserved room or as
    /// zeroed rows filled in two parts, equal the same entries inserted one by one, row for row
    /// and in the change log.
    #[test]
    fn appending_stored_bytes_equals_inserting() {
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let people: Vec<_> = (0..12)
            .map(|_| crate::synthetic::random_shares(&mut rng))
            .collect();
        let le = |v: &[u16]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let bytes =
            |p: &PartyShares| [&p.left, &p.right].map(|e| [le(e.code.coefs()), le(e.mask.coefs())]);
        let serials: Vec<u64> = (0..people.len() as u64).map(|i| 3 * i + 1).collect();
        let (mut inserted, mut appended, mut filled) =
            (MatchDb::new(), MatchDb::new(), MatchDb::new());
        // Below the appended rows: the first two entries go in one by one.
        appended.reserve(5, 2);
        for (p, &serial) in people.iter().zip(&serials) {
            inserted.insert(serial, p);
            let [l, r] = bytes(p);
            appended.push_le_bytes(serial, [&l[0], &l[1]], [&r[0], &r[1]]);
        }
        for (p, &serial) in people.iter().zip(&serials).take(2) {
            filled.insert(serial, p);
        }
        let (mut a, mut b) = filled.append_zeroed(&serials[2..]).split_at(4);
        assert_eq!((a.len(), b.serial_ids()[0]), (4, serials[6]));
        for (part, first) in [(&mut b, 6), (&mut a, 2)] {
            for row in 0..part.len() {
                let [l, r] = bytes(&people[first + row]);
                part.set_le_bytes(row, [&l[0], &l[1]], [&r[0], &r[1]]);
            }
        }
        for db in [&appended, &filled] {
            assert_eq!(db.serial_ids(), inserted.serial_ids());
            assert_eq!(db.generation(), inserted.generation());
            for eye in Eye::BOTH {
                for part in [Part::Code, Part::Mask] {
                    let all = 0..people.len();
                    assert_eq!(
                        db.vectors(eye, part, all.clone()),
                        inserted.vectors(eye, part, all)
                    );
                    assert_eq!(db.vectors(eye, part, 0..1).as_ptr() as usize % 64, 0);
                }
            }
        }
    }
}

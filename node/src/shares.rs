//! Enrolled shares: one party's code and trimmed-mask shares of both eyes.
//! [`StoredShares`] is the serialised form the store keeps (little-endian
//! bytes: left code, left mask, right code, right mask); [`ShareDb`] is the
//! in-memory database matching runs against, rows in serial-id order so the
//! three parties pair the same rows.

use std::collections::HashMap;

use sdk_orb::shamir::{CodeShare, MaskShare, PartyShares};
use zeroize::Zeroize;

use crate::ids::SerialId;
use ocelli_mpc::db::Eye;
use ocelli_mpc::db::NewRows;
use ocelli_mpc::MatchDb;

/// Bytes of one eye's code share ([`sdk_orb::CODE_COEFS`] little-endian u16).
pub const CODE_BYTES: usize = sdk_orb::CODE_COEFS * 2;
/// Bytes of one eye's trimmed-mask share ([`sdk_orb::MASK_COEFS`] little-endian u16).
pub const MASK_BYTES: usize = sdk_orb::MASK_COEFS * 2;
/// Bytes of one enrolled entry.
pub const ENTRY_BYTES: usize = 2 * (CODE_BYTES + MASK_BYTES);

/// One party's shares of one person (zeroized on drop, no `Debug` of content).
#[derive(Clone, PartialEq, Eq)]
pub struct StoredShares(Box<[u8]>);

impl std::fmt::Debug for StoredShares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredShares").finish_non_exhaustive()
    }
}

impl Drop for StoredShares {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

/// Wrong entry length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("share entry is {0} bytes, expected {ENTRY_BYTES}")]
pub struct ShareLengthError(pub usize);

impl TryFrom<&[u8]> for StoredShares {
    type Error = ShareLengthError;
    fn try_from(b: &[u8]) -> Result<Self, Self::Error> {
        if b.len() != ENTRY_BYTES {
            return Err(ShareLengthError(b.len()));
        }
        Ok(Self(b.into()))
    }
}

impl StoredShares {
    /// Builds an entry from the four parts.
    ///
    /// # Errors
    /// A part has the wrong length.
    pub fn from_parts(
        left_code: &[u8],
        left_mask: &[u8],
        right_code: &[u8],
        right_mask: &[u8],
    ) -> Result<Self, ShareLengthError> {
        let total = left_code.len() + left_mask.len() + right_code.len() + right_mask.len();
        if left_code.len() != CODE_BYTES
            || right_code.len() != CODE_BYTES
            || left_mask.len() != MASK_BYTES
            || right_mask.len() != MASK_BYTES
        {
            return Err(ShareLengthError(total));
        }
        let mut v = Vec::with_capacity(ENTRY_BYTES);
        v.extend_from_slice(left_code);
        v.extend_from_slice(left_mask);
        v.extend_from_slice(right_code);
        v.extend_from_slice(right_mask);
        Ok(Self(v.into_boxed_slice()))
    }

    /// Builds an entry by letting `fill` write all [`ENTRY_BYTES`] bytes.
    pub fn build(fill: impl FnOnce(&mut [u8])) -> Self {
        let mut v = vec![0u8; ENTRY_BYTES].into_boxed_slice();
        fill(&mut v);
        Self(v)
    }

    /// The serialised entry.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// (code, mask) bytes of the left eye.
    pub fn left(&self) -> (&[u8], &[u8]) {
        let (c, rest) = self.0.split_at(CODE_BYTES);
        (c, &rest[..MASK_BYTES])
    }

    /// (code, mask) bytes of the right eye.
    pub fn right(&self) -> (&[u8], &[u8]) {
        let (_, rest) = self.0.split_at(CODE_BYTES + MASK_BYTES);
        let (c, m) = rest.split_at(CODE_BYTES);
        (c, m)
    }

    /// The shares as ring coefficients (boxed: 76.8 KB).
    pub fn to_party_shares(&self) -> Box<PartyShares> {
        let mut out = Box::new(PartyShares::zero());
        for ((code, mask), eye) in [self.left(), self.right()]
            .into_iter()
            .zip([&mut out.left, &mut out.right])
        {
            // Lengths are fixed by construction.
            let _ = CodeShare::read_le_bytes(code, &mut eye.code);
            let _ = MaskShare::read_le_bytes(mask, &mut eye.mask);
        }
        out
    }

    /// Serialises ring-coefficient shares.
    pub fn from_party_shares(shares: &PartyShares) -> Self {
        Self::build(|b| {
            let (l, r) = b.split_at_mut(CODE_BYTES + MASK_BYTES);
            for (part, eye) in [l, r].into_iter().zip([&shares.left, &shares.right]) {
                let (c, m) = part.split_at_mut(CODE_BYTES);
                eye.code.write_le_bytes(c);
                eye.mask.write_le_bytes(m);
            }
        })
    }
}

/// `[code, mask]` bytes of each eye of a stored entry.
///
/// # Panics
/// If `entry` is shorter than [`ENTRY_BYTES`].
pub fn eye_parts(entry: &[u8]) -> [[&[u8]; 2]; 2] {
    let (left, right) = entry.split_at(CODE_BYTES + MASK_BYTES);
    let (left_code, left_mask) = left.split_at(CODE_BYTES);
    let (right_code, right_mask) = right.split_at(CODE_BYTES);
    [[left_code, left_mask], [right_code, right_mask]]
}

/// The in-memory share database: a [`MatchDb`] whose rows are kept in
/// serial-id order, and an index from serial id to row.
#[derive(Debug)]
pub struct ShareDb {
    rows: MatchDb,
    index: HashMap<SerialId, usize>,
    /// The last batch whose share writes the rows hold (what a snapshot of them is taken at).
    applied_batch: u64,
}

impl Default for ShareDb {
    /// Empty, its share allocations advised to use huge pages: the backends stream them.
    fn default() -> ShareDb {
        ShareDb {
            rows: MatchDb::new().with_storage_advice(ocelli_os::advise_huge_pages::<u16>),
            index: HashMap::new(),
            applied_batch: 0,
        }
    }
}

impl ShareDb {
    /// Empty, with room for `entries` (a start-up load that knows the count), its memory
    /// touched on `threads` threads: appending them moves no rows.
    pub fn with_capacity(entries: usize, threads: usize) -> ShareDb {
        let mut db = ShareDb::default();
        db.rows.reserve(entries, threads);
        db.index.reserve(entries);
        db
    }

    /// Appends zeroed rows for `serial_ids` (ascending, above every enrolled one) to be filled
    /// in place, on several threads where split ([`NewRows::split_at`]).
    ///
    /// # Panics
    /// If `serial_ids` is not ascending and above every enrolled serial id.
    pub fn append_zeroed(&mut self, serial_ids: &[u64]) -> NewRows<'_> {
        let first = self.rows.len();
        self.index.extend(
            serial_ids
                .iter()
                .enumerate()
                .map(|(i, &s)| (SerialId(s), first + i)),
        );
        self.rows.append_zeroed(serial_ids)
    }

    /// Inserts or replaces an entry from its stored bytes. Above every enrolled serial id (a
    /// load in serial order) the bytes are decoded straight into the rows, with no copy of
    /// the entry on the way.
    ///
    /// # Errors
    /// `entry` is not [`ENTRY_BYTES`] long.
    pub fn put_bytes(&mut self, id: SerialId, entry: &[u8]) -> Result<(), ShareLengthError> {
        if entry.len() != ENTRY_BYTES {
            return Err(ShareLengthError(entry.len()));
        }
        let appends = self
            .rows
            .serial_ids()
            .last()
            .is_none_or(|&last| last < id.0);
        if !appends {
            self.put(id, StoredShares::try_from(entry)?);
            return Ok(());
        }
        let [left, right] = eye_parts(entry);
        self.rows.push_le_bytes(id.0, left, right);
        self.index.insert(id, self.rows.len() - 1);
        Ok(())
    }

    /// Inserts or replaces.
    pub fn put(&mut self, id: SerialId, s: StoredShares) {
        let shares = s.to_party_shares();
        if let Some(&row) = self.index.get(&id) {
            self.rows.replace(row, &shares);
            return;
        }
        let row = self.rows.insert(id.0, &shares);
        if row + 1 < self.rows.len() {
            self.reindex();
        } else {
            self.index.insert(id, row);
        }
    }

    /// Removes, overwriting the entry's shares in memory.
    pub fn remove(&mut self, id: SerialId) {
        if let Some(row) = self.index.remove(&id) {
            self.rows.remove(row);
            if row < self.rows.len() {
                self.reindex();
            }
        }
    }

    fn reindex(&mut self) {
        self.index = self
            .rows
            .serial_ids()
            .iter()
            .enumerate()
            .map(|(row, &s)| (SerialId(s), row))
            .collect();
    }

    /// Whether `id` is enrolled.
    pub fn contains(&self, id: SerialId) -> bool {
        self.index.contains_key(&id)
    }

    /// The row of `id`, if enrolled.
    pub fn row_of(&self, id: SerialId) -> Option<usize> {
        self.index.get(&id).copied()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows matching runs against.
    pub fn rows(&self) -> &MatchDb {
        &self.rows
    }

    /// The last batch whose share writes the rows hold.
    pub fn applied_batch(&self) -> u64 {
        self.applied_batch
    }

    /// Records that the rows hold the share writes of every batch up to `batch`.
    pub fn set_applied_batch(&mut self, batch: u64) {
        self.applied_batch = batch;
    }

    /// Writes row `row`'s entry into `out` in its stored form (the inverse of the load's
    /// decoding).
    ///
    /// # Panics
    /// If `row` is past the end or `out` is not [`ENTRY_BYTES`] long.
    pub fn entry_le_bytes(&self, row: usize, out: &mut [u8]) {
        assert_eq!(out.len(), ENTRY_BYTES);
        let mut at = 0;
        for eye in [Eye::Left, Eye::Right] {
            for part in [self.rows.code(eye, row), self.rows.mask(eye, row)] {
                for (d, v) in out[at..at + 2 * part.len()].chunks_exact_mut(2).zip(part) {
                    d.copy_from_slice(&v.to_le_bytes());
                }
                at += 2 * part.len();
            }
        }
    }
}

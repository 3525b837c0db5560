//! The in-memory database matching runs against: one party's shares of every enrolled
//! person, contiguous per eye so engines stream it (codes `n x 12,800`, trimmed masks
//! `n x 6,400`), with the serial id of each row.

use sdk_orb::shamir::PartyShares;
use sdk_orb::{CODE_COEFS, MASK_COEFS};
use zeroize::Zeroize;

/// Contiguous share database.
#[derive(Default)]
pub struct MatchDb {
    serial_ids: Vec<u64>,
    codes: [Vec<u16>; 2],
    masks: [Vec<u16>; 2],
}

impl core::fmt::Debug for MatchDb {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MatchDb")
            .field("entries", &self.serial_ids.len())
            .finish_non_exhaustive()
    }
}

impl Drop for MatchDb {
    fn drop(&mut self) {
        for v in self.codes.iter_mut().chain(self.masks.iter_mut()) {
            v.zeroize();
        }
    }
}

impl MatchDb {
    /// An empty database.
    pub fn new() -> MatchDb {
        MatchDb::default()
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

    /// The row of `serial_id`, if enrolled.
    pub fn row_of(&self, serial_id: u64) -> Option<usize> {
        self.serial_ids.iter().position(|&s| s == serial_id)
    }

    /// Appends an entry.
    pub fn push(&mut self, serial_id: u64, shares: &PartyShares) {
        self.serial_ids.push(serial_id);
        for (eye, e) in [&shares.left, &shares.right].into_iter().enumerate() {
            self.codes[eye].extend_from_slice(e.code.coefs());
            self.masks[eye].extend_from_slice(e.mask.coefs());
        }
    }

    /// Overwrites row `row` with new shares (reset).
    pub fn replace(&mut self, row: usize, shares: &PartyShares) {
        for (eye, e) in [&shares.left, &shares.right].into_iter().enumerate() {
            self.codes[eye][row * CODE_COEFS..(row + 1) * CODE_COEFS]
                .copy_from_slice(e.code.coefs());
            self.masks[eye][row * MASK_COEFS..(row + 1) * MASK_COEFS]
                .copy_from_slice(e.mask.coefs());
        }
    }

    /// Removes row `row` (deletion): the last row moves into its place and the vacated shares
    /// are zeroized, so nothing of the deleted entry stays behind.
    pub fn remove(&mut self, row: usize) {
        let last = self.len() - 1;
        self.serial_ids.swap_remove(row);
        for (v, len) in self
            .codes
            .iter_mut()
            .map(|v| (v, CODE_COEFS))
            .chain(self.masks.iter_mut().map(|v| (v, MASK_COEFS)))
        {
            if row != last {
                v.copy_within(last * len..(last + 1) * len, row * len);
            }
            v[last * len..].zeroize();
            v.truncate(last * len);
        }
    }

    /// One eye's code share of row `row`.
    pub fn code(&self, eye: usize, row: usize) -> &[u16] {
        &self.codes[eye][row * CODE_COEFS..(row + 1) * CODE_COEFS]
    }

    /// One eye's trimmed mask share of row `row`.
    pub fn mask(&self, eye: usize, row: usize) -> &[u16] {
        &self.masks[eye][row * MASK_COEFS..(row + 1) * MASK_COEFS]
    }

    /// One eye's code shares of rows `rows`, contiguous.
    pub fn codes(&self, eye: usize, rows: core::ops::Range<usize>) -> &[u16] {
        &self.codes[eye][rows.start * CODE_COEFS..rows.end * CODE_COEFS]
    }

    /// One eye's trimmed mask shares of rows `rows`, contiguous.
    pub fn masks(&self, eye: usize, rows: core::ops::Range<usize>) -> &[u16] {
        &self.masks[eye][rows.start * MASK_COEFS..rows.end * MASK_COEFS]
    }
}

//! Enrolled shares: one party's code and trimmed-mask shares of both eyes,
//! kept as little-endian bytes (left code, left mask, right code, right mask)
//! and in memory for matching.

use std::collections::BTreeMap;
use std::sync::Arc;

use zeroize::Zeroize;

use crate::ids::SerialId;

/// Bytes of one eye's code share (12,800 u16).
pub const CODE_BYTES: usize = 12_800 * 2;
/// Bytes of one eye's trimmed-mask share (6,400 u16).
pub const MASK_BYTES: usize = 6_400 * 2;
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
}

/// The in-memory share database (what matching runs against).
#[derive(Debug, Default)]
pub struct ShareDb {
    entries: BTreeMap<SerialId, Arc<StoredShares>>,
}

impl ShareDb {
    /// Inserts or replaces.
    pub fn put(&mut self, id: SerialId, s: StoredShares) {
        self.entries.insert(id, Arc::new(s));
    }
    /// Removes.
    pub fn remove(&mut self, id: SerialId) {
        self.entries.remove(&id);
    }
    /// Whether `id` is enrolled.
    pub fn contains(&self, id: SerialId) -> bool {
        self.entries.contains_key(&id)
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Entries in serial order.
    pub fn iter(&self) -> impl Iterator<Item = (SerialId, &StoredShares)> {
        self.entries.iter().map(|(k, v)| (*k, v.as_ref()))
    }
}

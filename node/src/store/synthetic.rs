//! Synthetic enrolled people written straight into an empty store, to measure the start-up
//! load at scale (`ocelli-node bench-startup`). The shares are random bytes and no MPC runs:
//! nothing is ever matched against them. Built only with the `test-support` feature.

use prost::Message;
use rand::RngCore;

use super::{BatchWrite, ShareWrite, Store, StoreError};
use crate::ids::SerialId;
use crate::shares::{ShareDb, StoredShares};

/// People per write transaction.
pub const FILL_BATCH: u64 = 1_000;

/// Why a fill did not run or stopped.
#[derive(Debug, thiserror::Error)]
pub enum FillError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store already holds enrolments or batches.
    #[error("the store is not empty; synthetic people go only into an empty one")]
    NotEmpty,
}

/// Enrols `people` synthetic people (serial ids 1 to `people`) into the empty `store`, in
/// transactions of [`FILL_BATCH`], each logged as a batch (ids from 1, a commit naming the
/// batch and its first serial id, no requests) as enrolments are; `progress` hears the people
/// written so far after each.
///
/// # Errors
/// The store is not empty, or fails (the transactions before stay written).
pub fn fill(
    store: &dyn Store,
    people: u64,
    rng: &mut impl RngCore,
    progress: &mut dyn FnMut(u64),
) -> Result<(), FillError> {
    let meta = store.meta()?;
    if store.share_count()? != 0 || meta.next_serial != 1 || meta.last_applied_batch != 0 {
        return Err(FillError::NotEmpty);
    }
    let mut next = 1;
    while next <= people {
        let end = people.min(next + FILL_BATCH - 1);
        let shares = (next..=end)
            .map(|serial| {
                let entry = StoredShares::build(|b| rng.fill_bytes(b));
                (SerialId(serial), ShareWrite::Put(entry))
            })
            .collect();
        let batch_id = next.div_ceil(FILL_BATCH);
        let commit = shared_proto::v1::BatchCommit {
            batch_id,
            next_serial_id: next,
            ..Default::default()
        };
        store.apply_batch(&BatchWrite {
            batch: Some((batch_id, commit.encode_to_vec(), [0; 32])),
            shares,
            next_serial: end + 1,
            ..BatchWrite::default()
        })?;
        progress(end);
        next = end + 1;
    }
    Ok(())
}

/// The share database loaded entry by entry through [`Store::for_each_share`] and
/// [`ShareDb::put`], each entry copied out and decoded on its own: the reference the start-up
/// load ([`super::load::share_db`]) is held to, bit for bit, and measured against.
///
/// # Errors
/// Backend failure or a corrupt entry.
pub fn share_db_one_by_one(store: &dyn Store) -> Result<ShareDb, StoreError> {
    let mut db = ShareDb::default();
    store.for_each_share(&mut |id, s| db.put(id, s))?;
    Ok(db)
}

//! Moving a node's store from redb to PostgreSQL (`ocelli-node migrate-store`),
//! verified: the copy's fingerprint and summary equal the source's.

use std::path::Path;
use std::time::Instant;

use super::postgres::{PgOptions, PgStore};
use super::redb::RedbStore;
use super::{Store, StoreError};
use crate::ids::SerialId;
use crate::shares::StoredShares;

/// Shares per write transaction while copying.
const COPY_CHUNK: usize = 10_000;

/// Why a copy failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// Either store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The destination already holds data.
    #[error("the destination store is not empty; refusing to merge into it")]
    NotEmpty,
    /// The copy differs from the source.
    #[error("the copy does not match the source ({0} differs)")]
    Mismatch(&'static str),
}

/// What was copied.
#[derive(Debug, Clone, Copy)]
pub struct MigrateReport {
    /// Log entries.
    pub requests: usize,
    /// Enrolled entries.
    pub shares: u64,
    /// Batch log entries.
    pub batches: usize,
    /// Seconds taken, copy and verification.
    pub seconds: f64,
    /// The fingerprint both stores have.
    pub fingerprint: [u8; 32],
}

/// Copies the redb store in `from` into an empty PostgreSQL schema and verifies it, with
/// the destination's connections on `rt` (call it from a thread that may block, as
/// [`PgStore::open`]). Run it with the node stopped.
///
/// # Errors
/// Either store fails, the destination is not empty, or the copy differs.
pub fn redb_to_postgres(
    from: &Path,
    to: &PgOptions,
    rt: tokio::runtime::Handle,
) -> Result<MigrateReport, MigrateError> {
    let start = Instant::now();
    if !from.join("node.redb").exists() {
        return Err(StoreError::Backend(format!("no node.redb in {}", from.display())).into());
    }
    let src = RedbStore::open(from)?;
    let dst = PgStore::open(to, rt)?;
    if dst.share_count()? != 0 || !dst.summary()?.requests.is_empty() || dst.batch(1)?.is_some() {
        return Err(MigrateError::NotEmpty);
    }
    let raw = src.raw_rows()?;
    let (requests, batches) = (raw.requests.len(), raw.batches.len());
    dst.put_raw(raw)?;
    let mut chunk: Vec<(SerialId, StoredShares)> = Vec::with_capacity(COPY_CHUNK);
    let mut failed = None;
    let mut shares = 0u64;
    src.for_each_share(&mut |id, s| {
        if failed.is_some() {
            return;
        }
        chunk.push((id, s));
        shares += 1;
        if chunk.len() == COPY_CHUNK {
            if let Err(e) = dst.put_shares(std::mem::take(&mut chunk)) {
                failed = Some(e);
            }
        }
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    dst.put_shares(chunk)?;
    if src.summary()? != dst.summary()? {
        return Err(MigrateError::Mismatch("summary"));
    }
    if src.stats_period()? != dst.stats_period()?
        || src.opened_histograms(None)? != dst.opened_histograms(None)?
    {
        return Err(MigrateError::Mismatch("statistics"));
    }
    let fingerprint = src.fingerprint()?;
    if fingerprint != dst.fingerprint()? {
        return Err(MigrateError::Mismatch("fingerprint"));
    }
    Ok(MigrateReport {
        requests,
        shares,
        batches,
        seconds: start.elapsed().as_secs_f64(),
        fingerprint,
    })
}

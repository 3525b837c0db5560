//! The start-up load: every enrolled entry from the store into the in-memory [`ShareDb`], in
//! serial order. The rows are allocated once for the stored count, and each entry is decoded
//! from the backend's buffer straight into its row: no allocation or copy per entry. Where the
//! backend reads the serial ids apart from the shares (PostgreSQL), the rows are laid out
//! first and filled in serial ranges on several connections at once. Where the node keeps a
//! share snapshot ([`super::snapshot`]), the ranges are filled from it instead, and only the
//! entries written since it was taken come from the store.

use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ocelli_mpc::db::NewRows;

use super::snapshot::{Loaded, Snapshot, SnapshotError};
use super::{Store, StoreError};
use crate::ids::SerialId;
use crate::shares::{eye_parts, ShareDb, ENTRY_BYTES};

/// Entries between progress reports.
const PROGRESS_EVERY: u64 = 256;

/// Loads the share database; `progress` hears the entries loaded so far, now and then.
///
/// # Errors
/// Backend failure, an entry of the wrong length, or (ranged reads) entries that changed
/// while loading.
pub fn share_db(store: &dyn Store, progress: &(dyn Fn(u64) + Sync)) -> Result<ShareDb, StoreError> {
    if let Some(serials) = store.share_serials()? {
        return in_ranges(store, &serials, progress);
    }
    let total = store.share_count()?;
    // A count that does not fit is corrupt: the rows could never be held.
    let total = usize::try_from(total).map_err(|_| StoreError::Corrupt("shares"))?;
    let mut db = ShareDb::with_capacity(total, cores());
    let mut n = 0u64;
    store.for_each_share_bytes(&mut |id, entry| {
        db.put_bytes(id, entry)
            .map_err(|_| StoreError::Corrupt("shares"))?;
        n += 1;
        if n.is_multiple_of(PROGRESS_EVERY) {
            progress(n);
        }
        Ok(())
    })?;
    progress(n);
    Ok(db)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

/// One range per available core, each read on its own thread (and connection).
fn in_ranges(
    store: &dyn Store,
    serials: &[u64],
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ShareDb, StoreError> {
    let loaded = AtomicU64::new(0);
    let db = in_parts(serials, |part| fill_part(store, part, &loaded, progress))?;
    progress(serials.len() as u64);
    Ok(db)
}

/// Lays out zeroed rows for `serials` (ascending) and has `fill` fill them, one part per
/// available core, each on its own thread.
///
/// # Errors
/// The first error a part's `fill` returned.
pub(crate) fn in_parts<E: From<StoreError> + Send>(
    serials: &[u64],
    fill: impl Fn(NewRows<'_>) -> Result<(), E> + Sync,
) -> Result<ShareDb, E> {
    let readers = cores();
    let per_part = serials.len().div_ceil(readers).max(1);
    let mut db = ShareDb::with_capacity(serials.len(), readers);
    let mut parts = Vec::with_capacity(readers);
    let mut rest = db.append_zeroed(serials);
    while rest.len() > per_part {
        let (part, after) = rest.split_at(per_part);
        parts.push(part);
        rest = after;
    }
    parts.push(rest);
    std::thread::scope(|s| {
        let fill = &fill;
        let threads: Vec<_> = parts
            .into_iter()
            .map(|part| s.spawn(move || fill(part)))
            .collect();
        threads.into_iter().try_for_each(|r| {
            r.join()
                .map_err(|_| E::from(StoreError::Unfinished("a load thread panicked".to_owned())))?
        })
    })?;
    Ok(db)
}

/// Reads the entries of `part`'s serial range into it, row by row.
fn fill_part(
    store: &dyn Store,
    mut part: NewRows<'_>,
    loaded: &AtomicU64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(), StoreError> {
    let ids = part.serial_ids();
    let (Some(&first), Some(&last)) = (ids.first(), ids.last()) else {
        return Ok(());
    };
    let mut row = 0;
    store.for_each_share_bytes_in(first..=last, &mut |id: SerialId, entry| {
        // The serial ids came from an earlier query: an entry added or removed since does not
        // fit the rows laid out.
        if ids.get(row) != Some(&id.0) || entry.len() != ENTRY_BYTES {
            return Err(StoreError::Corrupt("shares"));
        }
        let [left, right] = eye_parts(entry);
        part.set_le_bytes(row, left, right);
        row += 1;
        if (row as u64).is_multiple_of(PROGRESS_EVERY) {
            progress(loaded.fetch_add(PROGRESS_EVERY, Ordering::Relaxed) + PROGRESS_EVERY);
        }
        Ok(())
    })?;
    if row != ids.len() {
        return Err(StoreError::Corrupt("shares"));
    }
    Ok(())
}

/// How a start-up load went.
#[derive(Clone, Copy, Debug)]
pub struct LoadReport {
    /// Time the load took.
    pub took: Duration,
    /// Where the entries came from: `None` all from the store, else from a share snapshot and
    /// the entries written since.
    pub snapshot: Option<Loaded>,
}

/// [`share_db`] with a progress bar (on a terminal), logging the load rate; reads the share
/// snapshot at `snapshot` where one fits the store ([`Snapshot::open`]), and the store alone
/// otherwise. The database holds the store's last applied batch.
///
/// # Errors
/// As [`share_db`].
pub fn share_db_logged(
    store: &dyn Store,
    snapshot: Option<&Path>,
) -> Result<(ShareDb, LoadReport), StoreError> {
    let applied = store.meta()?.last_applied_batch;
    let bar = indicatif::ProgressBar::new(store.share_count()?);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "loading shares {bar:40} {pos}/{len} ({per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let progress = |n| bar.set_position(n);
    let from_snapshot = snapshot.and_then(|path| {
        let tried = Snapshot::open(path, store).and_then(|snap| match snap {
            Some(snap) => snap.load(store, &progress).map(Some),
            None => Ok(None),
        });
        match tried {
            Ok(Some(loaded)) => Some(loaded),
            Ok(None) => {
                tracing::info!(path = %path.display(), "no share snapshot yet: loading from the store");
                None
            }
            Err(SnapshotError::Unsupported) => None,
            Err(e) => {
                tracing::warn!(error = %e, "loading from the store instead");
                bar.set_position(0);
                None
            }
        }
    });
    let (mut db, source) = match from_snapshot {
        Some((db, loaded)) => (db, Some(loaded)),
        None => (share_db(store, &progress)?, None),
    };
    db.set_applied_batch(applied);
    bar.finish_and_clear();
    let took = start.elapsed();
    let secs = took.as_secs_f64().max(1e-9);
    let n = db.len();
    let bytes = n as f64 * ENTRY_BYTES as f64;
    tracing::info!(
        entries = n,
        from_snapshot = source.map_or(0, |l| l.from_snapshot),
        from_store = source.map_or(n as u64, |l| l.from_store),
        seconds = format!("{secs:.3}"),
        entries_per_s = format!("{:.0}", n as f64 / secs),
        mib_per_s = format!("{:.1}", bytes / 1048576.0 / secs),
        "share database loaded"
    );
    Ok((
        db,
        LoadReport {
            took,
            snapshot: source,
        },
    ))
}

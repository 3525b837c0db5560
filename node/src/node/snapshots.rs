//! Keeps the share snapshot current ([`crate::store::snapshot`]): written soon after a start
//! that read most entries from the store, then every `store.snapshot_interval_s` while batches
//! change the shares. Writing runs on a blocking thread and holds the rows' read lock only a
//! few rows at a time.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::NodeState;
use crate::store::snapshot::{self, SnapshotError, Written};

/// Runs until `stop` turns true (a write under way is abandoned).
pub(crate) async fn maintain(state: Arc<NodeState>, mut stop: watch::Receiver<bool>) {
    let Some(path) = state.config.store.snapshot_path(&state.config.data_dir) else {
        return;
    };
    let interval = Duration::from_secs(state.config.store.snapshot_interval_s);
    let mut taken_at =
        (!state.snapshot_due.load(Ordering::SeqCst)).then(|| state.shares().applied_batch());
    loop {
        if taken_at != Some(state.shares().applied_batch()) {
            let (st, p, stopping) = (state.clone(), path.clone(), stop.clone());
            let written =
                tokio::task::spawn_blocking(move || write(&st, &p, &|| *stopping.borrow())).await;
            match written {
                Ok(Ok(w)) => {
                    tracing::info!(
                        path = %path.display(),
                        entries = w.entries,
                        batch = w.batch,
                        gib = format!("{:.2}", w.bytes as f64 / f64::from(1u32 << 30)),
                        seconds = format!("{:.1}", w.seconds),
                        "share snapshot written"
                    );
                    state
                        .metrics
                        .snapshot_batch
                        .set(i64::try_from(w.batch).unwrap_or(i64::MAX));
                    taken_at = Some(w.batch);
                }
                Ok(Err(SnapshotError::Unsupported | SnapshotError::Cancelled { .. })) => return,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "share snapshot not written; a restart reads the entries since the last one from the store");
                }
                Err(e) => tracing::warn!(error = %e, "share snapshot writer stopped"),
            }
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Writes a snapshot and installs it, scrubbing from it first what was deleted meanwhile;
/// abandons it once `stopping`.
fn write(
    state: &NodeState,
    path: &Path,
    stopping: &dyn Fn() -> bool,
) -> Result<Written, SnapshotError> {
    *deleted_lock(state) = Some(Vec::new());
    let pending = snapshot::write_pending(path, state.store.as_ref(), || state.shares(), stopping);
    let mut deleted = deleted_lock(state);
    let since = deleted.take().unwrap_or_default();
    let pending = pending?;
    pending.scrub(&since)?;
    pending.install()
}

fn deleted_lock(state: &NodeState) -> std::sync::MutexGuard<'_, Option<Vec<u64>>> {
    state
        .snapshot_deleted
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Scrubs the entries of a batch's deletions from the snapshot (and notes them for one being
/// written); where that fails, removes the snapshot: a deleted person's shares must not stay
/// in it.
pub(crate) fn forget(state: &NodeState, serials: &[u64]) {
    let Some(path) = state.config.store.snapshot_path(&state.config.data_dir) else {
        return;
    };
    let mut deleted = deleted_lock(state);
    if let Some(d) = deleted.as_mut() {
        d.extend_from_slice(serials);
    }
    if !path.exists() {
        return;
    }
    if let Err(e) = snapshot::scrub(&path, serials) {
        tracing::warn!(error = %e, "share snapshot removed: a deletion could not be scrubbed from it");
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::error!(path = %path.display(), error = %e, "share snapshot holding deleted entries could not be removed");
        }
    }
}

//! A share snapshot: the share database in one local file, read at start-up instead of the
//! store. A remote store (PostgreSQL) hands its entries out row by row through its server, at
//! a fraction of the rate a local file reads at; the snapshot makes a restart read the file and
//! fetch from the store only the entries written since.
//!
//! The snapshot is a cache, the store stays the record. It is taken from the in-memory rows
//! while batches go on, a few rows under the read lock at a time, and stamped with the batch
//! the rows held when it began: every entry a later batch wrote is fetched from the store
//! ([`Store::shares_written_after`]), so rows copied after such a write are never trusted. It
//! is used only for the store it was taken from (the store's random identity), while that
//! store's batch log still holds the stamped batch with the same commit, and each entry carries
//! a check that a torn or damaged file fails. Anything else loads from the store as before.
//!
//! Layout, little-endian: a [`HEADER`]-byte header (magic, format, entry length, store
//! identity, batch, SHA-256 of the batch's commit, entry count, a check of these), then the
//! entries in ascending serial order, each its serial id, its stored bytes and a Fletcher sum
//! over both. The file holds share bytes exactly as the store does; it is created readable by
//! its owner only.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Write};
use std::ops::Deref;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ocelli_mpc::db::NewRows;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::{Store, StoreError};
use crate::ids::SerialId;
use crate::shares::{eye_parts, ShareDb, ENTRY_BYTES};

const MAGIC: [u8; 8] = *b"OCSHSNAP";
const FORMAT: u32 = 1;
/// Header bytes (the entries start at a page boundary).
pub const HEADER: usize = 4096;
/// Bytes of one entry's record: serial id, stored bytes, check.
pub const RECORD: usize = 8 + ENTRY_BYTES + 8;
/// Rows copied under one hold of the read lock.
const ROWS_PER_LOCK: usize = 64;
/// Read buffer of each loading thread.
const READ_BUFFER: usize = 32 << 20;
/// Entries between progress reports.
const PROGRESS_EVERY: u64 = 256;

/// Why a snapshot was not written or not used.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Reading or writing the file failed.
    #[error("share snapshot {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store does not track which batch wrote each entry (the redb store, itself a
    /// local file).
    #[error("this store keeps no share snapshot")]
    Unsupported,
    /// The file is not a snapshot this binary reads, or is damaged.
    #[error("share snapshot {path} is unusable: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: &'static str,
    },
    /// Writing was abandoned (the node is stopping).
    #[error("share snapshot {path}: abandoned")]
    Cancelled {
        /// The file.
        path: PathBuf,
    },
    /// The file is a good snapshot, of another store or another history.
    #[error("share snapshot {path} does not fit the store: {why}")]
    Stale {
        /// The file.
        path: PathBuf,
        /// Why it does not fit.
        why: &'static str,
    },
}

/// A written snapshot.
#[derive(Clone, Copy, Debug)]
pub struct Written {
    /// Entries in it.
    pub entries: u64,
    /// The batch it was stamped with.
    pub batch: u64,
    /// File size.
    pub bytes: u64,
    /// Time taken.
    pub seconds: f64,
}

/// Where a loaded database's entries came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    /// Entries read from the snapshot.
    pub from_snapshot: u64,
    /// Entries fetched from the store (written since the snapshot's batch).
    pub from_store: u64,
}

/// The file's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    identity: [u8; 16],
    batch: u64,
    commit: [u8; 32],
    entries: u64,
}

impl Header {
    fn encode(&self) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&FORMAT.to_le_bytes());
        h[12..16].copy_from_slice(&(ENTRY_BYTES as u32).to_le_bytes());
        h[16..32].copy_from_slice(&self.identity);
        h[32..40].copy_from_slice(&self.batch.to_le_bytes());
        h[40..72].copy_from_slice(&self.commit);
        h[72..80].copy_from_slice(&self.entries.to_le_bytes());
        let check = fletcher(0, &h[..80]);
        h[80..88].copy_from_slice(&check.to_le_bytes());
        h
    }

    fn decode(h: &[u8; HEADER]) -> Result<Header, &'static str> {
        let word = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
        if h[0..8] != MAGIC {
            return Err("not a share snapshot");
        }
        if h[8..12] != FORMAT.to_le_bytes() {
            return Err("another snapshot format");
        }
        if h[12..16] != (ENTRY_BYTES as u32).to_le_bytes() {
            return Err("another entry length");
        }
        if fletcher(0, &h[..80]) != word(80) {
            return Err("header check failed");
        }
        Ok(Header {
            identity: h[16..32].try_into().expect("16 bytes"),
            batch: word(32),
            commit: h[40..72].try_into().expect("32 bytes"),
            entries: word(72),
        })
    }
}

/// A Fletcher sum over the little-endian 64-bit words of `bytes` (zero-padded), seeded with
/// `seed`: catches a changed, zeroed or moved word. Against damage, not against an attacker
/// (who could as well write the store).
fn fletcher(seed: u64, bytes: &[u8]) -> u64 {
    let (mut a, mut b) = (seed, seed.rotate_left(32));
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        a = a.wrapping_add(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        b = b.wrapping_add(a);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        a = a.wrapping_add(u64::from_le_bytes(last));
        b = b.wrapping_add(a);
    }
    a ^ b.rotate_left(17)
}

fn commit_digest(store: &dyn Store, batch: u64) -> Result<Option<[u8; 32]>, StoreError> {
    if batch == 0 {
        return Ok(Some([0; 32]));
    }
    Ok(store
        .batch(batch)?
        .map(|b| Sha256::digest(&b.commit).into()))
}

/// Writes a snapshot of the rows `read` gives to `path` and installs it ([`write_pending`],
/// then [`Pending::install`]).
///
/// # Errors
/// As [`write_pending`] and [`Pending::install`].
pub fn write<G: Deref<Target = ShareDb>>(
    path: &Path,
    store: &dyn Store,
    read: impl Fn() -> G,
) -> Result<Written, SnapshotError> {
    write_pending(path, store, read, &|| false)?.install()
}

/// A snapshot written beside its path, not yet in place.
#[derive(Debug)]
pub struct Pending {
    tmp: PathBuf,
    path: PathBuf,
    written: Written,
}

impl Pending {
    /// Overwrites the entries of `serials` (removed since the snapshot began) in the pending
    /// file; see [`scrub`].
    ///
    /// # Errors
    /// The file fails.
    pub fn scrub(&self, serials: &[u64]) -> Result<usize, SnapshotError> {
        scrub(&self.tmp, serials)
    }

    /// Renames the file over the snapshot's path and syncs the directory.
    ///
    /// # Errors
    /// The rename or the sync fails.
    pub fn install(self) -> Result<Written, SnapshotError> {
        let io = |source| SnapshotError::Io {
            path: self.path.clone(),
            source,
        };
        std::fs::rename(&self.tmp, &self.path).map_err(io)?;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        }
        Ok(self.written)
    }
}

impl Drop for Pending {
    /// A pending file not installed is removed: it holds share bytes.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.tmp);
    }
}

/// Writes a snapshot of the rows `read` gives to a temporary file beside `path`, synced.
/// `read` takes the rows' read lock; it is held for a few rows (64) at a time, so
/// batches go on while the snapshot is taken. `cancelled` is asked between those; once it
/// answers true the file is removed and nothing is written.
///
/// # Errors
/// The store keeps no snapshot, the store or the file fails, or `cancelled`.
pub fn write_pending<G: Deref<Target = ShareDb>>(
    path: &Path,
    store: &dyn Store,
    read: impl Fn() -> G,
    cancelled: &dyn Fn() -> bool,
) -> Result<Pending, SnapshotError> {
    let start = Instant::now();
    let identity = store.identity()?.ok_or(SnapshotError::Unsupported)?;
    let io = |source| SnapshotError::Io {
        path: path.to_owned(),
        source,
    };
    // Removes the file on every way out but the end: it holds share bytes.
    let mut pending = Pending {
        tmp: path.with_extension("tmp"),
        path: path.to_owned(),
        written: Written {
            entries: 0,
            batch: 0,
            bytes: 0,
            seconds: 0.0,
        },
    };
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&pending.tmp)
        .map_err(io)?;
    let mut out = BufWriter::with_capacity(READ_BUFFER, file);
    out.write_all(&[0; HEADER]).map_err(io)?;
    let mut chunk = Zeroizing::new(vec![0u8; ROWS_PER_LOCK * RECORD]);
    let mut batch = None;
    let mut entries = 0u64;
    // The first serial id not yet written: rows move when others are inserted or removed.
    let mut from = 0u64;
    loop {
        if cancelled() {
            return Err(SnapshotError::Cancelled {
                path: path.to_owned(),
            });
        }
        let (rows, last) = {
            let db = read();
            batch.get_or_insert(db.applied_batch());
            let ids = db.rows().serial_ids();
            let first = ids.partition_point(|&s| s < from);
            let end = ids.len().min(first + ROWS_PER_LOCK);
            for (row, rec) in (first..end).zip(chunk.chunks_exact_mut(RECORD)) {
                rec[..8].copy_from_slice(&ids[row].to_le_bytes());
                db.entry_le_bytes(row, &mut rec[8..8 + ENTRY_BYTES]);
                let check = fletcher(ids[row], &rec[8..8 + ENTRY_BYTES]);
                rec[8 + ENTRY_BYTES..].copy_from_slice(&check.to_le_bytes());
            }
            (end - first, ids[first..end].last().copied())
        };
        out.write_all(&chunk[..rows * RECORD]).map_err(io)?;
        entries += rows as u64;
        match last.and_then(|s| s.checked_add(1)) {
            Some(next) if rows == ROWS_PER_LOCK => from = next,
            _ => break,
        }
    }
    let batch = batch.unwrap_or(0);
    let commit = commit_digest(store, batch)?.ok_or(SnapshotError::Stale {
        path: path.to_owned(),
        why: "the store's batch log lacks the batch the rows hold",
    })?;
    let header = Header {
        identity,
        batch,
        commit,
        entries,
    };
    let file = out.into_inner().map_err(|e| io(e.into_error()))?;
    file.write_all_at(&header.encode(), 0).map_err(io)?;
    file.sync_all().map_err(io)?;
    pending.written = Written {
        entries,
        batch,
        bytes: (HEADER + RECORD * entries as usize) as u64,
        seconds: start.elapsed().as_secs_f64(),
    };
    Ok(pending)
}

/// Overwrites with zeros the entries of `serials` in the snapshot at `path` (a deletion's
/// shares must not outlive it in a cache) and syncs it; returns how many it held. The records
/// stay well-formed: a load never takes them, since the store no longer holds those serial
/// ids, or holds them written after the snapshot's batch.
///
/// # Errors
/// The file is not a snapshot or fails; the caller removes it then.
pub fn scrub(path: &Path, serials: &[u64]) -> Result<usize, SnapshotError> {
    let io = |source| SnapshotError::Io {
        path: path.to_owned(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io)?;
    let mut h = [0u8; HEADER];
    file.read_exact_at(&mut h, 0).map_err(io)?;
    let header = Header::decode(&h).map_err(|why| SnapshotError::Invalid {
        path: path.to_owned(),
        why,
    })?;
    let snap = Snapshot {
        path: path.to_owned(),
        file,
        header,
    };
    let zeros = vec![0u8; ENTRY_BYTES];
    let mut scrubbed = 0;
    for &serial in serials {
        let at = snap.first_at_or_above(serial)?;
        if at == header.entries || snap.serial_at(at)? != serial {
            continue;
        }
        let offset = HEADER as u64 + at * RECORD as u64 + 8;
        snap.file.write_all_at(&zeros, offset).map_err(io)?;
        let check = fletcher(serial, &zeros).to_le_bytes();
        snap.file
            .write_all_at(&check, offset + ENTRY_BYTES as u64)
            .map_err(io)?;
        scrubbed += 1;
    }
    snap.file.sync_data().map_err(io)?;
    Ok(scrubbed)
}

/// A snapshot file checked against the store, ready to load.
#[derive(Debug)]
pub struct Snapshot {
    path: PathBuf,
    file: File,
    header: Header,
}

impl Snapshot {
    /// Opens the snapshot at `path` and checks that it fits `store`: the same store, whose
    /// batch log holds the snapshot's batch with the same commit. `None` where there is no
    /// file.
    ///
    /// # Errors
    /// [`SnapshotError::Invalid`] or [`SnapshotError::Stale`] with the reason,
    /// [`SnapshotError::Unsupported`] for a store that keeps none, or a failure reading.
    pub fn open(path: &Path, store: &dyn Store) -> Result<Option<Snapshot>, SnapshotError> {
        let io = |source| SnapshotError::Io {
            path: path.to_owned(),
            source,
        };
        let invalid = |why| SnapshotError::Invalid {
            path: path.to_owned(),
            why,
        };
        let stale = |why| SnapshotError::Stale {
            path: path.to_owned(),
            why,
        };
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        let identity = store.identity()?.ok_or(SnapshotError::Unsupported)?;
        let mut h = [0u8; HEADER];
        file.read_exact(&mut h)
            .map_err(|_| invalid("shorter than its header"))?;
        let header = Header::decode(&h).map_err(invalid)?;
        let len = file.metadata().map_err(io)?.len();
        let want = usize::try_from(header.entries)
            .ok()
            .and_then(|n| n.checked_mul(RECORD))
            .and_then(|n| n.checked_add(HEADER));
        if want.map(|n| n as u64) != Some(len) {
            return Err(invalid("its length does not match its entry count"));
        }
        if header.identity != identity {
            return Err(stale("taken from another store"));
        }
        if store.meta()?.last_applied_batch < header.batch {
            return Err(stale("the store is older than the snapshot"));
        }
        if commit_digest(store, header.batch)? != Some(header.commit) {
            return Err(stale(
                "the store's batch log differs at the snapshot's batch",
            ));
        }
        Ok(Some(Snapshot {
            path: path.to_owned(),
            file,
            header,
        }))
    }

    /// The batch the snapshot was stamped with.
    pub fn batch(&self) -> u64 {
        self.header.batch
    }

    /// Entries in the file.
    pub fn entries(&self) -> u64 {
        self.header.entries
    }

    fn invalid(&self, why: &'static str) -> SnapshotError {
        SnapshotError::Invalid {
            path: self.path.clone(),
            why,
        }
    }

    fn io(&self, source: std::io::Error) -> SnapshotError {
        SnapshotError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// The serial id of record `i`.
    fn serial_at(&self, i: u64) -> Result<u64, SnapshotError> {
        let mut w = [0u8; 8];
        self.file
            .read_exact_at(&mut w, HEADER as u64 + i * RECORD as u64)
            .map_err(|e| self.io(e))?;
        Ok(u64::from_le_bytes(w))
    }

    /// The index of the first record whose serial id is `serial` or above.
    fn first_at_or_above(&self, serial: u64) -> Result<u64, SnapshotError> {
        let (mut lo, mut hi) = (0, self.header.entries);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.serial_at(mid)? < serial {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// Loads the share database: the store's serial ids laid out first, each core's range
    /// filled from the file, except the entries a batch after the snapshot's wrote, which are
    /// fetched from the store.
    ///
    /// # Errors
    /// The file lacks an entry the store holds, an entry fails its check, the store or the
    /// file fails. The caller loads from the store then.
    pub fn load(
        &self,
        store: &dyn Store,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<(ShareDb, Loaded), SnapshotError> {
        let serials = store.share_serials()?.ok_or(SnapshotError::Unsupported)?;
        let changed = store
            .shares_written_after(self.header.batch)?
            .ok_or(SnapshotError::Unsupported)?;
        let from_store = serials
            .iter()
            .filter(|s| changed.binary_search(s).is_ok())
            .count() as u64;
        // Past that, fetching the entries one list at a time is slower than reading them all.
        if from_store * 4 > serials.len() as u64 {
            return Err(SnapshotError::Stale {
                path: self.path.clone(),
                why: "more than a quarter of the entries were written since it was taken",
            });
        }
        let loaded = AtomicU64::new(0);
        let db = super::load::in_parts(&serials, |part| {
            self.fill_part(store, part, &changed, &loaded, progress)
        })?;
        progress(serials.len() as u64);
        Ok((
            db,
            Loaded {
                from_snapshot: serials.len() as u64 - from_store,
                from_store,
            },
        ))
    }

    /// Fills `part`'s rows: from the file in one forward pass over its serial range, then the
    /// changed ones from the store.
    fn fill_part(
        &self,
        store: &dyn Store,
        mut part: NewRows<'_>,
        changed: &[u64],
        loaded: &AtomicU64,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<(), SnapshotError> {
        let ids = part.serial_ids();
        let Some(&first) = ids.first() else {
            return Ok(());
        };
        let mut at = self.first_at_or_above(first)?;
        ocelli_os::advise_sequential(&self.file);
        let mut reader = BufReader::with_capacity(
            READ_BUFFER,
            ReadAt {
                file: &self.file,
                offset: HEADER as u64 + at * RECORD as u64,
            },
        );
        let mut rec = Zeroizing::new(vec![0u8; RECORD]);
        // (row, serial id) of the entries written since, in serial order.
        let mut fetch = Vec::new();
        for (row, &serial) in ids.iter().enumerate() {
            if changed.binary_search(&serial).is_ok() {
                fetch.push((row, serial));
                continue;
            }
            // Records of entries removed since the snapshot are passed over.
            loop {
                if at == self.header.entries {
                    return Err(self.invalid("it lacks an entry the store holds"));
                }
                reader.read_exact(&mut rec).map_err(|e| self.io(e))?;
                at += 1;
                let s = u64::from_le_bytes(rec[..8].try_into().expect("8 bytes"));
                if s < serial {
                    continue;
                }
                if s > serial {
                    return Err(self.invalid("it lacks an entry the store holds"));
                }
                let entry = &rec[8..8 + ENTRY_BYTES];
                let check = u64::from_le_bytes(rec[8 + ENTRY_BYTES..].try_into().expect("8"));
                if fletcher(serial, entry) != check {
                    return Err(self.invalid("an entry fails its check"));
                }
                let [left, right] = eye_parts(entry);
                part.set_le_bytes(row, left, right);
                break;
            }
            if (row as u64 + 1).is_multiple_of(PROGRESS_EVERY) {
                progress(loaded.fetch_add(PROGRESS_EVERY, Ordering::Relaxed) + PROGRESS_EVERY);
            }
        }
        // The fetched entries come in serial order, as their rows lie.
        let serials: Vec<u64> = fetch.iter().map(|&(_, s)| s).collect();
        let mut rows = fetch.iter().copied();
        let mut fetched = 0;
        store.for_each_share_bytes_of(&serials, &mut |id: SerialId, entry| match rows.next() {
            Some((row, s)) if s == id.0 && entry.len() == ENTRY_BYTES => {
                let [left, right] = eye_parts(entry);
                part.set_le_bytes(row, left, right);
                fetched += 1;
                Ok(())
            }
            _ => Err(StoreError::Corrupt("shares")),
        })?;
        if fetched != fetch.len() {
            return Err(StoreError::Corrupt("shares").into());
        }
        Ok(())
    }
}

/// Reads a file from an offset of its own: the loading threads share one descriptor, whose
/// file position they must not share.
struct ReadAt<'a> {
    file: &'a File,
    offset: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }
}

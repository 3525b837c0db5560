//! The embedded redb implementation of [`Store`].

use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock};

use prost::Message;
use redb::{
    Database, Durability, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata,
    StorageError, TableDefinition, TransactionError, WriteTransaction,
};
use sha2::{Digest, Sha256};

use super::period::{decode_opened, encode_opened, StatsPeriod};
use super::{
    Attestation, BatchWrite, Meta, RequestRecord, RequestState, RequestSummary, ShareVisitor,
    ShareWrite, Store, StoreError, StoreSummary, StoredBatch,
};
use crate::ids::{RequestId, SerialId};
use crate::stats::OpenedHistograms;

const REQUESTS: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("requests");
const ENVELOPES: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("pending_envelopes");
const RESULTS: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("results");
const SHARES: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("shares");
const BATCHES: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("batches");
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");
/// This node's latest batch attestation, one row under [`LATEST`]; not part of the state the
/// three nodes share (kept out of the fingerprint).
const ATTESTATION: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("attestation");
const LATEST: &str = "latest";
/// Failed attempts per request id (see `Store::failed_attempts`); kept out of the fingerprint.
const FAILED_ATTEMPTS: TableDefinition<'_, &[u8], u32> = TableDefinition::new("failed_attempts");
/// This party's running statistics period, one row under [`LATEST`]; its count shares differ
/// between the nodes, so it is kept out of the fingerprint.
const STATS_PERIOD: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("stats_period");
/// Opened histograms by period, as JSON.
const OPENED: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("opened_histograms");

const CACHE_BYTES: usize = 64 << 20;

const LAST_APPLIED: &str = "last_applied_batch";
const NEXT_SERIAL: &str = "next_serial";

fn be<E: std::fmt::Display>(e: E) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// A redb database file `node.redb` in the data directory.
#[derive(Debug)]
pub struct RedbStore {
    /// `None` between closing a database an I/O error left unusable and opening it again.
    db: RwLock<Option<Database>>,
    path: PathBuf,
}

fn open_database(path: &Path) -> Result<Database, StoreError> {
    // Bounded page cache: the share database is held in memory by the node already.
    Database::builder()
        .set_cache_size(CACHE_BYTES)
        .create(path)
        .map_err(be)
}

impl RedbStore {
    /// Opens or creates the store in `dir`.
    ///
    /// # Errors
    /// The directory or database cannot be created or opened.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(be)?;
        let path = dir.join("node.redb");
        let db = open_database(&path)?;
        let txn = db.begin_write().map_err(be)?;
        {
            txn.open_table(REQUESTS).map_err(be)?;
            txn.open_table(ENVELOPES).map_err(be)?;
            txn.open_table(RESULTS).map_err(be)?;
            txn.open_table(SHARES).map_err(be)?;
            txn.open_table(BATCHES).map_err(be)?;
            txn.open_table(META).map_err(be)?;
            txn.open_table(ATTESTATION).map_err(be)?;
            txn.open_table(FAILED_ATTEMPTS).map_err(be)?;
            txn.open_table(STATS_PERIOD).map_err(be)?;
            txn.open_table(OPENED).map_err(be)?;
        }
        txn.commit().map_err(be)?;
        Ok(Self {
            db: RwLock::new(Some(db)),
            path,
        })
    }

    /// Begins a transaction with `begin`. After an I/O error (a full disk, say) redb refuses
    /// every transaction until the database is closed and opened again; that happens here, so
    /// a node whose disk filled up serves again once there is space, without a restart. What
    /// a failed commit wrote never counts: opening runs redb's recovery to the last commit.
    fn begin<T>(
        &self,
        begin: impl Fn(&Database) -> Result<T, TransactionError>,
    ) -> Result<T, StoreError> {
        let unusable = |r: &Result<T, TransactionError>| {
            matches!(r, Err(TransactionError::Storage(StorageError::PreviousIo)))
        };
        {
            let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(db) = db.as_ref() {
                let r = begin(db);
                if !unusable(&r) {
                    return r.map_err(be);
                }
            }
        }
        let mut db = self.db.write().unwrap_or_else(PoisonError::into_inner);
        // Another call may have opened it again meanwhile.
        if let Some(open) = db.as_ref() {
            let r = begin(open);
            if !unusable(&r) {
                return r.map_err(be);
            }
        }
        // Closed once its last transaction ends; until then opening it again fails, and the
        // next call tries again.
        *db = None;
        tracing::warn!(path = %self.path.display(), "opening the store again after an I/O error");
        let reopened = open_database(&self.path)?;
        let r = begin(&reopened).map_err(be);
        *db = Some(reopened);
        r
    }

    fn read(&self) -> Result<ReadTransaction, StoreError> {
        self.begin(|db| db.begin_read())
    }

    /// Every row but the shares, as stored (for copying the store elsewhere).
    ///
    /// # Errors
    /// Backend failure or corrupt record.
    pub fn raw_rows(&self) -> Result<super::postgres::RawRows, StoreError> {
        let txn = self.read()?;
        let mut out = super::postgres::RawRows::default();
        for (def, rows) in [
            (REQUESTS, &mut out.requests),
            (ENVELOPES, &mut out.envelopes),
            (RESULTS, &mut out.results),
        ] {
            let t = txn.open_table(def).map_err(be)?;
            for item in t.iter().map_err(be)? {
                let (k, v) = item.map_err(be)?;
                rows.push((k.value().to_vec(), v.value().to_vec()));
            }
        }
        let t = txn.open_table(BATCHES).map_err(be)?;
        for item in t.iter().map_err(be)? {
            let (k, _) = item.map_err(be)?;
            let b = self
                .batch(k.value())?
                .ok_or(StoreError::Corrupt("batches"))?;
            out.batches.push((k.value(), b));
        }
        let t = txn.open_table(META).map_err(be)?;
        for item in t.iter().map_err(be)? {
            let (k, v) = item.map_err(be)?;
            out.meta.push((k.value().to_owned(), v.value()));
        }
        out.attestation = self.attestation()?;
        out.stats_period = self.stats_period()?;
        let t = txn.open_table(OPENED).map_err(be)?;
        for item in t.iter().map_err(be)? {
            let (_, v) = item.map_err(be)?;
            out.opened.push(decode_opened(v.value())?);
        }
        Ok(out)
    }

    fn write(&self) -> Result<WriteTransaction, StoreError> {
        let mut txn = self.begin(|db| db.begin_write())?;
        txn.set_durability(Durability::Immediate).map_err(be)?;
        Ok(txn)
    }
}

fn encode_batch(commit: &[u8], digest: &[u8; 32]) -> Vec<u8> {
    let mut v = Vec::with_capacity(32 + commit.len());
    v.extend_from_slice(digest);
    v.extend_from_slice(commit);
    v
}

impl Store for RedbStore {
    fn insert_request(
        &self,
        id: &RequestId,
        record: &RequestRecord,
        envelope: &[u8],
    ) -> Result<bool, StoreError> {
        let txn = self.write()?;
        {
            let mut req = txn.open_table(REQUESTS).map_err(be)?;
            if req.get(&id.0[..]).map_err(be)?.is_some() {
                return Ok(false);
            }
            req.insert(&id.0[..], record.encode_to_vec().as_slice())
                .map_err(be)?;
            let mut env = txn.open_table(ENVELOPES).map_err(be)?;
            env.insert(&id.0[..], envelope).map_err(be)?;
        }
        txn.commit().map_err(be)?;
        Ok(true)
    }

    fn request(&self, id: &RequestId) -> Result<Option<RequestRecord>, StoreError> {
        let txn = self.read()?;
        let t = txn.open_table(REQUESTS).map_err(be)?;
        match t.get(&id.0[..]).map_err(be)? {
            None => Ok(None),
            Some(v) => RequestRecord::decode(v.value())
                .map(Some)
                .map_err(|_| StoreError::Corrupt("requests")),
        }
    }

    fn pending_requests(&self) -> Result<Vec<(RequestId, RequestRecord)>, StoreError> {
        let txn = self.read()?;
        let env = txn.open_table(ENVELOPES).map_err(be)?;
        let req = txn.open_table(REQUESTS).map_err(be)?;
        let mut out = Vec::new();
        for item in env.iter().map_err(be)? {
            let (k, _) = item.map_err(be)?;
            let id = RequestId::from_slice(k.value()).ok_or(StoreError::Corrupt("envelopes"))?;
            let rec = req
                .get(k.value())
                .map_err(be)?
                .ok_or(StoreError::Corrupt("requests"))?;
            let rec =
                RequestRecord::decode(rec.value()).map_err(|_| StoreError::Corrupt("requests"))?;
            if rec.state() == Some(RequestState::Pending) {
                out.push((id, rec));
            }
        }
        Ok(out)
    }

    fn envelope(&self, id: &RequestId) -> Result<Option<Vec<u8>>, StoreError> {
        let txn = self.read()?;
        let t = txn.open_table(ENVELOPES).map_err(be)?;
        Ok(t.get(&id.0[..]).map_err(be)?.map(|v| v.value().to_vec()))
    }

    fn apply_batch(&self, w: &BatchWrite) -> Result<(), StoreError> {
        let txn = self.write()?;
        {
            let mut req = txn.open_table(REQUESTS).map_err(be)?;
            let mut env = txn.open_table(ENVELOPES).map_err(be)?;
            let mut res = txn.open_table(RESULTS).map_err(be)?;
            let mut shares = txn.open_table(SHARES).map_err(be)?;
            let mut batches = txn.open_table(BATCHES).map_err(be)?;
            let mut meta = txn.open_table(META).map_err(be)?;
            for f in &w.finals {
                req.insert(&f.id.0[..], f.record.encode_to_vec().as_slice())
                    .map_err(be)?;
                env.remove(&f.id.0[..]).map_err(be)?;
                res.insert(&f.id.0[..], f.signed_result.as_slice())
                    .map_err(be)?;
            }
            for (serial, s) in &w.shares {
                match s {
                    ShareWrite::Put(sh) => {
                        shares.insert(serial.0, sh.as_bytes()).map_err(be)?;
                    }
                    ShareWrite::Delete => {
                        shares.remove(serial.0).map_err(be)?;
                    }
                }
            }
            if let Some((id, commit, digest)) = &w.batch {
                batches
                    .insert(*id, encode_batch(commit, digest).as_slice())
                    .map_err(be)?;
                meta.insert(LAST_APPLIED, *id).map_err(be)?;
            }
            meta.insert(NEXT_SERIAL, w.next_serial).map_err(be)?;
            if let Some(st) = &w.stats {
                let mut period = txn.open_table(STATS_PERIOD).map_err(be)?;
                period
                    .insert(LATEST, st.period.encode().as_slice())
                    .map_err(be)?;
                if let Some(h) = &st.opened {
                    let mut opened = txn.open_table(OPENED).map_err(be)?;
                    opened
                        .insert(h.period, encode_opened(h)?.as_slice())
                        .map_err(be)?;
                }
            }
        }
        txn.commit().map_err(be)
    }

    fn result(&self, id: &RequestId) -> Result<Option<Vec<u8>>, StoreError> {
        let txn = self.read()?;
        let t = txn.open_table(RESULTS).map_err(be)?;
        Ok(t.get(&id.0[..]).map_err(be)?.map(|v| v.value().to_vec()))
    }

    fn batch(&self, batch_id: u64) -> Result<Option<StoredBatch>, StoreError> {
        let txn = self.read()?;
        let t = txn.open_table(BATCHES).map_err(be)?;
        let Some(v) = t.get(batch_id).map_err(be)? else {
            return Ok(None);
        };
        let v = v.value();
        if v.len() < 32 {
            return Err(StoreError::Corrupt("batches"));
        }
        let (d, c) = v.split_at(32);
        let mut results_digest = [0u8; 32];
        results_digest.copy_from_slice(d);
        Ok(Some(StoredBatch {
            commit: c.to_vec(),
            results_digest,
        }))
    }

    fn meta(&self) -> Result<Meta, StoreError> {
        let txn = self.read()?;
        let t = txn.open_table(META).map_err(be)?;
        let get = |k: &str| -> Result<Option<u64>, StoreError> {
            Ok(t.get(k).map_err(be)?.map(|v| v.value()))
        };
        Ok(Meta {
            last_applied_batch: get(LAST_APPLIED)?.unwrap_or(0),
            next_serial: get(NEXT_SERIAL)?.unwrap_or(1),
        })
    }

    fn attestation(&self) -> Result<Option<Attestation>, StoreError> {
        let txn = self.read()?;
        let t = txn.open_table(ATTESTATION).map_err(be)?;
        t.get(LATEST)
            .map_err(be)?
            .map(|v| Attestation::decode(v.value()))
            .transpose()
    }

    fn record_attestation(&self, a: &Attestation) -> Result<(), StoreError> {
        let txn = self.write()?;
        {
            let mut t = txn.open_table(ATTESTATION).map_err(be)?;
            t.insert(LATEST, a.encode().as_slice()).map_err(be)?;
        }
        txn.commit().map_err(be)
    }

    fn stats_period(&self) -> Result<Option<StatsPeriod>, StoreError> {
        let txn = self.read()?;
        let t = txn.open_table(STATS_PERIOD).map_err(be)?;
        t.get(LATEST)
            .map_err(be)?
            .map(|v| StatsPeriod::decode_stored(v.value()))
            .transpose()
    }

    fn opened_histograms(
        &self,
        period: Option<u64>,
    ) -> Result<Option<OpenedHistograms>, StoreError> {
        let txn = self.read()?;
        let t = txn.open_table(OPENED).map_err(be)?;
        let v = match period {
            Some(p) => t.get(p).map_err(be)?,
            None => t.last().map_err(be)?.map(|(_, v)| v),
        };
        v.map(|v| decode_opened(v.value())).transpose()
    }

    fn failed_attempts(&self, id: &RequestId) -> Result<u32, StoreError> {
        let txn = self.read()?;
        let t = txn.open_table(FAILED_ATTEMPTS).map_err(be)?;
        Ok(t.get(&id.0[..]).map_err(be)?.map_or(0, |v| v.value()))
    }

    fn record_failed_attempt(&self, id: &RequestId) -> Result<u32, StoreError> {
        let txn = self.write()?;
        let n = {
            let mut t = txn.open_table(FAILED_ATTEMPTS).map_err(be)?;
            let n = t
                .get(&id.0[..])
                .map_err(be)?
                .map_or(0, |v| v.value())
                .saturating_add(1);
            t.insert(&id.0[..], n).map_err(be)?;
            n
        };
        txn.commit().map_err(be)?;
        Ok(n)
    }

    fn share_count(&self) -> Result<u64, StoreError> {
        let txn = self.read()?;
        let t = txn.open_table(SHARES).map_err(be)?;
        t.len().map_err(be)
    }

    fn for_each_share_bytes(&self, f: &mut ShareVisitor<'_>) -> Result<(), StoreError> {
        self.for_each_share_bytes_in(0..=u64::MAX, f)
    }

    /// The ids when they are one dense range (serial ids are handed out in order, so they
    /// are unless entries were removed): the first, the last and the count tell it without
    /// reading an entry. Read transactions are independent, so the ranges load in parallel.
    fn share_serials(&self) -> Result<Option<Vec<u64>>, StoreError> {
        let txn = self.read()?;
        let t = txn.open_table(SHARES).map_err(be)?;
        let len = t.len().map_err(be)?;
        let (Some(first), Some(last)) = (t.first().map_err(be)?, t.last().map_err(be)?) else {
            return Ok(Some(Vec::new()));
        };
        let (first, last) = (first.0.value(), last.0.value());
        Ok(
            (last.checked_sub(first) == Some(len.wrapping_sub(1)))
                .then(|| (first..=last).collect()),
        )
    }

    fn for_each_share_bytes_in(
        &self,
        serials: std::ops::RangeInclusive<u64>,
        f: &mut ShareVisitor<'_>,
    ) -> Result<(), StoreError> {
        let txn = self.read()?;
        let t = txn.open_table(SHARES).map_err(be)?;
        for item in t.range(serials).map_err(be)? {
            let (k, v) = item.map_err(be)?;
            f(SerialId(k.value()), v.value())?;
        }
        Ok(())
    }

    fn fingerprint(&self) -> Result<[u8; 32], StoreError> {
        let txn = self.read()?;
        let mut h = Sha256::new();
        let mut feed = |name: &str, k: &[u8], v: &[u8]| {
            h.update(name.as_bytes());
            h.update((k.len() as u64).to_le_bytes());
            h.update(k);
            h.update((v.len() as u64).to_le_bytes());
            h.update(v);
        };
        for (def, name) in [
            (REQUESTS, "requests"),
            (ENVELOPES, "envelopes"),
            (RESULTS, "results"),
        ] {
            let t = txn.open_table(def).map_err(be)?;
            for item in t.iter().map_err(be)? {
                let (k, v) = item.map_err(be)?;
                feed(name, k.value(), v.value());
            }
        }
        for (def, name) in [(SHARES, "shares"), (BATCHES, "batches")] {
            let t = txn.open_table(def).map_err(be)?;
            for item in t.iter().map_err(be)? {
                let (k, v) = item.map_err(be)?;
                feed(name, &k.value().to_le_bytes(), v.value());
            }
        }
        let t = txn.open_table(META).map_err(be)?;
        for item in t.iter().map_err(be)? {
            let (k, v) = item.map_err(be)?;
            feed("meta", k.value().as_bytes(), &v.value().to_le_bytes());
        }
        Ok(h.finalize().into())
    }

    fn summary(&self) -> Result<StoreSummary, StoreError> {
        use shared_proto::v1::SignedResult;
        let txn = self.read()?;
        let req = txn.open_table(REQUESTS).map_err(be)?;
        let res = txn.open_table(RESULTS).map_err(be)?;
        let mut s = StoreSummary::default();
        for item in req.iter().map_err(be)? {
            let (k, v) = item.map_err(be)?;
            let id = RequestId::from_slice(k.value()).ok_or(StoreError::Corrupt("requests"))?;
            let rec =
                RequestRecord::decode(v.value()).map_err(|_| StoreError::Corrupt("requests"))?;
            let result = match res.get(k.value()).map_err(be)? {
                None => None,
                Some(r) => Some(
                    SignedResult::decode(r.value())
                        .map_err(|_| StoreError::Corrupt("results"))?
                        .result,
                ),
            };
            s.requests.insert(
                id.0,
                RequestSummary {
                    digest: rec.digest,
                    state: rec.state,
                    result,
                },
            );
        }
        let shares = txn.open_table(SHARES).map_err(be)?;
        for item in shares.iter().map_err(be)? {
            let (k, _) = item.map_err(be)?;
            s.serials.push(k.value());
        }
        drop(txn);
        let m = self.meta()?;
        s.last_applied_batch = m.last_applied_batch;
        s.next_serial = m.next_serial;
        Ok(s)
    }

    fn size_bytes(&self) -> u64 {
        std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shares::StoredShares;
    use crate::store::FinalWrite;

    fn rec(state: RequestState) -> RequestRecord {
        RequestRecord {
            state: state as u32,
            digest: vec![7; 32],
            received_ms: 1,
            request_type: 1,
            serial_id: 0,
            or_policy: false,
            batch_id: 0,
            submitter: Vec::new(),
            or_serial_ids: Vec::new(),
        }
    }

    #[test]
    fn insert_is_replay_protected_and_batches_apply() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let store = RedbStore::open(dir.path())?;
        let id = RequestId([1; 16]);
        assert!(store.insert_request(&id, &rec(RequestState::Pending), b"env")?);
        let fp = store.fingerprint()?;
        assert!(!store.insert_request(&id, &rec(RequestState::Pending), b"other")?);
        assert_eq!(fp, store.fingerprint()?);
        assert_eq!(store.pending_requests()?.len(), 1);
        let shares = StoredShares::try_from(&vec![3u8; crate::shares::ENTRY_BYTES][..])?;
        store.apply_batch(&BatchWrite {
            batch: Some((1, b"commit".to_vec(), [9; 32])),
            finals: vec![FinalWrite {
                id,
                record: rec(RequestState::Final),
                signed_result: Vec::new(),
            }],
            shares: vec![(SerialId(1), ShareWrite::Put(shares))],
            next_serial: 2,
            stats: None,
        })?;
        assert!(store.pending_requests()?.is_empty());
        assert_eq!(store.envelope(&id)?, None);
        assert_eq!(
            store.meta()?,
            Meta {
                last_applied_batch: 1,
                next_serial: 2
            }
        );
        assert_eq!(store.share_count()?, 1);
        drop(store);
        let store = RedbStore::open(dir.path())?;
        assert_eq!(store.batch(1)?.map(|b| b.results_digest), Some([9; 32]));
        assert!(!store.insert_request(&id, &rec(RequestState::Pending), b"env")?);
        Ok(())
    }
}

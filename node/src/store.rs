//! Durable state behind one trait: enrolled shares by serial id, the request
//! log (replay protection), pending envelopes, signed results and the batch
//! log. [`redb::RedbStore`] is the embedded implementation (the default);
//! [`postgres::PgStore`] keeps the same tables in PostgreSQL.
//!
//! Every write is one ACID transaction committed with immediate durability,
//! so anything acknowledged to a client or a peer survives a crash.

pub mod load;
pub mod migrate;
pub mod period;
pub mod postgres;
pub mod redb;
pub mod snapshot;
#[cfg(feature = "test-support")]
pub mod synthetic;

use std::collections::BTreeMap;

use sdk_orb::RequestType;

use crate::ids::{RequestId, SerialId};

/// Storage failures (never contain share bytes).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend failed.
    #[error("storage backend: {0}")]
    Backend(String),
    /// A stored record does not decode.
    #[error("corrupt record in {0}")]
    Corrupt(&'static str),
    /// The database was migrated by a newer binary; refusing to touch it.
    #[error(
        "store schema version {found} is newer than this binary knows ({known}): upgrade the node"
    )]
    SchemaTooNew {
        /// The database's version.
        found: i64,
        /// The newest this binary knows.
        known: i64,
    },
    /// The blocking task that made a store call did not finish (it panicked, or the
    /// runtime is stopping).
    #[error("store call did not finish: {0}")]
    Unfinished(String),
    /// The PostgreSQL store was opened outside a tokio runtime (its connections run on one).
    #[error("the PostgreSQL store needs a tokio runtime to run its connections on")]
    NoRuntime,
    /// TLS to the PostgreSQL server cannot be set up.
    #[error(transparent)]
    Tls(#[from] postgres::PgTlsError),
}

/// Where a request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum RequestState {
    /// Validated and queued; its envelope is stored.
    Pending = 1,
    /// Answered: a signed result is stored, the envelope is gone.
    Final = 2,
}

/// One entry of the request log (kept forever: replay protection).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RequestRecord {
    /// [`RequestState`] as u32.
    #[prost(uint32, tag = "1")]
    pub state: u32,
    /// Envelope digest.
    #[prost(bytes = "vec", tag = "2")]
    pub digest: Vec<u8>,
    /// When this node received it, ms since the epoch (local; not compared across nodes).
    #[prost(uint64, tag = "3")]
    pub received_ms: u64,
    /// `ocelli.v1.RequestType` as i32.
    #[prost(int32, tag = "4")]
    pub request_type: i32,
    /// Target serial id (deletion, reauth, reset).
    #[prost(uint64, tag = "5")]
    pub serial_id: u64,
    /// OR policy over the eyes.
    #[prost(bool, tag = "6")]
    pub or_policy: bool,
    /// The batch that answered it (0: none).
    #[prost(uint64, tag = "7")]
    pub batch_id: u64,
    /// SHA-256 of the certificate of the gateway that submitted it to this node: only that
    /// gateway (or a results consumer) reads its result here.
    #[prost(bytes = "vec", tag = "8")]
    pub submitter: Vec<u8>,
    /// Serial ids the request is compared with under the OR rule (uniqueness requests).
    #[prost(uint64, repeated, tag = "9")]
    pub or_serial_ids: Vec<u64>,
}

impl RequestRecord {
    /// How a request type is stored: its `ocelli.v1.RequestType` value, which the SDK's
    /// discriminants equal.
    pub fn encode_request_type(t: RequestType) -> i32 {
        i32::from(t as u8)
    }

    /// The request type, if the stored value is known.
    pub fn request_type(&self) -> Option<RequestType> {
        u64::try_from(self.request_type)
            .ok()
            .and_then(RequestType::from_wire)
    }

    /// The state, if the stored value is known.
    pub fn state(&self) -> Option<RequestState> {
        match self.state {
            1 => Some(RequestState::Pending),
            2 => Some(RequestState::Final),
            _ => None,
        }
    }
}

/// Counters kept in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// The last batch applied (0: none).
    pub last_applied_batch: u64,
    /// The serial id the next enrolment gets (from 1).
    pub next_serial: u64,
}

/// This node's latest batch attestation: the one outcome digest it signed for an attempt at a
/// batch (see `agreement::attest`). Recorded durably before the signature leaves the node; a
/// node applies a batch only with the digest it records here, and attests no older attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attestation {
    /// The batch.
    pub batch_id: u64,
    /// The attempt at it (from 1).
    pub attempt: u32,
    /// The batch digest signed.
    pub digest: [u8; 32],
}

impl Attestation {
    /// Stored form: batch id and attempt big-endian, then the digest.
    pub const ENCODED_LEN: usize = 8 + 4 + 32;

    /// The stored form.
    pub fn encode(&self) -> [u8; Self::ENCODED_LEN] {
        let mut out = [0u8; Self::ENCODED_LEN];
        out[..8].copy_from_slice(&self.batch_id.to_be_bytes());
        out[8..12].copy_from_slice(&self.attempt.to_be_bytes());
        out[12..].copy_from_slice(&self.digest);
        out
    }

    /// Parses the stored form.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for a record of the wrong length.
    pub fn decode(b: &[u8]) -> Result<Self, StoreError> {
        if b.len() != Self::ENCODED_LEN {
            return Err(StoreError::Corrupt("attestation"));
        }
        let (mut batch_id, mut attempt, mut digest) = ([0u8; 8], [0u8; 4], [0u8; 32]);
        batch_id.copy_from_slice(&b[..8]);
        attempt.copy_from_slice(&b[8..12]);
        digest.copy_from_slice(&b[12..]);
        Ok(Self {
            batch_id: u64::from_be_bytes(batch_id),
            attempt: u32::from_be_bytes(attempt),
            digest,
        })
    }
}

/// A change to the enrolled shares.
#[derive(Debug)]
pub enum ShareWrite {
    /// Store (or replace) the shares of a serial id.
    Put(crate::shares::StoredShares),
    /// Remove the shares of a serial id.
    Delete,
}

/// A request answered by a batch.
#[derive(Debug)]
pub struct FinalWrite {
    /// The request.
    pub id: RequestId,
    /// Its updated log entry (state final).
    pub record: RequestRecord,
    /// Encoded `SignedResult`.
    pub signed_result: Vec<u8>,
}

/// Everything one batch changes, written in one transaction.
#[derive(Debug, Default)]
pub struct BatchWrite {
    /// The batch log entry: (batch id, encoded `BatchCommit`, results digest).
    /// `None` for a node-local timeout sweep.
    pub batch: Option<(u64, Vec<u8>, [u8; 32])>,
    /// Answered requests.
    pub finals: Vec<FinalWrite>,
    /// Share changes.
    pub shares: Vec<(SerialId, ShareWrite)>,
    /// New `next_serial`.
    pub next_serial: u64,
    /// The statistics period after the batch (`None`: statistics off, nothing changes).
    pub stats: Option<period::StatsWrite>,
}

/// A batch log entry.
#[derive(Clone, Debug)]
pub struct StoredBatch {
    /// Encoded `BatchCommit`.
    pub commit: Vec<u8>,
    /// SHA-256 over the batch's encoded results.
    pub results_digest: [u8; 32],
}

/// One request in a [`StoreSummary`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestSummary {
    /// Envelope digest.
    pub digest: Vec<u8>,
    /// [`RequestState`] as u32.
    pub state: u32,
    /// Encoded `NodeResult` (without the node's signature), if final.
    pub result: Option<Vec<u8>>,
}

/// What must be identical on all three nodes (for tests and audits): per
/// request the digest, state and result (without the node's signature), plus
/// the enrolled serial ids and counters.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct StoreSummary {
    /// By request id.
    pub requests: BTreeMap<[u8; 16], RequestSummary>,
    /// Enrolled serial ids.
    pub serials: Vec<u64>,
    /// Counters.
    pub last_applied_batch: u64,
    /// Counters.
    pub next_serial: u64,
}

/// What [`Store::for_each_share_bytes`] calls with each entry: its serial id and stored bytes,
/// borrowed from the backend's buffer.
pub type ShareVisitor<'a> = dyn FnMut(SerialId, &[u8]) -> Result<(), StoreError> + 'a;

/// The node's durable state.
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// Logs a new pending request with its envelope. Returns `false` (and
    /// writes nothing) if the request id was seen before.
    ///
    /// # Errors
    /// Backend failure.
    fn insert_request(
        &self,
        id: &RequestId,
        record: &RequestRecord,
        envelope: &[u8],
    ) -> Result<bool, StoreError>;

    /// The log entry of a request.
    ///
    /// # Errors
    /// Backend failure or corrupt record.
    fn request(&self, id: &RequestId) -> Result<Option<RequestRecord>, StoreError>;

    /// All pending requests, for requeueing at start.
    ///
    /// # Errors
    /// Backend failure or corrupt record.
    fn pending_requests(&self) -> Result<Vec<(RequestId, RequestRecord)>, StoreError>;

    /// The stored envelope of a pending request.
    ///
    /// # Errors
    /// Backend failure.
    fn envelope(&self, id: &RequestId) -> Result<Option<Vec<u8>>, StoreError>;

    /// Applies a batch atomically.
    ///
    /// # Errors
    /// Backend failure (nothing is written then).
    fn apply_batch(&self, write: &BatchWrite) -> Result<(), StoreError>;

    /// The encoded `SignedResult` of a final request.
    ///
    /// # Errors
    /// Backend failure.
    fn result(&self, id: &RequestId) -> Result<Option<Vec<u8>>, StoreError>;

    /// A batch log entry.
    ///
    /// # Errors
    /// Backend failure or corrupt record.
    fn batch(&self, batch_id: u64) -> Result<Option<StoredBatch>, StoreError>;

    /// The counters.
    ///
    /// # Errors
    /// Backend failure.
    fn meta(&self) -> Result<Meta, StoreError>;

    /// This node's latest batch attestation, if it made one.
    ///
    /// # Errors
    /// Backend failure or a corrupt record.
    fn attestation(&self) -> Result<Option<Attestation>, StoreError>;

    /// Durably records `a` as this node's latest batch attestation, replacing the previous.
    ///
    /// # Errors
    /// Backend failure (nothing is recorded then).
    fn record_attestation(&self, a: &Attestation) -> Result<(), StoreError>;

    /// This party's running statistics period, if one began.
    ///
    /// # Errors
    /// Backend failure or a corrupt record.
    fn stats_period(&self) -> Result<Option<period::StatsPeriod>, StoreError>;

    /// The histograms period `period` opened, or the latest opened where `period` is `None`.
    ///
    /// # Errors
    /// Backend failure or a corrupt record.
    fn opened_histograms(
        &self,
        period: Option<u64>,
    ) -> Result<Option<crate::stats::OpenedHistograms>, StoreError>;

    /// How many attempts at evaluating request `id` alone failed deterministically (0: none);
    /// not part of the state the three nodes share.
    ///
    /// # Errors
    /// Backend failure or a corrupt record.
    fn failed_attempts(&self, id: &RequestId) -> Result<u32, StoreError>;

    /// Durably counts one more failed attempt at request `id` and returns the new count.
    ///
    /// # Errors
    /// Backend failure (nothing is counted then).
    fn record_failed_attempt(&self, id: &RequestId) -> Result<u32, StoreError>;

    /// Number of enrolled entries.
    ///
    /// # Errors
    /// Backend failure.
    fn share_count(&self) -> Result<u64, StoreError>;

    /// Calls `f` for every enrolled entry in serial id order, with its stored bytes borrowed
    /// from the backend's buffer (the start-up load decodes them in place: no copy of an entry
    /// of ours to zeroize); stops at the first error `f` returns.
    ///
    /// # Errors
    /// Backend failure, or the error `f` returned.
    fn for_each_share_bytes(&self, f: &mut ShareVisitor<'_>) -> Result<(), StoreError>;

    /// The enrolled serial ids in order, where the backend knows them without reading the
    /// shares (an index scan, or a table whose ids are one dense range); `None` where reading
    /// them costs as much as the shares. With them the start-up load reads the shares in
    /// serial ranges on several threads (and connections) at once
    /// ([`Store::for_each_share_bytes_in`]).
    ///
    /// # Errors
    /// Backend failure or a corrupt serial id.
    fn share_serials(&self) -> Result<Option<Vec<u64>>, StoreError> {
        Ok(None)
    }

    /// [`Store::for_each_share_bytes`] over the serial ids in `serials` only. Safe to call
    /// from several threads at once, each with its own range.
    ///
    /// # Errors
    /// Backend failure, or the error `f` returned.
    fn for_each_share_bytes_in(
        &self,
        serials: std::ops::RangeInclusive<u64>,
        f: &mut ShareVisitor<'_>,
    ) -> Result<(), StoreError>;

    /// [`Store::for_each_share_bytes`] over those of `serials` (ascending) that are enrolled.
    /// Safe to call from several threads at once.
    ///
    /// # Errors
    /// Backend failure, or the error `f` returned.
    fn for_each_share_bytes_of(
        &self,
        serials: &[u64],
        f: &mut ShareVisitor<'_>,
    ) -> Result<(), StoreError> {
        serials
            .iter()
            .try_for_each(|&s| self.for_each_share_bytes_in(s..=s, f))
    }

    /// A random token naming this store, drawn when it was created (a copy into another
    /// store gets its own); `None` where the backend does not track which batch wrote each
    /// entry ([`Store::shares_written_after`]), so no share snapshot can be checked against it.
    ///
    /// # Errors
    /// Backend failure or a corrupt record.
    fn identity(&self) -> Result<Option<[u8; 16]>, StoreError> {
        Ok(None)
    }

    /// The enrolled serial ids, ascending, whose entries a batch after `batch` wrote (a write
    /// outside a batch counts as the next batch's); `None` where the backend does not track
    /// it. A start-up load takes every other entry from a share snapshot taken at `batch`
    /// ([`crate::store::snapshot`]).
    ///
    /// # Errors
    /// Backend failure or a corrupt serial id.
    fn shares_written_after(&self, batch: u64) -> Result<Option<Vec<u64>>, StoreError> {
        let _ = batch;
        Ok(None)
    }

    /// Calls `f` for every enrolled entry in serial id order.
    ///
    /// # Errors
    /// Backend failure or corrupt entry.
    fn for_each_share(
        &self,
        f: &mut dyn FnMut(SerialId, crate::shares::StoredShares),
    ) -> Result<(), StoreError> {
        self.for_each_share_bytes(&mut |id, b| {
            let s = crate::shares::StoredShares::try_from(b)
                .map_err(|_| StoreError::Corrupt("shares"))?;
            f(id, s);
            Ok(())
        })
    }

    /// SHA-256 over every table's contents: equal iff the stored state is equal.
    ///
    /// # Errors
    /// Backend failure.
    fn fingerprint(&self) -> Result<[u8; 32], StoreError>;

    /// The cross-node comparable view.
    ///
    /// # Errors
    /// Backend failure or corrupt record.
    fn summary(&self) -> Result<StoreSummary, StoreError>;

    /// Approximate on-disk size in bytes.
    fn size_bytes(&self) -> u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stored value of each request type is its protobuf enum value, by name.
    #[test]
    fn request_types_are_stored_as_their_proto_values() {
        use shared_proto::v1::RequestType as Proto;
        for (t, name) in [
            (RequestType::Uniqueness, "REQUEST_TYPE_UNIQUENESS"),
            (
                RequestType::UniquenessCheck,
                "REQUEST_TYPE_UNIQUENESS_CHECK",
            ),
            (RequestType::Deletion, "REQUEST_TYPE_DELETION"),
            (RequestType::Reauth, "REQUEST_TYPE_REAUTH"),
            (RequestType::Reset, "REQUEST_TYPE_RESET"),
        ] {
            let stored = RequestRecord::encode_request_type(t);
            let proto = Proto::try_from(stored).expect("a proto value");
            assert_eq!(proto.as_str_name(), name);
            let record = RequestRecord {
                request_type: stored,
                ..RequestRecord::default()
            };
            assert_eq!(record.request_type(), Some(t));
        }
        let unknown = RequestRecord {
            request_type: 0,
            ..RequestRecord::default()
        };
        assert_eq!(unknown.request_type(), None);
    }
}

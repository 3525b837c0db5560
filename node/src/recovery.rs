//! Node recovery (`ocelli-node recover`): a node that lost its store gets its shares back from
//! the other two (docs/protocol.md, "Node recovery"; the arithmetic is
//! [`ocelli_mpc::recovery`]).
//!
//! The recovering node sends both helpers the same fresh nonce over the mutual-TLS peer links.
//! Each helper checks who asks by its pinned certificate and serves only a party its operator
//! allowed ([`allowance`]), once per nonce. The lower helper draws the session's pad secret and
//! hands it to the higher one (`server::recovery::accept_pad`); each then snapshots its enrolled
//! entries and counters (no batch applies meanwhile) and streams, per entry in serial order, its
//! masked Lagrange term towards the caller's evaluation point. The caller checks that the two
//! helpers describe the same state (counters, last batch log entry, serial ids, sizes) and adds
//! the two streams into its shares, then writes shares, counters and the last batch log entry.
//! Pending requests, the request log and old results are not restored: the other two nodes keep
//! refusing replays, and requests held only by them time out.

pub mod allowance;
pub(crate) mod sessions;

use std::sync::Arc;
use std::time::Instant;

use ocelli_mpc::recovery::{combine_person, PadSecretLengthError, PERSON_COEFS};
use rand_core::{OsRng, RngCore};
use sdk_orb::PartyId;
use shared_proto::v1::{BatchCommit, RecoverChunk, RecoverRequest};
use zeroize::Zeroizing;

pub use allowance::{allow_recovery, Allowance, AllowanceError};

use crate::config::NodeConfig;
use crate::ids::SerialId;
use crate::shares::StoredShares;
use crate::store::{BatchWrite, ShareWrite, StoreError};

/// Why a recovery failed. Messages carry no share bytes.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    /// The node's store still holds data: recovery only fills an empty store.
    #[error("the store is not empty ({shares} enrolled entries, last batch {last_batch}); recovery only fills an empty store")]
    NotEmpty {
        /// Entries held.
        shares: u64,
        /// Last applied batch.
        last_batch: u64,
    },
    /// The store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// This node's operator does not allow the caller to recover now, or the allowance file
    /// cannot be read or written.
    #[error(transparent)]
    Allowance(#[from] AllowanceError),
    /// The nonce was served before: every recovery draws a fresh one.
    #[error("this recovery nonce was served already; a recovery draws a fresh nonce")]
    NonceReused,
    /// The higher helper got no pad secret from the lower one in time.
    #[error("{party} offered no recovery pad within {seconds} s (is it serving, and does its operator allow this recovery?)")]
    NoPad {
        /// The lower helper.
        party: PartyId,
        /// How long this node waited.
        seconds: u64,
    },
    /// A pad offer from a party that is not the recovering party's lower helper, or to a node
    /// that is not its higher helper.
    #[error("a recovery pad is offered by the lower helper to the higher one only")]
    NotLowHelper,
    /// A pad offer whose secret has the wrong length.
    #[error(transparent)]
    PadSecret(#[from] PadSecretLengthError),
    /// A second pad offer for a session whose first one waits.
    #[error("a recovery pad for this session was offered already")]
    PadOfferedTwice,
    /// The higher helper refused the session's pad secret.
    #[error("{party} refused this session's recovery pad: {message}")]
    PadRefused {
        /// The higher helper.
        party: PartyId,
        /// Its status code.
        code: tonic::Code,
        /// Its status message.
        message: String,
    },
    /// Too many pad offers wait for their sessions.
    #[error("too many recovery pads are waiting for their sessions; retry in a minute")]
    TooManyPadOffers,
    /// TLS files.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// Peer clients.
    #[error(transparent)]
    Peers(#[from] crate::links::PeersError),
    /// A helper refused or failed.
    #[error("{party}: {message}")]
    Peer {
        /// The helper.
        party: PartyId,
        /// Its status code.
        code: tonic::Code,
        /// Its status message.
        message: String,
    },
    /// The helpers describe different states (a batch ran in between, or one misbehaves).
    #[error("the helpers disagree on {0}; retry when no batch runs")]
    Disagree(&'static str),
    /// A helper's stream is malformed.
    #[error("{party} sent a malformed recovery stream: {what}")]
    Malformed {
        /// The helper.
        party: PartyId,
        /// What is wrong.
        what: &'static str,
    },
    /// The nonce is not 32 bytes.
    #[error("the recovery nonce must be 32 bytes")]
    Nonce,
    /// The caller is this node itself.
    #[error("a node cannot recover from itself")]
    SelfRecovery,
    /// A blocking task failed.
    #[error("recovery task failed: {0}")]
    Task(String),
}

/// What a recovery restored.
#[derive(Clone, Debug)]
pub struct RecoverReport {
    /// Enrolled entries restored.
    pub entries: usize,
    /// The last applied batch restored.
    pub last_applied_batch: u64,
    /// The next serial id restored.
    pub next_serial: u64,
    /// Bytes received from each helper.
    pub bytes_per_helper: usize,
    /// Wall time, seconds.
    pub seconds: f64,
}

/// Entries the recovering node combines and writes per store transaction (about 77 MB).
const WRITE_ENTRIES: usize = 1024;

/// One helper's stream as the recovering node reads it: the state the first chunk announces,
/// and the entries received but not yet combined.
struct Incoming {
    party: PartyId,
    stream: tonic::Streaming<RecoverChunk>,
    last_applied_batch: u64,
    next_serial: u64,
    total: u64,
    last_commit: Vec<u8>,
    last_digest: Vec<u8>,
    serial_ids: std::collections::VecDeque<u64>,
    contributions: Zeroizing<Vec<u8>>,
    received: u64,
    last_serial: Option<u64>,
}

impl Incoming {
    /// Asks `party` for its contributions and reads the first chunk.
    async fn open(
        peers: &crate::links::Peers,
        party: PartyId,
        nonce: [u8; 32],
    ) -> Result<Incoming, RecoveryError> {
        let mut client = peers
            .client(party)
            .ok_or(RecoveryError::Peer {
                party,
                code: tonic::Code::NotFound,
                message: "not configured".into(),
            })?
            .clone();
        let stream = client
            .recover_shares(RecoverRequest {
                nonce: nonce.to_vec(),
            })
            .await
            .map_err(|s| peer_error(party, &s))?
            .into_inner();
        let mut incoming = Incoming {
            party,
            stream,
            last_applied_batch: 0,
            next_serial: 0,
            total: 0,
            last_commit: Vec::new(),
            last_digest: Vec::new(),
            serial_ids: Default::default(),
            contributions: Zeroizing::new(Vec::new()),
            received: 0,
            last_serial: None,
        };
        let first = incoming
            .stream
            .message()
            .await
            .map_err(|s| peer_error(party, &s))?
            .ok_or(RecoveryError::Malformed {
                party,
                what: "empty stream",
            })?;
        incoming.last_applied_batch = first.last_applied_batch;
        incoming.next_serial = first.next_serial_id;
        incoming.total = first.total_entries;
        incoming.last_commit = first.last_batch_commit.clone();
        incoming.last_digest = first.last_batch_results_digest.clone();
        incoming.push(first)?;
        Ok(incoming)
    }

    fn malformed(&self, what: &'static str) -> RecoveryError {
        RecoveryError::Malformed {
            party: self.party,
            what,
        }
    }

    /// Checks a chunk against the announced state and buffers its entries.
    fn push(&mut self, chunk: RecoverChunk) -> Result<(), RecoveryError> {
        if chunk.contributions.len() != chunk.serial_ids.len() * PERSON_COEFS * 2 {
            return Err(self.malformed("contribution size"));
        }
        if (
            chunk.last_applied_batch,
            chunk.next_serial_id,
            chunk.total_entries,
        ) != (self.last_applied_batch, self.next_serial, self.total)
        {
            return Err(self.malformed("state changed between chunks"));
        }
        for &id in &chunk.serial_ids {
            if self.last_serial.is_some_and(|last| id <= last) {
                return Err(self.malformed("serial ids"));
            }
            self.last_serial = Some(id);
        }
        self.received += chunk.serial_ids.len() as u64;
        if self.received > self.total {
            return Err(self.malformed("more entries than announced"));
        }
        self.serial_ids.extend(&chunk.serial_ids);
        self.contributions.extend_from_slice(&chunk.contributions);
        let mut c = chunk.contributions;
        zeroize::Zeroize::zeroize(&mut c);
        Ok(())
    }

    /// Reads chunks until `n` entries are buffered; fails if the stream ends first.
    async fn fill(&mut self, n: usize) -> Result<(), RecoveryError> {
        while self.serial_ids.len() < n {
            match self
                .stream
                .message()
                .await
                .map_err(|s| peer_error(self.party, &s))?
            {
                Some(chunk) => self.push(chunk)?,
                None => return Err(self.malformed("fewer entries than announced")),
            }
        }
        Ok(())
    }

    /// Takes the first `n` buffered entries: their serial ids and contributions as words.
    fn take(&mut self, n: usize) -> (Vec<u64>, Zeroizing<Vec<u16>>) {
        let ids = self.serial_ids.drain(..n).collect();
        let bytes = n * PERSON_COEFS * 2;
        let taken = words(&self.contributions[..bytes]);
        self.contributions[..bytes].fill(0);
        self.contributions.drain(..bytes);
        (ids, taken)
    }

    /// Checks that the stream has nothing after the announced entries.
    async fn finish(&mut self) -> Result<(), RecoveryError> {
        let more = self
            .stream
            .message()
            .await
            .map_err(|s| peer_error(self.party, &s))?;
        if more.is_some() || !self.serial_ids.is_empty() || self.received != self.total {
            return Err(self.malformed("entries after the announced ones"));
        }
        Ok(())
    }
}

fn peer_error(party: PartyId, status: &tonic::Status) -> RecoveryError {
    RecoveryError::Peer {
        party,
        code: status.code(),
        message: status.message().to_owned(),
    }
}

/// A batch log entry without its attestations: each node keeps the signatures it received,
/// so the entries differ there while the batch itself is the same.
fn unsigned(commit: &[u8]) -> Result<Option<BatchCommit>, RecoveryError> {
    if commit.is_empty() {
        return Ok(None);
    }
    let mut c = <BatchCommit as prost::Message>::decode(commit)
        .map_err(|_| RecoveryError::Disagree("the last batch (undecodable)"))?;
    c.signatures.clear();
    Ok(Some(c))
}

fn words(bytes: &[u8]) -> Zeroizing<Vec<u16>> {
    Zeroizing::new(
        bytes
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect(),
    )
}

/// Recovers `store`, the store of the node `config` describes (`node::open_store`), from its
/// two peers (which must be serving). Run with the node stopped and its store empty.
///
/// # Errors
/// A non-empty store, unreachable or disagreeing helpers, keys, TLS or store failure.
pub async fn recover(
    config: &NodeConfig,
    store: Arc<dyn crate::store::Store>,
) -> Result<RecoverReport, RecoveryError> {
    let started = Instant::now();
    let (store, meta, held) = {
        tokio::task::spawn_blocking(move || {
            let (meta, held) = (store.meta()?, store.share_count()?);
            Ok::<_, StoreError>((store, meta, held))
        })
        .await
        .map_err(|e| RecoveryError::Task(e.to_string()))??
    };
    if held != 0 || meta.last_applied_batch != 0 {
        return Err(RecoveryError::NotEmpty {
            shares: held,
            last_batch: meta.last_applied_batch,
        });
    }
    let tls = crate::tls::NodeTls::load(config)?;
    let peers = crate::links::Peers::connect(config, &tls)?;
    let mut nonce = [0u8; 32];
    OsRng.fill_bytes(&mut nonce);
    let [low, high] = crate::ids::others(config.party_id);
    let (a, b) = tokio::join!(
        Incoming::open(&peers, low, nonce),
        Incoming::open(&peers, high, nonce)
    );
    let (mut a, mut b) = (a?, b?);
    if (a.last_applied_batch, a.next_serial, a.total)
        != (b.last_applied_batch, b.next_serial, b.total)
    {
        return Err(RecoveryError::Disagree("the counters"));
    }
    if a.last_digest != b.last_digest || unsigned(&a.last_commit)? != unsigned(&b.last_commit)? {
        return Err(RecoveryError::Disagree("the last batch"));
    }
    let batch = match a.last_applied_batch {
        0 => None,
        id => {
            let digest: [u8; 32] = a
                .last_digest
                .as_slice()
                .try_into()
                .map_err(|_| RecoveryError::Disagree("the last batch's results digest"))?;
            Some((id, a.last_commit.clone(), digest))
        }
    };
    // Entries first, a group per transaction; the batch log entry last, so a store that holds
    // entries but no applied batch is an interrupted recovery (refused as not empty).
    let total = usize::try_from(a.total).map_err(|_| RecoveryError::Disagree("the counters"))?;
    let mut written = 0;
    while written < total {
        let n = WRITE_ENTRIES.min(total - written);
        let (fa, fb) = tokio::join!(a.fill(n), b.fill(n));
        fa?;
        fb?;
        let ((ids, wa), (ids_b, wb)) = (a.take(n), b.take(n));
        if ids != ids_b {
            return Err(RecoveryError::Disagree("the enrolled serial ids"));
        }
        let shares: Vec<(SerialId, ShareWrite)> = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| {
                let span = i * PERSON_COEFS..(i + 1) * PERSON_COEFS;
                let mut person = combine_person(&wa[span.clone()], &wb[span]);
                let stored = StoredShares::from_party_shares(&person);
                zeroize::Zeroize::zeroize(&mut person);
                (SerialId(id), ShareWrite::Put(stored))
            })
            .collect();
        write(
            &store,
            BatchWrite {
                batch: None,
                finals: Vec::new(),
                shares,
                next_serial: a.next_serial,
                stats: None,
            },
        )
        .await?;
        written += n;
    }
    let (fa, fb) = tokio::join!(a.finish(), b.finish());
    fa?;
    fb?;
    write(
        &store,
        BatchWrite {
            batch,
            finals: Vec::new(),
            shares: Vec::new(),
            next_serial: a.next_serial,
            stats: None,
        },
    )
    .await?;
    Ok(RecoverReport {
        entries: total,
        last_applied_batch: a.last_applied_batch,
        next_serial: a.next_serial,
        bytes_per_helper: total * PERSON_COEFS * 2,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// One store transaction, off the async threads.
async fn write(store: &Arc<dyn crate::store::Store>, w: BatchWrite) -> Result<(), RecoveryError> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || store.apply_batch(&w))
        .await
        .map_err(|e| RecoveryError::Task(e.to_string()))??;
    Ok(())
}

//! Node recovery (`ocelli-node recover`): a node that lost its store gets its shares back from
//! the other two (docs/protocol.md, "Node recovery"; the arithmetic is
//! [`ocelli_mpc::recovery`]).
//!
//! The recovering node sends both helpers the same fresh nonce over the mutual-TLS peer links;
//! each helper checks who asks by its pinned certificate, snapshots its enrolled entries and
//! counters (no batch applies meanwhile) and streams, per entry in serial order, its masked
//! Lagrange term towards the caller's evaluation point. The caller checks that the two helpers
//! describe the same state (counters, last batch log entry, serial ids, sizes) and adds the two
//! streams into its shares, then writes shares, counters and the last batch log entry in one
//! transaction. Pending requests, the request log and old results are not restored: the other two
//! nodes keep refusing replays, and requests held only by them time out.

use std::sync::Arc;
use std::time::Instant;

use ocelli_mpc::recovery::{combine_person, pad_seed, third, Helper, PERSON_COEFS};
use rand_core::{OsRng, RngCore};
use sdk_orb::PartyId;
use shared_proto::v1::{BatchCommit, RecoverChunk, RecoverRequest};
use zeroize::Zeroizing;

use crate::config::NodeConfig;
use crate::ids::SerialId;
use crate::node::NodeState;
use crate::shares::StoredShares;
use crate::store::{BatchWrite, ShareWrite, StoreError};

/// Entries per streamed chunk (about 2.4 MB).
const CHUNK_ENTRIES: usize = 32;

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
    /// Keys.
    #[error(transparent)]
    Keys(#[from] crate::matching::SetupError),
    /// TLS files.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// Peer clients.
    #[error(transparent)]
    Peers(#[from] crate::links::PeersError),
    /// A helper refused or failed.
    #[error("party {party}: {message}")]
    Peer {
        /// The helper.
        party: u8,
        /// Its status message.
        message: String,
    },
    /// The helpers describe different states (a batch ran in between, or one misbehaves).
    #[error("the helpers disagree on {0}; retry when no batch runs")]
    Disagree(&'static str),
    /// A helper's stream is malformed.
    #[error("party {party} sent a malformed recovery stream: {what}")]
    Malformed {
        /// The helper.
        party: u8,
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

/// The helper side: this node's masked contributions for `caller`, in chunks. Holds the batch
/// lock while it reads, so counters and entries belong to one state.
///
/// # Errors
/// Bad nonce, a caller that is this node, keys or store failure.
pub async fn helper_chunks(
    state: Arc<NodeState>,
    caller: u8,
    request: &RecoverRequest,
) -> Result<Vec<RecoverChunk>, RecoveryError> {
    let nonce: [u8; 32] = request
        .nonce
        .as_slice()
        .try_into()
        .map_err(|_| RecoveryError::Nonce)?;
    if caller == state.party {
        return Err(RecoveryError::SelfRecovery);
    }
    let guard = state.apply_lock.clone().lock_owned().await;
    tokio::task::spawn_blocking(move || {
        let _guard = guard;
        let (me, secret, public) = crate::matching::node_x25519_keys(&state.config)?;
        let target = PartyId::try_from(caller).map_err(|_| RecoveryError::SelfRecovery)?;
        let other = third(me, target);
        let seed = pad_seed(me, &secret, &public[other.index()], target, &nonce);
        let mut helper = Helper::new(me, target, &seed);
        let meta = state.store.meta()?;
        let last = match meta.last_applied_batch {
            0 => None,
            id => state.store.batch(id)?,
        };
        let shares = state.shares();
        let db = shares.rows();
        let total = db.len();
        let mut chunks = Vec::new();
        for start in (0..total).step_by(CHUNK_ENTRIES) {
            let rows = start..(start + CHUNK_ENTRIES).min(total);
            let mut contributions = Vec::with_capacity(rows.len() * PERSON_COEFS * 2);
            for row in rows.clone() {
                let parts = [
                    db.code(0, row),
                    db.mask(0, row),
                    db.code(1, row),
                    db.mask(1, row),
                ];
                for w in helper.contribute_parts(parts) {
                    contributions.extend_from_slice(&w.to_le_bytes());
                }
            }
            chunks.push(RecoverChunk {
                last_applied_batch: meta.last_applied_batch,
                next_serial_id: meta.next_serial,
                last_batch_commit: Vec::new(),
                last_batch_results_digest: Vec::new(),
                serial_ids: db.serial_ids()[rows].to_vec(),
                contributions,
                total_entries: total as u64,
            });
        }
        if chunks.is_empty() {
            chunks.push(RecoverChunk {
                last_applied_batch: meta.last_applied_batch,
                next_serial_id: meta.next_serial,
                total_entries: 0,
                ..RecoverChunk::default()
            });
        }
        if let Some(b) = last {
            chunks[0].last_batch_commit = b.commit;
            chunks[0].last_batch_results_digest = b.results_digest.to_vec();
        }
        Ok(chunks)
    })
    .await
    .map_err(|e| RecoveryError::Task(e.to_string()))?
}

/// One helper's whole stream, flattened.
struct Received {
    last_applied_batch: u64,
    next_serial: u64,
    last_commit: Vec<u8>,
    last_digest: Vec<u8>,
    serial_ids: Vec<u64>,
    contributions: Zeroizing<Vec<u8>>,
}

async fn fetch(
    peers: &crate::links::Peers,
    party: u8,
    nonce: [u8; 32],
) -> Result<Received, RecoveryError> {
    let peer_err = |s: tonic::Status| RecoveryError::Peer {
        party,
        message: s.message().to_owned(),
    };
    let mut client = peers
        .client(party)
        .ok_or(RecoveryError::Peer {
            party,
            message: "not configured".into(),
        })?
        .clone();
    let mut stream = client
        .recover_shares(RecoverRequest {
            nonce: nonce.to_vec(),
        })
        .await
        .map_err(peer_err)?
        .into_inner();
    let mut r: Option<Received> = None;
    let mut total = 0u64;
    while let Some(chunk) = stream.message().await.map_err(peer_err)? {
        let malformed = |what| RecoveryError::Malformed { party, what };
        if chunk.contributions.len() != chunk.serial_ids.len() * PERSON_COEFS * 2 {
            return Err(malformed("contribution size"));
        }
        match &mut r {
            None => {
                total = chunk.total_entries;
                r = Some(Received {
                    last_applied_batch: chunk.last_applied_batch,
                    next_serial: chunk.next_serial_id,
                    last_commit: chunk.last_batch_commit,
                    last_digest: chunk.last_batch_results_digest,
                    serial_ids: chunk.serial_ids,
                    contributions: Zeroizing::new(chunk.contributions),
                });
            }
            Some(r) => {
                if (
                    chunk.last_applied_batch,
                    chunk.next_serial_id,
                    chunk.total_entries,
                ) != (r.last_applied_batch, r.next_serial, total)
                {
                    return Err(malformed("state changed between chunks"));
                }
                r.serial_ids.extend(chunk.serial_ids);
                r.contributions.extend_from_slice(&chunk.contributions);
                let mut c = chunk.contributions;
                zeroize::Zeroize::zeroize(&mut c);
            }
        }
    }
    let r = r.ok_or(RecoveryError::Malformed {
        party,
        what: "empty stream",
    })?;
    if r.serial_ids.len() as u64 != total || r.serial_ids.windows(2).any(|w| w[0] >= w[1]) {
        return Err(RecoveryError::Malformed {
            party,
            what: "serial ids",
        });
    }
    Ok(r)
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

/// Recovers the store of the node `config` describes from its two peers (which must be
/// serving). Run with the node stopped and its store empty.
///
/// # Errors
/// A non-empty store, unreachable or disagreeing helpers, keys, TLS or store failure.
pub async fn recover(config: &NodeConfig) -> Result<RecoverReport, RecoveryError> {
    let started = Instant::now();
    let store = crate::node::open_store(config)?;
    let meta = store.meta()?;
    let held = store.share_count()?;
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
    let me = config.party_id;
    let helpers: Vec<u8> = (0..3).filter(|&p| p != me).collect();
    let (a, b) = tokio::join!(
        fetch(&peers, helpers[0], nonce),
        fetch(&peers, helpers[1], nonce)
    );
    let (a, b) = (a?, b?);
    if (a.last_applied_batch, a.next_serial) != (b.last_applied_batch, b.next_serial) {
        return Err(RecoveryError::Disagree("the counters"));
    }
    if a.last_digest != b.last_digest || unsigned(&a.last_commit)? != unsigned(&b.last_commit)? {
        return Err(RecoveryError::Disagree("the last batch"));
    }
    if a.serial_ids != b.serial_ids {
        return Err(RecoveryError::Disagree("the enrolled serial ids"));
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
    let (wa, wb) = (words(&a.contributions), words(&b.contributions));
    let shares: Vec<(SerialId, ShareWrite)> = a
        .serial_ids
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
    let entries = shares.len();
    let write = BatchWrite {
        batch,
        finals: Vec::new(),
        shares,
        next_serial: a.next_serial,
    };
    let store2 = store.clone();
    tokio::task::spawn_blocking(move || store2.apply_batch(&write))
        .await
        .map_err(|e| RecoveryError::Task(e.to_string()))??;
    Ok(RecoverReport {
        entries,
        last_applied_batch: a.last_applied_batch,
        next_serial: a.next_serial,
        bytes_per_helper: a.contributions.len(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

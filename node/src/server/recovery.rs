//! The helpers' side of a recovery: admitting a session, agreeing on its pad secret with the
//! other helper, and streaming this node's masked contributions.

use std::sync::Arc;
use std::time::Instant;

use ocelli_mpc::recovery::{helpers_of, pad_seed, Helper, HelperState, PadSecret, PERSON_COEFS};
use ocelli_mpc::Eye;
use rand_core::OsRng;
use sdk_orb::PartyId;
use shared_proto::v1::{RecoverChunk, RecoverRequest, RecoveryPadOffer};

use crate::clock::now_ms;
use crate::node::NodeState;
use crate::recovery::allowance::{self, allowance_path};
use crate::recovery::sessions::PAD_WAIT;
use crate::recovery::RecoveryError;

/// Entries per streamed chunk (about 2.4 MB).
const CHUNK_ENTRIES: usize = 32;

/// Chunks a helper keeps queued ahead of the link (a few times 2.4 MB).
const QUEUED_CHUNKS: usize = 4;

/// How long a helper waits for the recovering node to take a chunk before it closes the
/// stream: the batch lock it holds meanwhile stops every batch.
const CALLER_STALL: std::time::Duration = std::time::Duration::from_secs(60);

/// The recovering party `caller` names, if it may recover from this node at all.
fn target_of(state: &NodeState, caller: PartyId) -> Result<PartyId, RecoveryError> {
    if caller == state.party {
        return Err(RecoveryError::SelfRecovery);
    }
    Ok(caller)
}

fn nonce_of(bytes: &[u8]) -> Result<[u8; 32], RecoveryError> {
    bytes.try_into().map_err(|_| RecoveryError::Nonce)
}

/// Whether this node's allowance lets `target` recover now, without taking a session of it.
fn check_allowance(state: &NodeState, target: PartyId) -> Result<(), RecoveryError> {
    allowance::check(
        &allowance_path(&state.config),
        state.party,
        target,
        now_ms(),
    )?;
    Ok(())
}

/// Takes a session of the allowance and records the nonce, off the async threads (the
/// allowance file is written and synced).
async fn admit(
    state: &Arc<NodeState>,
    target: PartyId,
    nonce: [u8; 32],
) -> Result<(), RecoveryError> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || {
        let path = allowance_path(&state.config);
        let a = state
            .recovery
            .admit(&path, state.party, target, &nonce, now_ms())?;
        tracing::info!(
            party = target.get(),
            served = a.served,
            sessions = a.sessions,
            "recovery session admitted"
        );
        Ok(())
    })
    .await
    .map_err(|e| RecoveryError::Task(e.to_string()))?
}

/// The helper side: this node's masked contributions for `caller`, streamed in chunks as they
/// are computed, so memory stays a few chunks whatever the database size. Holds the batch lock
/// until the last chunk is handed over, so counters and entries belong to one state.
///
/// The lower helper admits the session, draws its pad secret and hands it to the higher helper
/// before it answers; the higher helper waits a few seconds at most for that secret, then
/// admits the session.
///
/// # Errors
/// Bad nonce, a caller that is this node, no allowance for the caller, a nonce served before,
/// or the pad secret not agreed (before anything is sent); store failures arrive as the
/// stream's last item.
pub async fn helper_stream(
    state: Arc<NodeState>,
    caller: PartyId,
    request: &RecoverRequest,
) -> Result<tokio::sync::mpsc::Receiver<Result<RecoverChunk, RecoveryError>>, RecoveryError> {
    let nonce = nonce_of(&request.nonce)?;
    let target = target_of(&state, caller)?;
    let (low, high) = helpers_of(target);
    let secret = if state.party == low {
        admit(&state, target, nonce).await?;
        let secret = PadSecret::random(&mut OsRng);
        offer_pad(&state, high, target, &nonce, &secret).await?;
        secret
    } else {
        // Refused before the wait where the answer is known already.
        state.recovery.check_fresh(target, &nonce)?;
        check_allowance(&state, target)?;
        let secret = state
            .recovery
            .take_offer(target, &nonce, low, PAD_WAIT)
            .await?;
        admit(&state, target, nonce).await?;
        secret
    };
    let guard = state.apply_lock.clone().lock_owned().await;
    let (tx, rx) = tokio::sync::mpsc::channel(QUEUED_CHUNKS);
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let _guard = guard;
        let send = |item| {
            runtime.block_on(async {
                match tokio::time::timeout(CALLER_STALL, tx.send(item)).await {
                    Ok(sent) => sent.is_ok(),
                    Err(_) => {
                        tracing::warn!(
                            caller = caller.get(),
                            "recovery caller read nothing for a minute; stream closed"
                        );
                        false
                    }
                }
            })
        };
        if let Err(e) = send_contributions(&state, target, &nonce, &secret, &send) {
            // The caller may be gone already; then nobody is left to tell.
            send(Err(e));
        }
    });
    Ok(rx)
}

/// Hands the session's secret to the higher helper `high`.
async fn offer_pad(
    state: &NodeState,
    high: PartyId,
    target: PartyId,
    nonce: &[u8; 32],
    secret: &PadSecret,
) -> Result<(), RecoveryError> {
    let mut client = state
        .peers
        .get()
        .and_then(|p| p.client(high))
        .ok_or(RecoveryError::PadRefused {
            party: high,
            code: tonic::Code::Unavailable,
            message: "no link to it".into(),
        })?
        .clone();
    let offer = RecoveryPadOffer {
        target_party: u32::from(target.get()),
        nonce: nonce.to_vec(),
        secret: secret.to_bytes().to_vec(),
    };
    client
        .share_recovery_pad(offer)
        .await
        .map_err(|s| RecoveryError::PadRefused {
            party: high,
            code: s.code(),
            message: s.message().to_owned(),
        })?;
    Ok(())
}

/// The higher helper's side of the pad offer: keeps the secret `from` offers, if `from` is the
/// lower helper of the offer's recovering party, this node the higher one, and this node's
/// operator allows that party to recover now.
///
/// # Errors
/// A caller or a recovering party that does not fit, no allowance, a malformed offer, a
/// session served or offered before, or too many offers waiting.
pub fn accept_pad(
    state: &NodeState,
    from: PartyId,
    offer: &RecoveryPadOffer,
) -> Result<(), RecoveryError> {
    let target = PartyId::try_from(offer.target_party).map_err(|_| RecoveryError::NotLowHelper)?;
    if helpers_of(target) != (from, state.party) {
        return Err(RecoveryError::NotLowHelper);
    }
    let nonce = nonce_of(&offer.nonce)?;
    let secret = PadSecret::try_from(offer.secret.as_slice())?;
    check_allowance(state, target)?;
    state.recovery.offer(target, &nonce, secret, Instant::now())
}

/// Computes and sends the chunks; stops early if the caller hangs up.
fn send_contributions(
    state: &NodeState,
    target: PartyId,
    nonce: &[u8; 32],
    secret: &PadSecret,
    send: &dyn Fn(Result<RecoverChunk, RecoveryError>) -> bool,
) -> Result<(), RecoveryError> {
    let me = state.party;
    let meta = state.store.meta()?;
    let seed = pad_seed(
        target,
        secret,
        nonce,
        HelperState {
            last_applied_batch: meta.last_applied_batch,
            next_serial_id: meta.next_serial,
        },
    );
    let mut helper = Helper::new(me, target, &seed);
    let last = match meta.last_applied_batch {
        0 => None,
        id => state.store.batch(id)?,
    };
    let shares = state.shares();
    let db = shares.rows();
    let total = db.len();
    let mut first = true;
    let mut start = 0;
    loop {
        let rows = start..(start + CHUNK_ENTRIES).min(total);
        let mut contributions = Vec::with_capacity(rows.len() * PERSON_COEFS * 2);
        for row in rows.clone() {
            let parts = [
                db.code(Eye::Left, row),
                db.mask(Eye::Left, row),
                db.code(Eye::Right, row),
                db.mask(Eye::Right, row),
            ];
            for w in helper.contribute_parts(parts) {
                contributions.extend_from_slice(&w.to_le_bytes());
            }
        }
        let mut chunk = RecoverChunk {
            last_applied_batch: meta.last_applied_batch,
            next_serial_id: meta.next_serial,
            serial_ids: db.serial_ids()[rows.clone()].to_vec(),
            contributions,
            total_entries: total as u64,
            ..RecoverChunk::default()
        };
        if first {
            if let Some(b) = &last {
                chunk.last_batch_commit = b.commit.clone();
                chunk.last_batch_results_digest = b.results_digest.to_vec();
            }
            first = false;
        }
        if !send(Ok(chunk)) {
            return Ok(());
        }
        start = rows.end;
        if start >= total {
            return Ok(());
        }
    }
}

//! Envelope intake, exactly as docs/design.md section 5: size, structure, orb key
//! allow-list, signature, freshness, replay (persisted request log), decrypt
//! this party's payload, validate lengths and ids. Every rejection has its
//! own [`RejectReason`], which maps to a gRPC status code, an
//! `ocelli-reject-reason` metadata entry and a metrics label. A rejected
//! envelope changes no stored state.

use std::collections::HashSet;

use sdk_orb::envelope::{EnvelopeError, EnvelopeView};
use sdk_orb::keys::NodeSecretKey;
use sdk_orb::PartyId;

pub mod or_rule;

use crate::ids::{EnvelopeDigest, RequestId};
use crate::shares::StoredShares;
use crate::store::StoreError;

/// gRPC metadata key carrying the machine-readable rejection reason.
pub const REJECT_REASON_KEY: &str = "ocelli-reject-reason";

/// Why an envelope was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// Larger than `intake.max_envelope_bytes`.
    Oversized,
    /// Not a well-formed envelope encoding.
    Malformed,
    /// Unknown envelope version.
    UnsupportedVersion,
    /// A field has the wrong length (ids, keys, ciphertexts).
    BadLength,
    /// The orb key is not on the allow-list.
    UnknownOrbKey,
    /// The orb signature does not verify.
    BadSignature,
    /// Captured before the freshness window.
    StaleTimestamp,
    /// Captured too far in the future.
    FutureTimestamp,
    /// The request id was seen before.
    Replay,
    /// The payload in this party's slot is labelled for another party.
    WrongParty,
    /// This party's payload does not decrypt (opaque on purpose).
    DecryptionFailed,
    /// The decrypted shares have wrong lengths or values.
    BadShares,
    /// The request type is unknown or the serial id does not fit it.
    InvalidRequest,
    /// The decrypted payload names another request id.
    RequestIdMismatch,
    /// The node is shutting down.
    ShuttingDown,
    /// A storage failure on this node.
    Internal,
}

impl RejectReason {
    /// Every reason (for metrics and docs).
    pub const ALL: [RejectReason; 16] = [
        Self::Oversized,
        Self::Malformed,
        Self::UnsupportedVersion,
        Self::BadLength,
        Self::UnknownOrbKey,
        Self::BadSignature,
        Self::StaleTimestamp,
        Self::FutureTimestamp,
        Self::Replay,
        Self::WrongParty,
        Self::DecryptionFailed,
        Self::BadShares,
        Self::InvalidRequest,
        Self::RequestIdMismatch,
        Self::ShuttingDown,
        Self::Internal,
    ];

    /// The metadata value and metrics label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Oversized => "oversized",
            Self::Malformed => "malformed",
            Self::UnsupportedVersion => "unsupported_version",
            Self::BadLength => "bad_length",
            Self::UnknownOrbKey => "unknown_orb_key",
            Self::BadSignature => "bad_signature",
            Self::StaleTimestamp => "stale_timestamp",
            Self::FutureTimestamp => "future_timestamp",
            Self::Replay => "replay",
            Self::WrongParty => "wrong_party",
            Self::DecryptionFailed => "decryption_failed",
            Self::BadShares => "bad_shares",
            Self::InvalidRequest => "invalid_request",
            Self::RequestIdMismatch => "request_id_mismatch",
            Self::ShuttingDown => "shutting_down",
            Self::Internal => "internal",
        }
    }

    /// The gRPC status code.
    pub fn code(self) -> tonic::Code {
        use tonic::Code;
        match self {
            Self::Oversized => Code::ResourceExhausted,
            Self::Malformed | Self::UnsupportedVersion | Self::BadLength => Code::InvalidArgument,
            Self::UnknownOrbKey => Code::PermissionDenied,
            Self::BadSignature => Code::Unauthenticated,
            Self::StaleTimestamp | Self::FutureTimestamp => Code::OutOfRange,
            Self::Replay => Code::AlreadyExists,
            Self::WrongParty | Self::RequestIdMismatch => Code::FailedPrecondition,
            Self::DecryptionFailed => Code::DataLoss,
            Self::BadShares | Self::InvalidRequest => Code::InvalidArgument,
            Self::ShuttingDown => Code::Unavailable,
            Self::Internal => Code::Internal,
        }
    }
}

/// A refusal with a message saying what was wrong (never secret bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The reason.
    pub reason: RejectReason,
    /// Human-readable detail.
    pub message: String,
}

impl Rejection {
    /// A rejection with a message.
    pub fn new(reason: RejectReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

impl From<Rejection> for tonic::Status {
    fn from(r: Rejection) -> Self {
        let mut s = tonic::Status::new(r.reason.code(), r.message);
        s.metadata_mut().insert(
            REJECT_REASON_KEY,
            tonic::metadata::MetadataValue::from_static(r.reason.as_str()),
        );
        s
    }
}

/// Maps an SDK error (structure or crypto) to a reason and message.
fn from_sdk(e: EnvelopeError) -> Rejection {
    use RejectReason as R;
    let reason = match e {
        EnvelopeError::Malformed(_) | EnvelopeError::MissingField(_) => R::Malformed,
        EnvelopeError::Oversized { .. } => R::Oversized,
        EnvelopeError::ShareLength { .. } => R::BadShares,
        EnvelopeError::Length { .. } => R::BadLength,
        EnvelopeError::UnsupportedVersion(_) => R::UnsupportedVersion,
        EnvelopeError::UnknownRequestType(_) | EnvelopeError::SerialId => R::InvalidRequest,
        EnvelopeError::PayloadParties | EnvelopeError::PayloadParty { .. } => R::WrongParty,
        EnvelopeError::Signature => R::BadSignature,
        EnvelopeError::Decryption => R::DecryptionFailed,
        EnvelopeError::PayloadRequestId => R::RequestIdMismatch,
        _ => R::Internal,
    };
    // The SDK's messages name fields and lengths only, never secret bytes;
    // decryption failures are one opaque message.
    Rejection::new(reason, e.to_string())
}

/// Serialises opened shares into the stored layout.
fn to_stored(p: &sdk_orb::PartyShares) -> StoredShares {
    use crate::shares::{CODE_BYTES, MASK_BYTES};
    StoredShares::build(|buf| {
        let (lc, rest) = buf.split_at_mut(CODE_BYTES);
        let (lm, rest) = rest.split_at_mut(MASK_BYTES);
        let (rc, rm) = rest.split_at_mut(CODE_BYTES);
        p.left.code.write_le_bytes(lc);
        p.left.mask.write_le_bytes(lm);
        p.right.code.write_le_bytes(rc);
        p.right.mask.write_le_bytes(rm);
    })
}

/// Intake settings and keys of one node.
pub struct IntakePolicy {
    party: PartyId,
    secret: NodeSecretKey,
    /// The HPKE key before the last rotation: opens envelopes already held (pending) that
    /// were sealed to it; new envelopes must be sealed to `secret`.
    previous: Option<NodeSecretKey>,
    orb_keys: HashSet<[u8; 32]>,
    /// Oldest accepted capture time, ms before now.
    pub freshness_ms: u64,
    /// Largest accepted future skew, ms.
    pub future_ms: u64,
    /// Largest accepted envelope.
    pub max_bytes: usize,
}

impl std::fmt::Debug for IntakePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntakePolicy")
            .field("orb_keys", &self.orb_keys.len())
            .field("freshness_ms", &self.freshness_ms)
            .finish_non_exhaustive()
    }
}

/// An envelope that passed every check except the final replay-safe insert.
#[derive(Debug)]
pub struct Accepted {
    /// Request id.
    pub id: RequestId,
    /// Envelope digest.
    pub digest: EnvelopeDigest,
    /// Request type.
    pub request_type: sdk_orb::RequestType,
    /// Target serial id.
    pub serial_id: u64,
    /// OR policy.
    pub or_policy: bool,
    /// This party's decrypted shares.
    pub shares: StoredShares,
}

/// Why the intake policy cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum IntakeSetupError {
    /// The HPKE secret is not a valid X25519 key.
    #[error("invalid HPKE secret key")]
    HpkeSecret,
}

impl IntakePolicy {
    /// Builds the policy.
    ///
    /// # Errors
    /// The secret is not an X25519 key.
    pub fn new(
        party: PartyId,
        secret_bytes: &[u8; 32],
        orb_keys: impl IntoIterator<Item = ed25519_dalek::VerifyingKey>,
        cfg: &crate::config::IntakeConfig,
    ) -> Result<Self, IntakeSetupError> {
        Ok(Self {
            party,
            secret: NodeSecretKey::from_bytes(secret_bytes)
                .map_err(|_| IntakeSetupError::HpkeSecret)?,
            previous: None,
            orb_keys: orb_keys.into_iter().map(|k| k.to_bytes()).collect(),
            freshness_ms: cfg.freshness_window_s.saturating_mul(1000),
            future_ms: cfg.max_future_skew_s.saturating_mul(1000),
            max_bytes: cfg.max_envelope_bytes,
        })
    }

    /// Runs every check in the order of docs/design.md section 5. `seen` answers whether a request id
    /// is already in the request log.
    ///
    /// # Errors
    /// The first failed check.
    pub fn check(
        &self,
        bytes: &[u8],
        now_ms: u64,
        seen: impl FnOnce(&RequestId) -> Result<bool, StoreError>,
    ) -> Result<Accepted, Rejection> {
        if bytes.len() > self.max_bytes {
            return Err(Rejection::new(
                RejectReason::Oversized,
                format!(
                    "envelope is {} bytes; the limit is {}",
                    bytes.len(),
                    self.max_bytes
                ),
            ));
        }
        let view = EnvelopeView::parse(bytes).map_err(from_sdk)?;
        let orb_key = view.orb_key();
        if !self.orb_keys.contains(&orb_key) {
            return Err(Rejection::new(
                RejectReason::UnknownOrbKey,
                format!("orb key {} is not on the allow-list", hex::encode(orb_key)),
            ));
        }
        let digest = view.verified_digest().map_err(from_sdk)?;
        let ts = view.timestamp_ms();
        if ts.saturating_add(self.freshness_ms) < now_ms {
            return Err(Rejection::new(
                RejectReason::StaleTimestamp,
                format!(
                    "timestamp {ts} ms is older than the {} s freshness window",
                    self.freshness_ms / 1000
                ),
            ));
        }
        if ts > now_ms.saturating_add(self.future_ms) {
            return Err(Rejection::new(
                RejectReason::FutureTimestamp,
                format!("timestamp {ts} ms is in the future"),
            ));
        }
        let id = RequestId(view.request_id().0);
        match seen(&id) {
            Ok(false) => {}
            Ok(true) => {
                return Err(Rejection::new(
                    RejectReason::Replay,
                    format!("request id {id} was already received"),
                ))
            }
            Err(e) => return Err(Rejection::new(RejectReason::Internal, e.to_string())),
        }
        let payload =
            sdk_orb::envelope::open_payload(&view, self.party, &self.secret).map_err(from_sdk)?;
        let shares = to_stored(&payload);
        Ok(Accepted {
            id,
            digest: EnvelopeDigest(digest.0),
            request_type: view.request_type(),
            serial_id: view.serial_id(),
            or_policy: view.or_policy(),
            shares,
        })
    }

    /// Decrypts this party's shares of an envelope that already passed
    /// [`IntakePolicy::check`] (used when a batch runs).
    ///
    /// # Errors
    /// The envelope no longer opens (corrupt store).
    pub fn reopen(&self, bytes: &[u8]) -> Result<StoredShares, Rejection> {
        let view = EnvelopeView::parse(bytes).map_err(from_sdk)?;
        let payload = match (
            sdk_orb::envelope::open_payload(&view, self.party, &self.secret),
            &self.previous,
        ) {
            (Ok(p), _) => p,
            (Err(_), Some(previous)) => {
                sdk_orb::envelope::open_payload(&view, self.party, previous).map_err(from_sdk)?
            }
            (Err(e), None) => return Err(from_sdk(e)),
        };
        Ok(to_stored(&payload))
    }

    /// Keeps the HPKE key before a rotation, to open envelopes held from before it.
    ///
    /// # Errors
    /// The key is not an X25519 key.
    pub fn with_previous_key(mut self, secret_bytes: &[u8; 32]) -> Result<Self, IntakeSetupError> {
        self.previous = Some(
            NodeSecretKey::from_bytes(secret_bytes).map_err(|_| IntakeSetupError::HpkeSecret)?,
        );
        Ok(self)
    }
}

//! Envelope intake, exactly as docs/design.md section 5: size, structure, orb key
//! allow-list, signature, freshness, replay (persisted request log), decrypt
//! this party's payload, validate lengths and ids. Every rejection has its
//! own [`RejectReason`], which maps to a gRPC status code, an
//! `ocelli-reject-reason` metadata entry and a metrics label. A rejected
//! envelope changes no stored state.

use std::collections::HashSet;

use sdk_orb::envelope::v2::open_payload_v2;
use sdk_orb::envelope::{envelope_version, open_payload, EnvelopeError, EnvelopeView, Version};
use sdk_orb::keys::{NodeHybridSecretKey, NodeSecretKey};
use sdk_orb::{PartyId, PartyShares};

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
    /// Unknown envelope version, or version 2 on a node without an X-Wing key.
    UnsupportedVersion,
    /// Envelope version 1 after the node stopped accepting it (`[envelope]`).
    Version1Refused,
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
    pub const ALL: [RejectReason; 17] = [
        Self::Oversized,
        Self::Malformed,
        Self::UnsupportedVersion,
        Self::Version1Refused,
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
            Self::Version1Refused => "version1_refused",
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
            Self::WrongParty | Self::RequestIdMismatch | Self::Version1Refused => {
                Code::FailedPrecondition
            }
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

fn no_hybrid_key() -> Rejection {
    Rejection::new(
        RejectReason::UnsupportedVersion,
        "envelope version 2 needs this node's X-Wing key (keys.hpke_hybrid_secret)",
    )
}

/// Intake settings and keys of one node.
pub struct IntakePolicy {
    party: PartyId,
    secret: NodeSecretKey,
    /// The HPKE key before the last rotation: opens envelopes already held (pending) that
    /// were sealed to it; new envelopes must be sealed to `secret`.
    previous: Option<NodeSecretKey>,
    /// The X-Wing key that opens envelope version 2; `None`: version 1 only.
    hybrid: Option<NodeHybridSecretKey>,
    /// Version 1 is accepted before this time (ms since the epoch); `None`: no end.
    v1_until_ms: Option<u64>,
    /// Version 1 is refused whatever the time.
    refuse_v1: bool,
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
    /// The `[envelope]` section is invalid.
    #[error("{0}")]
    Envelope(#[from] crate::config::ConfigError),
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
            hybrid: None,
            v1_until_ms: None,
            refuse_v1: false,
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
        match envelope_version(bytes) {
            Ok(2) => {
                let Some(hybrid) = &self.hybrid else {
                    return Err(no_hybrid_key());
                };
                let view = EnvelopeView::parse_v2(bytes).map_err(from_sdk)?;
                self.check_view(&view, now_ms, seen, |v| {
                    open_payload_v2(v, self.party, hybrid)
                })
            }
            version => {
                if version == Ok(1) && !self.accepts_v1(now_ms) {
                    return Err(Rejection::new(
                        RejectReason::Version1Refused,
                        "envelope version 1 is no longer accepted (envelope.refuse_v1 or \
                         envelope.accept_v1_until): seal version 2",
                    ));
                }
                let view = EnvelopeView::parse(bytes).map_err(from_sdk)?;
                self.check_view(&view, now_ms, seen, |v| {
                    open_payload(v, self.party, &self.secret)
                })
            }
        }
    }

    /// Whether envelope version 1 is accepted at `now_ms`.
    pub fn accepts_v1(&self, now_ms: u64) -> bool {
        !self.refuse_v1 && self.v1_until_ms.is_none_or(|until| now_ms < until)
    }

    /// The checks after parsing, for either version; `open` decrypts this party's payload.
    fn check_view<V: Version>(
        &self,
        view: &EnvelopeView<'_, V>,
        now_ms: u64,
        seen: impl FnOnce(&RequestId) -> Result<bool, StoreError>,
        open: impl FnOnce(&EnvelopeView<'_, V>) -> Result<Box<PartyShares>, EnvelopeError>,
    ) -> Result<Accepted, Rejection> {
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
        let payload = open(view).map_err(from_sdk)?;
        let shares = StoredShares::from_party_shares(&payload);
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
        if envelope_version(bytes) == Ok(2) {
            let hybrid = self.hybrid.as_ref().ok_or_else(no_hybrid_key)?;
            let view = EnvelopeView::parse_v2(bytes).map_err(from_sdk)?;
            let payload = open_payload_v2(&view, self.party, hybrid).map_err(from_sdk)?;
            return Ok(StoredShares::from_party_shares(&payload));
        }
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
        Ok(StoredShares::from_party_shares(&payload))
    }

    /// Sets the envelope versions accepted: version 2 with the X-Wing key of `hybrid_seed`
    /// (none: version 1 only), version 1 as `cfg` says.
    ///
    /// # Errors
    /// `cfg.accept_v1_until` is not an RFC 3339 time.
    pub fn with_envelope_versions(
        mut self,
        hybrid_seed: Option<&[u8; 32]>,
        cfg: &crate::config::EnvelopeConfig,
    ) -> Result<Self, IntakeSetupError> {
        self.hybrid = hybrid_seed.map(NodeHybridSecretKey::from_seed);
        self.v1_until_ms = cfg.v1_until_ms()?;
        self.refuse_v1 = cfg.refuse_v1;
        Ok(self)
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

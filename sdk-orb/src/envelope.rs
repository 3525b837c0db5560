//! The envelope: per-party payloads sealed with HPKE, signed by the orb.
//!
//! Sealing (orb): [`seal_envelope`] shares both eyes straight into the three payload regions
//! of the caller's buffer, seals each region in place to its node's X25519 key (RFC 9180 base
//! mode, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305) and signs the envelope
//! digest with the orb's Ed25519 key. No allocator; nothing secret outlives the call except
//! inside the ciphertexts.
//!
//! Opening (node, auditor): [`EnvelopeView::parse`] (structure only), then
//! [`EnvelopeView::verify_signature`], then [`EnvelopeView::open_into`] for one party.
//!
//! Bindings: the HPKE info string is `"ocelli/payload/v1" || party id || request id`; the AAD
//! is the envelope header (version, request id, type, timestamp, serial id, policy, orb key);
//! the digest covers the header and all three encapsulated keys and ciphertexts.
//!
//! Version 2 ([`v2`]) seals with hybrid post-quantum HPKE (X-Wing) and sends one party a
//! seed instead of its shares; [`envelope_version`] tells which parser to use.
//!
//! Modules: `format` (sizes, the header, the digest, the error type, the field layouts),
//! `seal` (the orb's side), `parse` (structure and signature), `open` (a node's payload).

mod format;
mod open;
mod parse;
mod seal;
pub mod v2;

pub use self::format::*;
pub use self::open::decode_payload;
#[cfg(feature = "alloc")]
pub use self::open::open_payload;
pub use self::parse::{envelope_version, EnvelopeView, SealedPayloadView, Version, V1, V2};
#[cfg(feature = "measure-steps")]
pub(crate) use self::parse::{sealed_digest, write_layout};
#[cfg(feature = "alloc")]
pub use self::seal::seal_envelope_to_vec;
pub use self::seal::{encode_payload, hazmat_seal_plaintexts, seal_envelope};

#[cfg(test)]
mod tests;

//! Serial ids a uniqueness request names for the OR rule (`SubmitRequest.or_serial_ids`):
//! their checks, and how they are bound into the digest the three nodes agree on.
//!
//! The ids travel beside the envelope, from the gateway, so the orb's signature does not
//! cover them. Binding them into the request digest makes the batch agreement compare them:
//! a node that was given other ids holds another digest, and the request is answered
//! `DIGEST_MISMATCH` everywhere instead of being evaluated under different rules.

use sha2::{Digest, Sha256};

use super::{RejectReason, Rejection};
use crate::ids::EnvelopeDigest;

/// The most serial ids one request may name.
pub const MAX_OR_SERIAL_IDS: usize = 64;

/// Checks the named ids: only uniqueness requests and checks name any, at most 64, strictly
/// increasing (one encoding per set), each enrolled on this node now.
///
/// # Errors
/// [`RejectReason::InvalidRequest`] saying which rule failed. A set with an id not enrolled
/// reads the same whichever id it is: the answer does not tell which serial ids exist.
pub fn check(
    ids: &[u64],
    request_type: sdk_orb::RequestType,
    enrolled: impl Fn(u64) -> bool,
) -> Result<(), Rejection> {
    use sdk_orb::RequestType as T;
    let invalid = |m: String| Err(Rejection::new(RejectReason::InvalidRequest, m));
    if ids.is_empty() {
        return Ok(());
    }
    if !matches!(request_type, T::Uniqueness | T::UniquenessCheck) {
        return invalid(
            "or_serial_ids: only uniqueness requests and checks name serial ids".into(),
        );
    }
    if ids.len() > MAX_OR_SERIAL_IDS {
        return invalid(format!(
            "or_serial_ids: {} serial ids, at most {MAX_OR_SERIAL_IDS}",
            ids.len()
        ));
    }
    if ids.windows(2).any(|w| w[0] >= w[1]) {
        return invalid("or_serial_ids: serial ids must be strictly increasing".into());
    }
    if !ids.iter().all(|&id| enrolled(id)) {
        return invalid("or_serial_ids: a serial id named is not enrolled".into());
    }
    Ok(())
}

/// The digest the nodes agree on: the envelope digest itself when no id is named (so plain
/// requests keep their digest), else SHA-256 of `"ocelli/v1/request-digest" || envelope
/// digest || count (u32 BE) || ids (u64 BE each)`.
pub fn request_digest(envelope: EnvelopeDigest, ids: &[u64]) -> EnvelopeDigest {
    if ids.is_empty() {
        return envelope;
    }
    let mut h = Sha256::new();
    h.update(b"ocelli/v1/request-digest");
    h.update(envelope.0);
    h.update(u32::try_from(ids.len()).unwrap_or(u32::MAX).to_be_bytes());
    for id in ids {
        h.update(id.to_be_bytes());
    }
    EnvelopeDigest(h.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sdk_orb::RequestType as T;

    #[test]
    fn named_ids_are_checked_and_bound_into_the_digest() {
        let enrolled = |id: u64| (1..=100).contains(&id);
        assert!(check(&[], T::Deletion, enrolled).is_ok());
        assert!(check(&[1, 5], T::Uniqueness, enrolled).is_ok());
        assert!(check(&[1, 5], T::UniquenessCheck, enrolled).is_ok());
        let too_many: Vec<u64> = (1..=65).collect();
        let cases: [(&[u64], T, &str); 5] = [
            (&[1], T::Reauth, "only uniqueness"),
            (&too_many, T::Uniqueness, "65 serial ids, at most 64"),
            (&[5, 1], T::Uniqueness, "strictly increasing"),
            (&[5, 5], T::Uniqueness, "strictly increasing"),
            (&[5, 101], T::Uniqueness, "not enrolled"),
        ];
        for (ids, t, want) in cases {
            let e = check(ids, t, enrolled).expect_err("refused");
            assert_eq!(e.reason, RejectReason::InvalidRequest);
            assert!(e.message.contains(want), "{}", e.message);
        }
        let unknown = |ids: &[u64]| check(ids, T::Uniqueness, enrolled).map_err(|e| e.message);
        assert_eq!(unknown(&[5, 101]), unknown(&[102]));
        assert_eq!(unknown(&[101, 102]), unknown(&[7, 500]));
        let d = EnvelopeDigest([7; 32]);
        assert_eq!(request_digest(d, &[]), d);
        assert_ne!(request_digest(d, &[1]), d);
        assert_ne!(request_digest(d, &[1]), request_digest(d, &[2]));
        assert_ne!(request_digest(d, &[1, 2]), request_digest(d, &[1]));
    }
}

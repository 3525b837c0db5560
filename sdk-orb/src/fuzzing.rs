//! Entry points for the fuzz targets: each decodes untrusted bytes and checks the invariants
//! that hold for every accepted input. Compiled in normal builds so they never rot.

use crate::envelope::v2::decode_payload_v2;
use crate::envelope::{decode_payload, EnvelopeView, Version};
use crate::shamir::PartyShares;
use crate::template::{IrisTemplate, TemplatePolicy};
use crate::{PartyId, RequestId};

/// Template JSON: accepted templates re-serialise and re-parse to themselves.
pub fn template_json(data: &[u8]) {
    let policy = TemplatePolicy { min_usable_bits: 0 };
    if let Ok(t) = IrisTemplate::from_open_iris_json(data, &policy) {
        let mut buf = [0u8; 8192];
        let n = t
            .to_open_iris_json(&mut buf)
            .expect("buffer fits any template");
        let again =
            IrisTemplate::from_open_iris_json(&buf[..n], &policy).expect("own output parses");
        assert!(again == t);
    }
}

/// Envelopes of either version: accepted envelopes are canonical (re-encode to the same
/// bytes); digest and signature checks never panic.
pub fn envelope(data: &[u8]) {
    if let Ok(view) = EnvelopeView::parse(data) {
        check_envelope(&view, data);
    }
    if let Ok(view) = EnvelopeView::parse_v2(data) {
        check_envelope(&view, data);
    }
}

fn check_envelope<V: Version>(view: &EnvelopeView<'_, V>, data: &[u8]) {
    let mut buf = alloc::vec![0u8; V::MAX_LEN];
    let n = view.encode(&mut buf).expect("buffer fits any envelope");
    assert!(&buf[..n] == data, "accepted envelope is not canonical");
    let _ = view.digest();
    let _ = view.verify_signature();
}

/// Decrypted payloads: decoding never panics; accepted payloads re-encode to the same bytes.
pub fn payload(data: &[u8]) {
    let party = PartyId::ALL[data.first().map_or(0, |b| (*b % 3) as usize)];
    let request_id = RequestId([0; 16]);
    let mut shares = alloc::boxed::Box::new(PartyShares::zero());
    if decode_payload(data, party, &request_id, &mut shares).is_ok() {
        let mut buf = alloc::vec![0u8; data.len()];
        let n = crate::envelope::encode_payload(party, &request_id, &shares, &mut buf)
            .expect("same length");
        assert!(&buf[..n] == data, "accepted payload is not canonical");
    }
    // Version 2: the last byte picks the seeded party (a request id of sixteen bytes `b` is
    // `b` mod 3), so a party is seeded for some inputs and not for others.
    let request_id = RequestId([data.last().map_or(0, |b| *b % 3); 16]);
    let _ = decode_payload_v2(data, party, &request_id, &mut shares);
}

//! The C interface's failure paths: null pointers, a failing RNG, a short buffer.

use core::ffi::c_void;

use ocelli_sdk_capi::*;

const LEFT: &[u8] = include_bytes!("../../examples/data/left.json");
const RIGHT: &[u8] = include_bytes!("../../examples/data/right.json");

unsafe extern "C" fn failing_rng(_: *mut c_void, out: *mut u8, len: usize) -> i32 {
    // SAFETY: the interface passes `len` writable bytes at `out`.
    unsafe { core::ptr::write_bytes(out, 0x77, len) };
    -1
}

struct Inputs {
    left: OcelliTemplate,
    right: OcelliTemplate,
    nodes: OcelliNodePublicKeys,
    orb: OcelliOrbSigningKey,
    request: OcelliRequest,
}

fn inputs() -> Inputs {
    let blank = OcelliTemplate {
        code: [0; OCELLI_PACKED_BYTES],
        mask: [0; OCELLI_PACKED_BYTES],
        version: [0; OCELLI_MAX_VERSION_LEN],
        version_len: 0,
    };
    let (mut left, mut right) = (blank, blank);
    let mut bundle = [0u8; OCELLI_NODE_KEYS_BYTES];
    let mut nodes = OcelliNodePublicKeys { bytes: [0; 96] };
    let mut orb = OcelliOrbSigningKey { seed: [0; 32] };
    // SAFETY: every pointer is to a live local of the documented size.
    unsafe {
        assert_eq!(
            ocelli_template_parse(LEFT.as_ptr(), LEFT.len(), 8960, &mut left),
            OcelliStatus::Ok
        );
        assert_eq!(
            ocelli_template_parse(RIGHT.as_ptr(), RIGHT.len(), 8960, &mut right),
            OcelliStatus::Ok
        );
        for (p, chunk) in bundle.chunks_exact_mut(32).enumerate() {
            let secret = [p as u8 + 1; 32];
            assert_eq!(
                ocelli_node_public_key_from_secret(secret.as_ptr(), chunk.as_mut_ptr()),
                OcelliStatus::Ok
            );
        }
        assert_eq!(
            ocelli_node_public_keys_from_bytes(bundle.as_ptr(), &mut nodes),
            OcelliStatus::Ok
        );
        assert_eq!(
            ocelli_orb_signing_key_from_seed([9u8; 32].as_ptr(), &mut orb),
            OcelliStatus::Ok
        );
    }
    let request = OcelliRequest {
        request_id: [1; 16],
        timestamp_ms: 1_790_000_000_000,
        serial_id: 0,
        request_type: 1,
        or_policy: 0,
    };
    Inputs {
        left,
        right,
        nodes,
        orb,
        request,
    }
}

#[test]
fn a_failing_rng_leaves_nothing_sealed() {
    let i = inputs();
    let mut out = vec![0xA5u8; OCELLI_MAX_ENVELOPE_LEN];
    let mut written = 1;
    // SAFETY: every pointer is to a live local of the documented size.
    let s = unsafe {
        ocelli_seal_envelope(
            Some(failing_rng),
            core::ptr::null_mut(),
            &i.request,
            &i.left,
            &i.right,
            &i.nodes,
            &i.orb,
            out.as_mut_ptr(),
            out.len(),
            &mut written,
        )
    };
    assert_eq!(s, OcelliStatus::Rng);
    assert_eq!(written, 0);
    assert!(out.iter().all(|&b| b == 0));
}

#[test]
fn misuse_is_reported() {
    let i = inputs();
    let mut rng = OcelliTestRng {
        seed: [0; 32],
        word_pos: 0,
    };
    let mut out = vec![0u8; 100];
    let mut written = 0;
    // SAFETY: every non-null pointer is to a live local of the documented size.
    unsafe {
        assert_eq!(
            ocelli_template_parse(core::ptr::null(), 0, 0, core::ptr::null_mut()),
            OcelliStatus::NullPointer
        );
        assert_eq!(ocelli_envelope_len(core::ptr::null()), 0);
        let bad_type = OcelliRequest {
            request_type: 9,
            ..i.request
        };
        assert_eq!(ocelli_envelope_len(&bad_type), 0);
        let s = ocelli_seal_envelope(
            Some(ocelli_test_rng_fill),
            (&mut rng as *mut OcelliTestRng).cast(),
            &i.request,
            &i.left,
            &i.right,
            &i.nodes,
            &i.orb,
            out.as_mut_ptr(),
            out.len(),
            &mut written,
        );
        assert_eq!(s, OcelliStatus::BufferTooSmall);
        let s = ocelli_seal_envelope(
            None,
            core::ptr::null_mut(),
            &i.request,
            &i.left,
            &i.right,
            &i.nodes,
            &i.orb,
            out.as_mut_ptr(),
            out.len(),
            &mut written,
        );
        assert_eq!(s, OcelliStatus::NullPointer);
    }
}

fn hybrid_nodes() -> Box<OcelliNodeHybridPublicKeys> {
    let mut bundle = vec![0u8; OCELLI_NODE_HYBRID_KEYS_BYTES];
    let mut nodes = Box::new(OcelliNodeHybridPublicKeys {
        bytes: [0; OCELLI_NODE_HYBRID_KEYS_BYTES],
    });
    // SAFETY: every pointer is to live memory of the documented size.
    unsafe {
        for (p, chunk) in bundle
            .chunks_exact_mut(OCELLI_HYBRID_PUBLIC_KEY_BYTES)
            .enumerate()
        {
            let seed = [p as u8 + 1; 32];
            assert_eq!(
                ocelli_node_hybrid_public_key_from_seed(seed.as_ptr(), chunk.as_mut_ptr()),
                OcelliStatus::Ok
            );
        }
        assert_eq!(
            ocelli_node_hybrid_public_keys_from_bytes(bundle.as_ptr(), &mut *nodes),
            OcelliStatus::Ok
        );
        // An ML-KEM key with a coefficient of 0xFFF (not reduced mod q) is refused.
        bundle[0] = 0xff;
        bundle[1] |= 0x0f;
        let mut scratch = Box::new(OcelliNodeHybridPublicKeys {
            bytes: [0; OCELLI_NODE_HYBRID_KEYS_BYTES],
        });
        assert_eq!(
            ocelli_node_hybrid_public_keys_from_bytes(bundle.as_ptr(), &mut *scratch),
            OcelliStatus::InvalidKey
        );
    }
    nodes
}

#[test]
fn version_2_seals_to_its_length_and_a_failing_rng_leaves_nothing_sealed() {
    let i = inputs();
    let nodes = hybrid_nodes();
    // SAFETY: a live local.
    let len = unsafe { ocelli_envelope_len_v2(&i.request) };
    assert_eq!(len, 157_313);
    let mut rng = OcelliTestRng {
        seed: [3; 32],
        word_pos: 0,
    };
    let mut out = vec![0xA5u8; OCELLI_MAX_ENVELOPE_LEN_V2];
    let mut written = 0;
    // SAFETY: every pointer is to a live local of the documented size.
    let s = unsafe {
        ocelli_seal_envelope_v2(
            Some(ocelli_test_rng_fill),
            (&mut rng as *mut OcelliTestRng).cast(),
            &i.request,
            &i.left,
            &i.right,
            &*nodes,
            &i.orb,
            out.as_mut_ptr(),
            out.len(),
            &mut written,
        )
    };
    assert_eq!(s, OcelliStatus::Ok);
    assert_eq!(written, len);
    assert!(out[len..].iter().all(|&b| b == 0xA5));
    let view = sdk_orb::envelope::EnvelopeView::parse_v2(&out[..len]).expect("parses");
    view.verify_signature().expect("verifies");

    let mut written = 1;
    // SAFETY: as above.
    let s = unsafe {
        ocelli_seal_envelope_v2(
            Some(failing_rng),
            core::ptr::null_mut(),
            &i.request,
            &i.left,
            &i.right,
            &*nodes,
            &i.orb,
            out.as_mut_ptr(),
            out.len(),
            &mut written,
        )
    };
    assert_eq!(s, OcelliStatus::Rng);
    assert_eq!(written, 0);
    assert!(out.iter().all(|&b| b == 0));
}

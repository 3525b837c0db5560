//! The Rust side of `check.sh`: seals the fixture person with sdk-orb directly, with the
//! fixture keys and seed that `seal_fixture.c` uses, and writes the envelopes, version 1 and
//! version 2.
//!
//! Usage: `seal_fixture LEFT.json RIGHT.json OUT_V1.envelope OUT_V2.envelope`.

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use sdk_orb::envelope::v2::{seal_envelope_v2, MAX_ENVELOPE_LEN_V2};
use sdk_orb::envelope::{seal_envelope, RequestMeta, MAX_ENVELOPE_LEN};
use sdk_orb::keys::{
    NodeHybridPublicKeys, NodeHybridSecretKey, NodePublicKeys, NodeSecretKey, OrbSigningKey,
};
use sdk_orb::{IrisTemplate, RequestId, RequestType, TemplatePolicy};

// The fixture, as in seal_fixture.c: node p's X25519 secret key is 32 bytes of 0x11 * (p + 1)
// and its X-Wing seed 32 bytes of 0x55 + p, the orb seed 32 bytes of 0x42, the RNG seed the
// bytes 1..=32 for each envelope, the request id the bytes 0xA0..=0xAF; a uniqueness request
// at 1,790,000,000,000 ms, AND policy.
const NODE_SECRET_BYTE: [u8; 3] = [0x11, 0x22, 0x33];
const NODE_HYBRID_SEED_BYTE: [u8; 3] = [0x55, 0x56, 0x57];
const ORB_SEED_BYTE: u8 = 0x42;
const TIMESTAMP_MS: u64 = 1_790_000_000_000;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn load(path: &str) -> Result<IrisTemplate, String> {
    let json = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    IrisTemplate::from_open_iris_json(&json, &TemplatePolicy::default())
        .map_err(|e| format!("{path}: {e}"))
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [left, right, out_path, out_v2_path] = args.as_slice() else {
        return Err(
            "usage: seal_fixture LEFT.json RIGHT.json OUT_V1.envelope OUT_V2.envelope".into(),
        );
    };
    let (left, right) = (load(left)?, load(right)?);
    let public = |p: usize| {
        NodeSecretKey::from_bytes(&[NODE_SECRET_BYTE[p]; 32])
            .map(|k| k.public_key())
            .map_err(|e| e.to_string())
    };
    let nodes = NodePublicKeys([public(0)?, public(1)?, public(2)?]);
    let orb = OrbSigningKey::from_bytes(&[ORB_SEED_BYTE; 32]);
    let mut request_id = [0u8; 16];
    for (i, b) in request_id.iter_mut().enumerate() {
        *b = 0xA0 + i as u8;
    }
    let meta = RequestMeta {
        request_id: RequestId(request_id),
        request_type: RequestType::Uniqueness,
        timestamp_ms: TIMESTAMP_MS,
        serial_id: 0,
        or_policy: false,
    };
    let mut seed = [0u8; 32];
    for (i, b) in seed.iter_mut().enumerate() {
        *b = i as u8 + 1;
    }
    let mut out = vec![0u8; MAX_ENVELOPE_LEN];
    let n = seal_envelope(
        &mut ChaCha20Rng::from_seed(seed),
        &meta,
        &left,
        &right,
        &nodes,
        &orb,
        &mut out,
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(out_path, &out[..n]).map_err(|e| format!("{out_path}: {e}"))?;

    let hybrid = NodeHybridPublicKeys(core::array::from_fn(|p| {
        NodeHybridSecretKey::from_seed(&[NODE_HYBRID_SEED_BYTE[p]; 32]).public_key()
    }));
    let mut out_v2 = vec![0u8; MAX_ENVELOPE_LEN_V2];
    let n_v2 = seal_envelope_v2(
        &mut ChaCha20Rng::from_seed(seed),
        &meta,
        &left,
        &right,
        &hybrid,
        &orb,
        &mut out_v2,
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(out_v2_path, &out_v2[..n_v2]).map_err(|e| format!("{out_v2_path}: {e}"))?;
    println!("{n} and {n_v2} bytes");
    Ok(())
}

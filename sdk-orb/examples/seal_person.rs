//! Turns a left and a right open-iris template file into one sealed, signed envelope for the
//! three nodes, then plays each node: verifies the signature, opens its own payload and checks
//! that the three shares of the person reconstruct the templates.
//!
//! Usage: `seal_person LEFT.json RIGHT.json [OUT.envelope]`. Node and orb keys are generated
//! fresh for the run (a deployment provisions them with `ocelli-node keygen`).

use std::time::Instant;

use rand_core::OsRng;
use sdk_orb::envelope::{open_payload, seal_envelope_to_vec, EnvelopeView, RequestMeta};
use sdk_orb::keys::{NodePublicKeys, NodeSecretKey, OrbSigningKey};
use sdk_orb::plaintext::fractional_hamming_distance;
use sdk_orb::shamir::{code_coefs, reconstruct};
use sdk_orb::{IrisTemplate, PartyId, RequestId, RequestType, TemplatePolicy, CODE_COEFS};

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
    let [left_path, right_path, rest @ ..] = args.as_slice() else {
        return Err("usage: seal_person LEFT.json RIGHT.json [OUT.envelope]".into());
    };
    let left = load(left_path)?;
    let right = load(right_path)?;
    println!(
        "templates: left {} usable bits, right {} usable bits (of 12800), version {}",
        left.usable_bits(),
        right.usable_bits(),
        left.version()
    );
    if let Some(d) = fractional_hamming_distance(&left, &right) {
        println!("left vs right fractional Hamming distance (plaintext, orb side): {d:.4}");
    }

    let mut rng = OsRng;
    let node_keys: [NodeSecretKey; 3] = core::array::from_fn(|_| NodeSecretKey::generate(&mut rng));
    let public = NodePublicKeys(core::array::from_fn(|i| node_keys[i].public_key()));
    let orb = OrbSigningKey::generate(&mut rng);
    let meta = RequestMeta {
        request_id: RequestId::random(&mut rng),
        request_type: RequestType::Uniqueness,
        timestamp_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| e.to_string())?
            .as_millis() as u64,
        serial_id: 0,
        or_policy: false,
    };

    let start = Instant::now();
    let envelope = seal_envelope_to_vec(&mut rng, &meta, &left, &right, &public, &orb)
        .map_err(|e| e.to_string())?;
    let sealed_in = start.elapsed();
    let view = EnvelopeView::parse(&envelope).map_err(|e| e.to_string())?;
    println!("request id {}", meta.request_id);
    println!(
        "envelope: {} bytes, sealed and signed in {:.2} ms",
        envelope.len(),
        sealed_in.as_secs_f64() * 1e3
    );
    println!("digest   {}", hex(&view.digest().0));
    for party in PartyId::ALL {
        println!(
            "  {party}: ciphertext {} bytes",
            view.payload(party).ciphertext.len()
        );
    }

    // Each node: signature, own payload.
    view.verify_signature().map_err(|e| e.to_string())?;
    let shares: Vec<_> = PartyId::ALL
        .iter()
        .map(|&p| open_payload(&view, p, &node_keys[p.index()]).map_err(|e| format!("{p}: {e}")))
        .collect::<Result<_, _>>()?;
    println!("all three nodes verified the signature and opened their payloads");

    // Auditor's check: any two shares reconstruct the masked codes.
    for (name, template, pick) in [("left", &left, 0usize), ("right", &right, 1usize)] {
        let eye = |i: usize| {
            if pick == 0 {
                &shares[i].left
            } else {
                &shares[i].right
            }
        };
        let mut plain = vec![0u16; CODE_COEFS];
        reconstruct(
            (PartyId::ALL[0], &eye(0).code.coefs()[..]),
            (PartyId::ALL[1], &eye(1).code.coefs()[..]),
            &mut plain,
        );
        let mut expected = [0u16; CODE_COEFS];
        code_coefs(template, &mut expected);
        if plain[..] != expected[..] {
            return Err(format!(
                "{name} eye: shares do not reconstruct the template"
            ));
        }
        println!("{name} eye: parties 0 and 1 reconstruct the masked code exactly");
    }

    if let Some(out) = rest.first() {
        std::fs::write(out, &envelope).map_err(|e| format!("{out}: {e}"))?;
        println!("envelope written to {out}");
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

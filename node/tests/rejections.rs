//! Every intake rejection has its own status and changes nothing stored on
//! any of the three nodes; replays are refused also after a restart; nodes
//! refuse peers with the wrong certificate.

#[path = "support/cluster.rs"]
mod cluster;

use std::sync::Arc;
use std::time::Duration;

use cluster::{http_get, reason, Cluster, Res};
use ocelli_node::batch::NotEvaluated;
use ocelli_node::clock::now_ms;
use prost::Message;
use rand_chacha::rand_core::RngCore;
use sdk_orb::envelope::{encode_payload, hazmat_seal_plaintexts, payload_len, EnvelopeView};
use sdk_orb::keys::OrbSigningKey;
use sdk_orb::{PartyId, PartyShares, RequestType};
use shared_proto::v1::{Envelope, EyeShares, PartyPayload};

/// Re-signs an edited envelope with the cluster's orb key.
fn resign(c: &Cluster, env: &mut Envelope) -> Vec<u8> {
    use ed25519_dalek::Signer;
    let bytes = env.encode_to_vec();
    let view = EnvelopeView::parse(&bytes).expect("parses");
    let key = ed25519_dalek::SigningKey::from_bytes(&c.orb.to_bytes());
    env.signature = key.sign(&view.digest().0).to_bytes().to_vec();
    env.encode_to_vec()
}

/// Slots 1 and 2 carry payloads written for parties 2 and 1 (sealed to the
/// slot's key, so they decrypt); slot 0 is correct.
fn wrong_party_envelope(c: &mut Cluster) -> Vec<u8> {
    let meta = c.meta(RequestType::Uniqueness, 0, now_ms());
    let zero = PartyShares::zero();
    let mut pts: Vec<Vec<u8>> = Vec::new();
    for (slot, writer) in [(0u8, 0u8), (1, 2), (2, 1)] {
        let slot = PartyId::try_from(slot).expect("party");
        let writer = PartyId::try_from(writer).expect("party");
        let mut buf = vec![0u8; payload_len(writer)];
        let n = encode_payload(writer, &meta.request_id, &zero, &mut buf).expect("encode");
        assert_eq!(n, payload_len(slot));
        pts.push(buf);
    }
    let mut out = vec![0u8; sdk_orb::envelope::envelope_len(&meta)];
    let n = hazmat_seal_plaintexts(
        &mut c.rng,
        &meta,
        [&pts[0], &pts[1], &pts[2]],
        &c.node_keys,
        &c.orb,
        &mut out,
    )
    .expect("seal");
    out.truncate(n);
    out
}

fn wrong_share_length_envelope(c: &mut Cluster) -> Vec<u8> {
    let meta = c.meta(RequestType::Uniqueness, 0, now_ms());
    let mut pts = Vec::new();
    for p in 0u8..3 {
        let eye = |code: usize, mask: usize| EyeShares {
            code: vec![1; code],
            mask: vec![1; mask],
        };
        let pl = PartyPayload {
            version: 1,
            party_id: u32::from(p),
            request_id: meta.request_id.0.to_vec(),
            // Same total length, wrong split between code and mask.
            left: Some(eye(25_598, 12_802)),
            right: Some(eye(25_600, 12_800)),
        }
        .encode_to_vec();
        assert_eq!(pl.len(), payload_len(PartyId::try_from(p).expect("party")));
        pts.push(pl);
    }
    let mut out = vec![0u8; sdk_orb::envelope::envelope_len(&meta)];
    let n = hazmat_seal_plaintexts(
        &mut c.rng,
        &meta,
        [&pts[0], &pts[1], &pts[2]],
        &c.node_keys,
        &c.orb,
        &mut out,
    )
    .expect("seal");
    out.truncate(n);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_rejection_has_its_own_status_and_changes_nothing() -> Res {
    let mut c = Cluster::start(Arc::new(NotEvaluated)).await?;
    // One accepted request first, so the stores are not empty.
    let first = c.envelope();
    for r in c.submit_all(&first).await {
        r?;
    }
    c.wait_drained(Duration::from_secs(20)).await?;

    let mut cases: Vec<(&str, Vec<u8>, tonic::Code, &str)> = Vec::new();
    // Unknown orb key.
    {
        let stranger = OrbSigningKey::generate(&mut c.rng);
        let meta = c.meta(RequestType::Uniqueness, 0, now_ms());
        let left = sdk_orb::template::random(&mut c.rng, 0.1);
        let right = sdk_orb::template::random(&mut c.rng, 0.1);
        let env = sdk_orb::envelope::seal_envelope_to_vec(
            &mut c.rng,
            &meta,
            &left,
            &right,
            &c.node_keys,
            &stranger,
        )?;
        cases.push((
            "unknown orb key",
            env,
            tonic::Code::PermissionDenied,
            "unknown_orb_key",
        ));
    }
    // Bad signature.
    {
        let mut e = Envelope::decode(c.envelope().as_slice())?;
        e.signature[10] ^= 1;
        cases.push((
            "bad signature",
            e.encode_to_vec(),
            tonic::Code::Unauthenticated,
            "bad_signature",
        ));
    }
    // Stale timestamp.
    {
        let meta = c.meta(RequestType::Uniqueness, 0, now_ms() - 3_600_000);
        let env = c.seal(&meta);
        cases.push((
            "stale timestamp",
            env,
            tonic::Code::OutOfRange,
            "stale_timestamp",
        ));
    }
    // Replayed request id (the first envelope again).
    cases.push((
        "replay",
        first.clone(),
        tonic::Code::AlreadyExists,
        "replay",
    ));
    // Ciphertexts in the wrong party's slots (slots 1 and 2 swapped).
    {
        let mut e = Envelope::decode(c.envelope().as_slice())?;
        e.payloads.swap(1, 2);
        cases.push((
            "ciphertexts in the wrong slots",
            e.encode_to_vec(),
            tonic::Code::FailedPrecondition,
            "wrong_party",
        ));
    }
    // Truncated ciphertext.
    {
        let mut e = Envelope::decode(c.envelope().as_slice())?;
        for p in &mut e.payloads {
            p.ciphertext.truncate(p.ciphertext.len() - 100);
        }
        cases.push((
            "truncated ciphertext",
            e.encode_to_vec(),
            tonic::Code::InvalidArgument,
            "bad_length",
        ));
    }
    // Bit-flipped ciphertext, validly re-signed.
    {
        let mut e = Envelope::decode(c.envelope().as_slice())?;
        for p in &mut e.payloads {
            p.ciphertext[1000] ^= 0x20;
        }
        let env = resign(&c, &mut e);
        cases.push((
            "bit-flipped ciphertext",
            env,
            tonic::Code::DataLoss,
            "decryption_failed",
        ));
    }
    // Wrong share lengths inside a valid ciphertext.
    let ws = wrong_share_length_envelope(&mut c);
    cases.push((
        "wrong share lengths",
        ws,
        tonic::Code::InvalidArgument,
        "bad_shares",
    ));
    // Oversized.
    {
        let mut env = c.envelope();
        env.extend(std::iter::repeat_n(0u8, 100_000));
        cases.push((
            "oversized",
            env,
            tonic::Code::ResourceExhausted,
            "oversized",
        ));
    }
    // Garbage.
    {
        let mut g = vec![0u8; 4096];
        c.rng.fill_bytes(&mut g);
        cases.push(("garbage", g, tonic::Code::InvalidArgument, "malformed"));
    }

    let mut seen = std::collections::HashSet::new();
    for (name, env, code, why) in &cases {
        assert!(seen.insert((*code, *why)), "{name}: status not distinct");
        let before = c.fingerprints();
        for (i, r) in c.submit_all(env).await.into_iter().enumerate() {
            let s = r.err().ok_or(format!("{name}: node {i} accepted"))?;
            assert_eq!(s.code(), *code, "{name}: node {i}: {s:?}");
            assert_eq!(reason(&s), *why, "{name}: node {i}");
            assert!(!s.message().is_empty());
        }
        // Give any (wrong) background work a moment, then compare.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(before, c.fingerprints(), "{name}: a store changed");
        for i in 0..3 {
            assert!(
                c.state(i).metrics().intake_count(why) >= 1,
                "{name}: not counted"
            );
        }
    }
    // A payload that decrypts but was written for another party: refused by
    // parties 1 and 2 (whose slots carry it), so it is sent to them only.
    {
        let env = wrong_party_envelope(&mut c);
        let before = c.fingerprints();
        for i in [1, 2] {
            let s = c
                .client(i)
                .orb
                .submit(shared_proto::v1::SubmitRequest {
                    envelope: env.clone(),
                    or_serial_ids: Vec::new(),
                })
                .await
                .err()
                .ok_or("wrong-party payload accepted")?;
            assert_eq!(s.code(), tonic::Code::FailedPrecondition, "{s:?}");
            assert_eq!(reason(&s), "wrong_party");
        }
        assert_eq!(before, c.fingerprints());
    }
    // The metrics endpoint shows them.
    let body = http_get(c.configs[0].listen.metrics, "/metrics").await?;
    assert!(
        body.contains("ocelli_intake_total{status=\"bad_signature\",party=\"0\"} 1"),
        "{body}"
    );
    c.wait_ready(Duration::from_secs(10)).await?;
    assert!(http_get(c.configs[1].listen.metrics, "/readyz")
        .await?
        .contains("200 OK"));
    c.stop_all().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_is_refused_after_a_restart() -> Res {
    let mut c = Cluster::start(Arc::new(NotEvaluated)).await?;
    // Answered on all three.
    let done = c.envelope();
    for r in c.submit_all(&done).await {
        r?;
    }
    c.wait_drained(Duration::from_secs(20)).await?;
    // Held by node 1 only (still pending there).
    let pending = c.envelope();
    c.client(1)
        .orb
        .submit(shared_proto::v1::SubmitRequest {
            envelope: pending.clone(),
            or_serial_ids: Vec::new(),
        })
        .await?;
    c.restart_node(1).await?;
    assert_eq!(c.state(1).pending_len(), 1, "pending request requeued");
    for env in [&done, &pending] {
        let before = c.fingerprints();
        let s = c
            .client(1)
            .orb
            .submit(shared_proto::v1::SubmitRequest {
                envelope: env.clone(),
                or_serial_ids: Vec::new(),
            })
            .await
            .err()
            .ok_or("replay accepted after restart")?;
        assert_eq!(s.code(), tonic::Code::AlreadyExists);
        assert_eq!(reason(&s), "replay");
        assert_eq!(before, c.fingerprints());
    }
    c.stop_all().await?;
    Ok(())
}

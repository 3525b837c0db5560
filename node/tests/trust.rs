//! Issue 12, one test per finding: who may read results, which outcomes a node signs, how
//! time-outs and undecryptable requests are decided, and what a round message may carry.
//! Three real nodes over real TLS wherever the finding is about the service.

#[path = "support/cluster.rs"]
mod cluster;

use std::sync::Arc;
use std::time::Duration;

use cluster::{Cluster, Res};
use ocelli_node::batch::{DangerEnrolEverythingForTests, NotEvaluated};
use ocelli_node::client::agree;
use ocelli_node::config::{
    max_pass_comparisons_allowed, ConfigError, NodeConfig, PEER_MESSAGE_CAP,
};
use ocelli_node::keys::{keygen, sample_config, KeygenOptions};
use ocelli_node::tls::NodeTls;
use sdk_orb::envelope::EnvelopeView;
use sdk_orb::EnvelopeError;
use shared_proto::v1::peer_service_client::PeerServiceClient;
use shared_proto::v1::{GetResultRequest, SignedResult};

/// Finding 5: the pass size the docs recommended (16,777,216) is refused when the config is
/// validated, with the largest allowed value in the error; at the largest allowed value the
/// largest round message of a batch of `batch.max_size` requests crosses a real node-to-node
/// link in one frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn largest_pass_fits_messages() -> Res {
    let mut cfg = NodeConfig::from_toml(&sample_config(0, 1))?;
    cfg.matching.max_pass_comparisons = 16_777_216;
    match cfg.validate() {
        Err(ConfigError::PassTooLarge { allowed, .. }) => {
            assert_eq!(allowed, max_pass_comparisons_allowed())
        }
        other => return Err(format!("16,777,216 comparisons per pass accepted: {other:?}").into()),
    }
    let allowed = max_pass_comparisons_allowed();
    cfg.matching.max_pass_comparisons = allowed;
    cfg.validate()?;
    cfg.matching.max_pass_comparisons = allowed + 62 * 64;
    assert!(matches!(
        cfg.validate(),
        Err(ConfigError::PassTooLarge { .. })
    ));

    let mut c = Cluster::start_with(Arc::new(NotEvaluated), &|c| {
        c.matching.max_pass_comparisons = allowed;
    })
    .await?;
    let pipeline = ocelli_mpc::pipeline::PipelineConfig {
        max_pass_comparisons: allowed,
        ..ocelli_mpc::pipeline::PipelineConfig::with_threshold(0.345)
    };
    let size = pipeline.largest_message_bytes(c.configs[0].batch.max_size);
    assert!(size > 60 << 20, "the bound is tight: {size}");
    let timeout = Duration::from_secs(10);
    let tls = NodeTls::load(&c.configs[0])?;
    let cfg1 = tls.peer_clients.get(&1).ok_or("no client")?.clone();
    let ch = ocelli_node::tls::channel(c.configs[1].listen.peer, "127.0.0.1", cfg1, timeout)?;
    let dialer = ocelli_node::links::dial(
        &PeerServiceClient::new(ch).max_encoding_message_size(PEER_MESSAGE_CAP),
        77,
    )
    .await?;
    let acceptor = c.state(1).links.accept(77, 0, timeout).await?;
    let got = tokio::task::spawn_blocking(move || {
        let sent = (dialer.send)(vec![0xA5; size]);
        let got = acceptor.recv.recv_timeout(Duration::from_secs(60));
        (sent, got.map(|m| m.len()))
    })
    .await?;
    assert!(got.0, "send failed");
    assert_eq!(got.1.map_err(|e| e.to_string())?, size);
    c.stop_all().await?;
    Ok(())
}

/// Three results of `id`, fetched from the three nodes.
async fn results_of(c: &Cluster, id: &[u8; 16]) -> Res<Vec<SignedResult>> {
    let mut out = Vec::new();
    for i in 0..3 {
        let r = c
            .client(i)
            .orb
            .get_result(GetResultRequest {
                request_id: id.to_vec(),
            })
            .await?;
        out.push(r.into_inner());
    }
    Ok(out)
}

/// The request id of an envelope.
fn id_of(env: &[u8]) -> Res<[u8; 16]> {
    Ok(EnvelopeView::parse(env)
        .map_err(|e| format!("{e:?}"))?
        .request_id()
        .0)
}

/// Finding 6: three validly signed, identical results of another request are refused by the
/// client: a node (or anyone between the orb and the nodes) cannot answer one request with
/// another's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_checks_result_request_id() -> Res {
    let mut c = Cluster::start(Arc::new(DangerEnrolEverythingForTests)).await?;
    let a = c.envelope();
    let b = c.envelope();
    for env in [&a, &b] {
        for r in c.submit_all(env).await {
            r?;
        }
    }
    c.wait_drained(Duration::from_secs(20)).await?;
    let (ia, ib) = (id_of(&a)?, id_of(&b)?);
    let keys = [0, 1, 2].map(|i| c.state(i).result_verifying_key());
    let ra = results_of(&c, &ia).await?;
    let rb = results_of(&c, &ib).await?;
    assert_eq!(agree(&ra, &keys, &ia)?.request_id, ia.to_vec());
    assert_eq!(agree(&rb, &keys, &ib)?.request_id, ib.to_vec());
    assert_eq!(
        agree(&rb, &keys, &ia).err(),
        Some("the result is for another request")
    );
    c.stop_all().await?;
    Ok(())
}

/// Reads a varint at `at`; returns it and the position after it.
fn varint(b: &[u8], mut at: usize) -> (u64, usize) {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let x = b[at];
        v |= u64::from(x & 0x7f) << shift;
        at += 1;
        if x < 0x80 {
            return (v, at);
        }
        shift += 7;
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Re-encodes a canonical envelope with `extra` inserted after top-level field `after`, or,
/// with `in_payload`, at the start of the first sealed payload (party 0's).
fn with_explicit_zero(env: &[u8], after: u64, extra: &[u8], in_payload: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut done = false;
    while at < env.len() {
        let start = at;
        let (key, next) = varint(env, at);
        let (field, wire) = (key >> 3, key & 7);
        at = next;
        if wire == 0 {
            at = varint(env, at).1;
        } else {
            let (len, body) = varint(env, at);
            at = body + len as usize;
            if in_payload && field == 8 && !done {
                let mut inner = extra.to_vec();
                inner.extend_from_slice(&env[body..at]);
                put_varint(&mut out, key);
                put_varint(&mut out, inner.len() as u64);
                out.extend_from_slice(&inner);
                done = true;
                continue;
            }
        }
        out.extend_from_slice(&env[start..at]);
        if !in_payload && field == after && !done {
            out.extend_from_slice(extra);
            done = true;
        }
    }
    out
}

/// Finding 6: an explicit zero `serial_id` (field 5) or `party_id` (party 0's sealed payload)
/// gives a validly signed envelope a second encoding; every node refuses it as malformed,
/// and the SDK parser refuses it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelope_zero_fields_rejected() -> Res {
    let mut c = Cluster::start(Arc::new(NotEvaluated)).await?;
    let serial = {
        let env = c.envelope();
        with_explicit_zero(&env, 4, &[0x28, 0x00], false)
    };
    let party = {
        let env = c.envelope();
        with_explicit_zero(&env, 0, &[0x08, 0x00], true)
    };
    for (name, env) in [("serial_id", &serial), ("party_id", &party)] {
        assert_eq!(
            EnvelopeView::parse(env).err(),
            Some(EnvelopeError::Malformed(if name == "serial_id" {
                "explicit zero serial_id"
            } else {
                "explicit zero party_id"
            })),
            "{name}"
        );
        for (i, r) in c.submit_all(env).await.into_iter().enumerate() {
            let s = r.err().ok_or(format!("{name}: node {i} accepted"))?;
            assert_eq!(cluster::reason(&s), "malformed", "{name}: node {i}");
        }
    }
    assert!(c.summaries().iter().all(|s| s.requests.is_empty()));
    c.stop_all().await?;
    Ok(())
}

/// Finding 6: `keygen --force` over an existing, world-readable key file leaves it 0600.
#[test]
fn keygen_force_makes_existing_key_files_private() -> Res {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir()?;
    let out = keygen(&KeygenOptions::local(dir.path().join("keys")))?;
    let key = out.orb_signing_key();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644))?;
    let mut opts = KeygenOptions::local(dir.path().join("keys"));
    opts.force = true;
    keygen(&opts)?;
    let mode = std::fs::metadata(&key)?.permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
    Ok(())
}

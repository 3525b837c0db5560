//! What each role can and cannot do (docs/threat-model.md): who may read results, which
//! outcomes a node signs and applies, how time-outs and undecryptable requests are decided,
//! key rotations, what a stranger's connections can hold, and what a round message may carry.
//! Three real nodes over real TLS wherever the behaviour is the service's.

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/trust.rs"]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cluster::{Cluster, Res};
use ocelli_node::agreement::batch_digest;
use ocelli_node::batch::{DangerEnrolEverythingForTests, NotEvaluated};
use ocelli_node::client::{agree, OrbClient};
use ocelli_node::config::{
    max_pass_comparisons_allowed, ConfigError, NodeConfig, PEER_MESSAGE_CAP,
};
use ocelli_node::keys::{keygen, sample_config, KeygenOptions};
use ocelli_node::links::MpcDialer;
use ocelli_node::tls::NodeTls;
use prost::Message;
use rand_chacha::rand_core::SeedableRng;
use sdk_orb::envelope::EnvelopeView;
use sdk_orb::{EnvelopeError, PartyId};
use shared_proto::v1::{
    recorded_outcome, BatchCommit, GetResultRequest, HealthCheckRequest, NodeResult,
    RecordedOutcome, ResultStatus, StreamResultsRequest, SubmitRequest,
};
use support::*;
use tokio_stream::StreamExt;

/// The pass size the docs recommended (16,777,216) is refused when the config is
/// validated, with the largest allowed value in the error; at the largest allowed value the
/// largest round message of a batch of `batch.max_size` requests crosses a real node-to-node
/// link in one frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn largest_pass_fits_messages() -> Res {
    let mut cfg = NodeConfig::from_toml(&sample_config(PartyId::ALL[0], 1)?)?;
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
    let cfg1 = tls.peer_clients.get(&PartyId::ALL[1]).ok_or("no client")?;
    let dialer = MpcDialer::new(
        PartyId::ALL[1],
        c.configs[1].listen.peer,
        "127.0.0.1",
        cfg1,
        timeout,
    )?
    .dial(77)
    .await?;
    let acceptor = c
        .state(1)
        .links
        .accept(77, PartyId::ALL[0], timeout)
        .await?;
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

/// Three validly signed, identical results of another request are refused by the
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

/// An explicit zero `serial_id` (field 5) or `party_id` (party 0's sealed payload)
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

/// `keygen --force` over an existing, world-readable key file leaves it 0600.
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

/// A caller holding only the CA certificate gets UNAUTHENTICATED and no data from
/// every call of the orb API (submit, result, stream, health); one presenting a CA-signed
/// certificate that is not a configured orb client (a node's) does not get past the
/// handshake; the enrolled count is on the metrics port, not in Health.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stranger_reads_nothing() -> Res {
    let mut c = Cluster::start(Arc::new(DangerEnrolEverythingForTests)).await?;
    let env = c.envelope();
    let id = id_of(&env)?;
    for r in c.submit_all(&env).await {
        r?;
    }
    c.wait_drained(Duration::from_secs(20)).await?;
    for i in 0..3 {
        let mut s = c.stranger(i);
        let submitted = s
            .orb
            .submit(SubmitRequest {
                envelope: c.envelope(),
                or_serial_ids: Vec::new(),
            })
            .await;
        assert_eq!(code(submitted), tonic::Code::Unauthenticated, "node {i}");
        let got = s
            .orb
            .get_result(GetResultRequest {
                request_id: id.to_vec(),
            })
            .await;
        assert_eq!(code(got), tonic::Code::Unauthenticated, "node {i}");
        let unknown = s
            .orb
            .get_result(GetResultRequest {
                request_id: vec![9; 16],
            })
            .await;
        assert_eq!(code(unknown), tonic::Code::Unauthenticated, "node {i}");
        let streamed = s.orb.stream_results(StreamResultsRequest::default()).await;
        match streamed {
            Err(e) => assert_eq!(e.code(), tonic::Code::Unauthenticated, "node {i}"),
            Ok(mut stream) => {
                let first = stream.get_mut().next().await;
                return Err(format!("node {i} streamed to a stranger: {first:?}").into());
            }
        }
        let health = s.health.check(HealthCheckRequest {}).await;
        assert_eq!(code(health), tonic::Code::Unauthenticated, "node {i}");

        // A node's own certificate is CA-signed but no orb client's: refused in the handshake.
        let party = c.keys.dir.join(format!("party{}", (i + 1) % 3));
        let mut node_cert = c.client_as(i, &party);
        let r = node_cert
            .health
            .check(HealthCheckRequest {})
            .await
            .err()
            .ok_or(format!("node {i} answered a node certificate"))?;
        assert_ne!(r.code(), tonic::Code::Ok);

        // Health for a gateway: no enrolled count; that is the operator metric.
        let h = c.client(i).health.check(HealthCheckRequest {}).await?;
        assert!(h.into_inner().ready);
        let metrics = http_get(c.configs[i].listen.metrics, "/metrics").await?;
        assert!(
            metrics.contains(&format!("ocelli_store_enrolled{{party=\"{i}\"}} 1")),
            "node {i}: {metrics}"
        );
    }
    c.stop_all().await?;
    Ok(())
}

/// A gateway reads the results of the requests it submitted, and nothing of
/// another gateway's (NOT_FOUND, as for an unknown id, pending or final; streamed, see
/// `foreign_and_unknown_ids_answer_alike`), nor the stream of every result; the results
/// consumer reads and streams every result but submits nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_reads_only_its_own_results() -> Res {
    let mut c = Cluster::start(Arc::new(DangerEnrolEverythingForTests)).await?;
    let g0: Vec<OrbClient> = (0..3).map(|i| c.client_as(i, &c.keys.gateway(0))).collect();
    let g1: Vec<OrbClient> = (0..3).map(|i| c.client_as(i, &c.keys.gateway(1))).collect();
    let rc: Vec<OrbClient> = (0..3)
        .map(|i| c.client_as(i, &c.keys.results_consumer()))
        .collect();
    let (a, b) = (c.envelope(), c.envelope());
    let (ia, ib) = (id_of(&a)?, id_of(&b)?);
    submit_via(&g0, &a).await?;
    submit_via(&g1, &b).await?;
    let refused = rc[0]
        .orb
        .clone()
        .submit(SubmitRequest {
            envelope: c.envelope(),
            or_serial_ids: Vec::new(),
        })
        .await;
    assert_eq!(code(refused), tonic::Code::PermissionDenied);
    c.wait_drained(Duration::from_secs(20)).await?;
    let get = |client: &OrbClient, id: [u8; 16]| {
        let mut o = client.orb.clone();
        async move {
            o.get_result(GetResultRequest {
                request_id: id.to_vec(),
            })
            .await
        }
    };
    for i in 0..3 {
        assert_eq!(code(get(&g0[i], ia).await), tonic::Code::Ok, "node {i}");
        assert_eq!(code(get(&g1[i], ib).await), tonic::Code::Ok, "node {i}");
        assert_eq!(
            code(get(&g0[i], ib).await),
            tonic::Code::NotFound,
            "node {i}"
        );
        assert_eq!(
            code(get(&g1[i], ia).await),
            tonic::Code::NotFound,
            "node {i}"
        );
        assert_eq!(code(get(&rc[i], ia).await), tonic::Code::Ok, "node {i}");
        assert_eq!(code(get(&rc[i], ib).await), tonic::Code::Ok, "node {i}");
        let all = g0[i]
            .orb
            .clone()
            .stream_results(StreamResultsRequest::default())
            .await;
        assert_eq!(code(all), tonic::Code::PermissionDenied, "node {i}");
        let mut own = g0[i]
            .orb
            .clone()
            .stream_results(StreamResultsRequest {
                request_ids: vec![ia.to_vec()],
            })
            .await?
            .into_inner();
        let r = own.next().await.ok_or("no result")??;
        assert_eq!(NodeResult::decode(r.result.as_slice())?.request_id, ia);
    }
    // The results consumer streams every new result, whoever submitted it.
    let mut stream = rc[1]
        .orb
        .clone()
        .stream_results(StreamResultsRequest::default())
        .await?
        .into_inner();
    let d = c.envelope();
    submit_via(&g1, &d).await?;
    let r = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await?
        .ok_or("stream ended")??;
    assert_eq!(
        NodeResult::decode(r.result.as_slice())?.request_id,
        id_of(&d)?
    );
    c.stop_all().await?;
    Ok(())
}

/// A node that cannot open pending payloads (its HPKE key was rotated without
/// keeping the old one) votes so; the requests (a deletion and an enrolment) get the same
/// signed UNOPENABLE result on all three nodes, nothing is deleted or enrolled anywhere, the
/// stores stay identical, and the next batch runs normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecryptable_request_fails_identically() -> Res {
    let mut c = Cluster::start(Arc::new(DangerEnrolEverythingForTests)).await?;
    let (deletion, enrol) = pending_deletion_and_enrolment(&mut c).await?;
    let keys = rotate_hpke(&mut c, 2, false).await?;
    party0_batches(&mut c, true).await?;
    c.wait_drained(Duration::from_secs(20)).await?;
    for id in [deletion, enrol] {
        assert_eq!(agreed_status(&c, &id).await?, ResultStatus::Unopenable);
    }
    let s = c.assert_stores_agree();
    assert_eq!(s.serials, vec![1], "the deletion changed nothing");
    // Sealed to the new key, the next request is evaluated on all three.
    c.node_keys = keys;
    let next = c.envelope();
    for r in c.submit_all(&next).await {
        r?;
    }
    c.wait_drained(Duration::from_secs(20)).await?;
    assert_eq!(
        agreed_status(&c, &id_of(&next)?).await?,
        ResultStatus::UniqueEnrolled
    );
    c.stop_all().await?;
    Ok(())
}

/// The documented HPKE rotation with envelopes pending: the node keeps the old key
/// as `keys.hpke_previous_secret`, so the pending deletion and enrolment run as usual on all
/// three nodes; a new envelope sealed to the old key is refused (`decryption_failed`), one
/// sealed to the new key is accepted and evaluated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_rotation_with_pending_envelopes() -> Res {
    let mut c = Cluster::start(Arc::new(DangerEnrolEverythingForTests)).await?;
    let (deletion, enrol) = pending_deletion_and_enrolment(&mut c).await?;
    let keys = rotate_hpke(&mut c, 2, true).await?;
    party0_batches(&mut c, true).await?;
    c.wait_drained(Duration::from_secs(20)).await?;
    assert_eq!(agreed_status(&c, &deletion).await?, ResultStatus::Deleted);
    assert_eq!(
        agreed_status(&c, &enrol).await?,
        ResultStatus::UniqueEnrolled
    );
    let s = c.assert_stores_agree();
    assert_eq!(s.serials, vec![2]);
    let stale = c.envelope();
    let refused = c
        .submit_all(&stale)
        .await
        .remove(2)
        .err()
        .ok_or("stale key accepted")?;
    assert_eq!(cluster::reason(&refused), "decryption_failed");
    c.node_keys = keys;
    let fresh = c.envelope();
    for r in c.submit_all(&fresh).await {
        r?;
    }
    // The stale envelope is held by nodes 0 and 1 only: it times out; the fresh one enrols.
    c.wait_drained(Duration::from_secs(20)).await?;
    assert_eq!(
        agreed_status(&c, &id_of(&fresh)?).await?,
        ResultStatus::UniqueEnrolled
    );
    c.stop_all().await?;
    Ok(())
}

/// A batch that takes longer than twice the request timeout, with a request
/// arriving meanwhile: no node times that request out on its own; all three answer it
/// identically (enrolled in the next batch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_batch_does_not_split_results() -> Res {
    let ev = Arc::new(SlowForTests {
        slow: AtomicBool::new(true),
        // Past 2 x request_timeout_ms, after which parties 1 and 2 used to time a request out
        // on their own.
        delay_ms: 6_000,
    });
    let mut c = Cluster::start_with(ev.clone(), &|c| c.batch.request_timeout_ms = 2_000).await?;
    let first = c.envelope();
    submit_everywhere(&c, &first).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during = c.envelope();
    submit_everywhere(&c, &during).await?;
    ev.slow.store(false, Ordering::SeqCst);
    c.wait_drained(Duration::from_secs(30)).await?;
    assert_eq!(
        agreed_status(&c, &id_of(&first)?).await?,
        ResultStatus::UniqueEnrolled
    );
    assert_eq!(
        agreed_status(&c, &id_of(&during)?).await?,
        ResultStatus::UniqueEnrolled
    );
    c.assert_stores_agree();
    c.stop_all().await?;
    Ok(())
}

/// A request party 0 never received is timed out by a committed batch, with the
/// same result on all three nodes (the nodes holding it report it in their votes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_party0_lacks_times_out_in_a_batch() -> Res {
    let mut c = Cluster::start_with(Arc::new(DangerEnrolEverythingForTests), &|c| {
        c.batch.request_timeout_ms = 2_000
    })
    .await?;
    let lacking = c.envelope();
    for i in [1, 2] {
        c.client(i)
            .orb
            .submit(SubmitRequest {
                envelope: lacking.clone(),
                or_serial_ids: Vec::new(),
            })
            .await?;
    }
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    // A batch runs only when party 0 has something to propose.
    let other = c.envelope();
    submit_everywhere(&c, &other).await?;
    c.wait_drained(Duration::from_secs(30)).await?;
    assert_eq!(
        agreed_status(&c, &id_of(&lacking)?).await?,
        ResultStatus::TimedOut
    );
    // The gateway that submitted it reads all three results, party 0's included, though party
    // 0 never received the request.
    let keys = [0, 1, 2].map(|i| c.state(i).result_verifying_key());
    let mut as_gateway = Vec::new();
    for i in 0..3 {
        let r = c
            .client(i)
            .orb
            .get_result(GetResultRequest {
                request_id: id_of(&lacking)?.to_vec(),
            })
            .await?;
        as_gateway.push(r.into_inner());
    }
    let r = agree(&as_gateway, &keys, &id_of(&lacking)?)?;
    assert_eq!(ResultStatus::try_from(r.status)?, ResultStatus::TimedOut);
    assert_eq!(
        agreed_status(&c, &id_of(&other)?).await?,
        ResultStatus::UniqueEnrolled
    );
    c.stop_all().await?;
    Ok(())
}

/// Party 2 goes down after the MPC of a batch the two others then stored, and comes
/// back later than twice the request timeout: it times nothing out on its own, gets the batch
/// replayed, and all three answer both that request and the next one identically.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_after_mpc_catches_up() -> Res {
    let mut c = Cluster::start_with(Arc::new(DangerEnrolEverythingForTests), &|c| {
        c.batch.request_timeout_ms = 2_000
    })
    .await?;
    let missed = party2_misses_finalisation(&mut c).await?;
    c.restart_node(2).await?;
    assert_eq!(c.state(2).store().meta()?.last_applied_batch, 0);
    // Longer than the 2 x request_timeout after which party 2 used to time it out alone.
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let next = c.envelope();
    submit_everywhere(&c, &next).await?;
    c.wait_drained(Duration::from_secs(30)).await?;
    assert_eq!(
        agreed_status(&c, &id_of(&missed)?).await?,
        ResultStatus::UniqueEnrolled
    );
    assert_eq!(
        agreed_status(&c, &id_of(&next)?).await?,
        ResultStatus::UniqueEnrolled
    );
    c.assert_stores_agree();
    c.stop_all().await?;
    Ok(())
}

/// A batch whose MPC only one node completed (a peer died after sending its last message to
/// that node and before sending it to the third) is applied nowhere: no node could ever get
/// the attestations of both others for it. Once the other two are back, the batch runs again
/// and all three agree. Each party in turn is the one that completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_completed_by_one_node_only_runs_again() -> Res {
    for lone in 0..3 {
        let mut c = Cluster::start(Arc::new(DangerEnrolEverythingForTests)).await?;
        let good = std::mem::replace(&mut c.evaluator, Arc::new(FailsForTests));
        for i in (0..3).filter(|&i| i != lone) {
            c.restart_node(i).await?;
        }
        c.evaluator = good;
        let env = c.envelope();
        submit_everywhere(&c, &env).await?;
        // Several commit attempts, each completed by `lone` alone.
        tokio::time::sleep(Duration::from_millis(600)).await;
        for i in 0..3 {
            assert_eq!(
                c.state(i).store().meta()?.last_applied_batch,
                0,
                "party {i} applied a batch only party {lone} computed"
            );
        }
        for i in (0..3).filter(|&i| i != lone) {
            c.restart_node(i).await?;
        }
        c.wait_drained(Duration::from_secs(30)).await?;
        assert_eq!(
            agreed_status(&c, &id_of(&env)?).await?,
            ResultStatus::UniqueEnrolled
        );
        c.assert_stores_agree();
        c.stop_all().await?;
    }
    Ok(())
}

/// Party 0 sends party 2 a commit that claims recorded outcomes (an invented
/// match for a request only party 2 holds): unsigned, signed by party 0 alone, or with a
/// "party 1" signature party 0 made itself. Party 2 refuses each (PERMISSION_DENIED), logs and
/// counts it, stores nothing; the request later runs normally and all three agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_commit_from_coordinator_is_refused() -> Res {
    let mut c = Cluster::start(Arc::new(DangerEnrolEverythingForTests)).await?;
    let enrolled = c.envelope();
    submit_everywhere(&c, &enrolled).await?;
    c.wait_drained(Duration::from_secs(20)).await?;
    let target = c.envelope();
    let id = id_of(&target)?;
    c.client(2)
        .orb
        .submit(SubmitRequest {
            envelope: target.clone(),
            or_serial_ids: Vec::new(),
        })
        .await?;
    let meta = c.state(2).store().meta()?;
    let held = c
        .state(2)
        .store()
        .request(&ocelli_node::ids::RequestId(id))?
        .ok_or("not held")?;
    let mut forged = BatchCommit {
        batch_id: meta.last_applied_batch + 1,
        request_ids: vec![id.to_vec()],
        next_serial_id: meta.next_serial,
        mpc_session: 1,
        outcomes_recorded: true,
        outcomes: vec![RecordedOutcome {
            kind: recorded_outcome::Kind::Match as i32,
            matched_serial_ids: vec![1],
            matched_earlier: Vec::new(),
            mirror_attack: false,
        }],
        ..BatchCommit::default()
    };
    let digest = batch_digest(
        &forged,
        std::slice::from_ref(&held.digest),
        &forged.outcomes,
    );
    let variants = [
        Vec::new(),
        vec![attest_as(&c, PartyId::ALL[0], PartyId::ALL[0], &digest)?],
        vec![
            attest_as(&c, PartyId::ALL[0], PartyId::ALL[0], &digest)?,
            attest_as(&c, PartyId::ALL[1], PartyId::ALL[0], &digest)?,
        ],
    ];
    let mut as_party0 = peer_client(&c, 0, 2)?;
    for (k, signatures) in variants.into_iter().enumerate() {
        forged.signatures = signatures;
        let r = as_party0.commit_batch(forged.clone()).await;
        assert_eq!(code(r), tonic::Code::PermissionDenied, "variant {k}");
    }
    assert_eq!(refused_unattested(&c, 2).await?, 3);
    assert_eq!(
        c.state(2).store().meta()?.last_applied_batch,
        meta.last_applied_batch
    );
    assert_eq!(c.state(2).pending_len(), 1, "nothing applied");
    // The request, once all three hold it, is evaluated and answered alike.
    for i in [0, 1] {
        c.client(i)
            .orb
            .submit(SubmitRequest {
                envelope: target.clone(),
                or_serial_ids: Vec::new(),
            })
            .await?;
    }
    c.wait_drained(Duration::from_secs(20)).await?;
    assert_eq!(agreed_status(&c, &id).await?, ResultStatus::UniqueEnrolled);
    c.assert_stores_agree();
    c.stop_all().await?;
    Ok(())
}

/// Party 2 missed a batch (down after the MPC and its attestation). A replay of it with altered
/// outcomes (keeping the real attestations, or re-signed by party 0 alone) or without party
/// 1's attestation is refused, logged and counted; the genuine replay then brings party 2 to
/// the same state as the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_catch_up_is_refused() -> Res {
    let mut c = Cluster::start_with(Arc::new(DangerEnrolEverythingForTests), &|c| {
        c.batch.request_timeout_ms = 2_000
    })
    .await?;
    let missed = party2_misses_finalisation(&mut c).await?;
    c.restart_node(2).await?;
    // Applied only once all three attested it: party 0 logs the three attestations.
    let logged = c.state(0).store().batch(1)?.ok_or("no batch 1")?;
    let genuine = BatchCommit::decode(logged.commit.as_slice())?;
    assert_eq!(genuine.signatures.len(), 3);

    let mut altered = genuine.clone();
    altered.outcomes = vec![RecordedOutcome {
        kind: recorded_outcome::Kind::Match as i32,
        matched_serial_ids: vec![7],
        matched_earlier: Vec::new(),
        mirror_attack: false,
    }];
    let held = c
        .state(2)
        .store()
        .request(&ocelli_node::ids::RequestId(id_of(&missed)?))?
        .ok_or("not held")?;
    let digest = batch_digest(&altered, &[held.digest], &altered.outcomes);
    let mut resigned = altered.clone();
    resigned.signatures = vec![
        attest_as(&c, PartyId::ALL[0], PartyId::ALL[0], &digest)?,
        genuine
            .signatures
            .iter()
            .find(|s| s.party_id == 1)
            .ok_or("no party 1 attestation")?
            .clone(),
    ];
    let mut partial = genuine.clone();
    partial.signatures.retain(|s| s.party_id == 0);
    let mut as_party0 = peer_client(&c, 0, 2)?;
    for (name, forged) in [
        ("altered", altered),
        ("re-signed by party 0", resigned),
        ("partially signed", partial),
    ] {
        let r = as_party0.commit_batch(forged).await;
        assert_eq!(code(r), tonic::Code::PermissionDenied, "{name}");
    }
    assert_eq!(refused_unattested(&c, 2).await?, 3);
    assert_eq!(c.state(2).store().meta()?.last_applied_batch, 0);

    let next = c.envelope();
    submit_everywhere(&c, &next).await?;
    c.wait_drained(Duration::from_secs(30)).await?;
    assert_eq!(
        agreed_status(&c, &id_of(&missed)?).await?,
        ResultStatus::UniqueEnrolled
    );
    assert_eq!(
        agreed_status(&c, &id_of(&next)?).await?,
        ResultStatus::UniqueEnrolled
    );
    c.assert_stores_agree();
    c.stop_all().await?;
    Ok(())
}

/// The full computation: one batch whose database pass is exactly the largest the
/// node allows (33 uniqueness requests against 8,199 entries: 270,567 pairs, padded to
/// 16,776,704 comparisons), through the three-party pipeline in memory. It succeeds and no
/// round message exceeds what a peer message carries. Ignored by default: several GB and
/// minutes in a debug build; run with
/// `cargo test --release -p ocelli-node --test trust -- --ignored a_batch_at_the_largest_pass`.
#[test]
#[ignore = "large: run in release (see the doc comment)"]
fn a_batch_at_the_largest_pass_succeeds() {
    use ocelli_mpc::pipeline::{evaluate, pass_comparisons, PipelineConfig, PipelineRequest};
    use rand_chacha::rand_core::SeedableRng;
    let allowed = max_pass_comparisons_allowed();
    let requests = 33usize;
    let entries = allowed / (requests * 62);
    assert_eq!(pass_comparisons(requests * entries), allowed);
    let config = PipelineConfig {
        chunk_entries: 1 << 20,
        max_pass_comparisons: allowed,
        ..PipelineConfig::with_threshold(0.345)
    };
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(12);
    let db: Vec<Box<sdk_orb::PartyShares>> = (0..entries)
        .map(|_| ocelli_mpc::synthetic::random_shares(&mut rng))
        .collect();
    let queries: Vec<Box<sdk_orb::PartyShares>> = (0..requests)
        .map(|_| ocelli_mpc::synthetic::random_shares(&mut rng))
        .collect();
    let started = std::time::Instant::now();
    let out = ocelli_mpc::local::run_three(9, |s| {
        let mut m = ocelli_mpc::MatchDb::new();
        for (d, shares) in db.iter().enumerate() {
            m.push(d as u64 + 1, shares);
        }
        let reqs: Vec<PipelineRequest<'_>> = queries
            .iter()
            .map(|q| PipelineRequest::against_database(q))
            .collect();
        let scratch = ocelli_mpc::scratch::ScratchPool::default();
        evaluate(
            s,
            &ocelli_cpu::CpuEngine::new(),
            &m,
            &reqs,
            &config,
            &scratch,
        )
        .map(|r| r.len())
    });
    let mut largest = 0;
    for (r, _, view) in &out {
        assert_eq!(r.as_ref().ok(), Some(&requests), "the batch failed");
        largest = largest.max(view.iter().map(|(_, m)| m.len()).max().unwrap_or(0));
    }
    eprintln!(
        "largest pass: {allowed} comparisons, largest message {largest} bytes, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        largest,
        ocelli_mpc::pipeline::LARGEST_MESSAGE_BYTES_PER_COMPARISON * allowed
    );
    assert!(largest <= PEER_MESSAGE_CAP - ocelli_node::config::MPC_FRAME_OVERHEAD);
}

/// A stranger cannot hold a node's connections: a TCP connection that never starts its TLS
/// handshake (orb and peer port; or its request, metrics port), and one that completes TLS
/// without a client certificate and then says nothing, are closed by the node within a few
/// seconds (`connections.unauthenticated_timeout_ms`); a stranger's connection is closed soon
/// after its first call is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_connections_are_closed() -> Res {
    let mut c = Cluster::start(Arc::new(NotEvaluated)).await?;
    let timeout = c.configs[0].connections.unauthenticated_timeout();
    let bound = timeout + Duration::from_secs(2);
    let (orb, peer) = (c.configs[0].listen.orb, c.configs[0].listen.peer);
    let silent_orb = tokio::net::TcpStream::connect(orb).await?;
    let silent_peer = tokio::net::TcpStream::connect(peer).await?;
    let silent_metrics = tokio::net::TcpStream::connect(c.configs[0].listen.metrics).await?;
    let no_certificate = tokio_rustls::TlsConnector::from(ocelli_node::tls::orb_client_config(
        &c.keys.ca_cert(),
        None,
    )?)
    .connect(
        ocelli_node::tls::server_name_of("localhost")?,
        tokio::net::TcpStream::connect(orb).await?,
    )
    .await?;
    let (silent_orb, silent_peer, silent_metrics, no_certificate) = tokio::join!(
        closed_within(silent_orb, bound),
        closed_within(silent_peer, bound),
        closed_within(silent_metrics, bound),
        closed_within(no_certificate, bound),
    );
    eprintln!(
        "closed after: silent on the orb port {:?}, on the peer port {:?}, on the metrics port \
         {:?}, TLS without a certificate {:?}",
        silent_orb, silent_peer, silent_metrics, no_certificate
    );
    silent_orb.map_err(|e| format!("silent TCP on the orb port: {e}"))?;
    silent_peer.map_err(|e| format!("silent TCP on the peer port: {e}"))?;
    silent_metrics.map_err(|e| format!("silent TCP on the metrics port: {e}"))?;
    no_certificate.map_err(|e| format!("TLS without a client certificate: {e}"))?;

    // Refused once, the connection goes well before its idle time is up (the client, kept,
    // would hold it open).
    let mut stranger = c.stranger(1);
    let refused = code(stranger.health.check(HealthCheckRequest {}).await);
    assert_eq!(refused, tonic::Code::Unauthenticated);
    let refused_at = std::time::Instant::now();
    let metrics = c.configs[1].listen.metrics;
    let held = || async move {
        let page = http_get(metrics, "/metrics").await?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
            page.lines()
                .find(|l| l.starts_with("ocelli_unauthenticated_connections") && l.contains("orb"))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<u64>().ok()),
        )
    };
    while held().await? != Some(0) {
        assert!(
            refused_at.elapsed() < timeout / 2,
            "a refused stranger's connection is still open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("refused stranger closed after {:?}", refused_at.elapsed());
    drop(stranger);
    c.stop_all().await?;
    Ok(())
}

/// 1,200 idle TCP connections to one node's orb port, whose process may hold 1,024
/// descriptors, do not keep a request from becoming final: the node closes the strangers'
/// connections beyond its caps, and its gateway connection and MPC links still open. Three
/// `ocelli-node serve` processes with the real matching pipeline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_strangers_do_not_stall_batches() -> Res {
    const STRANGERS: usize = 1_200;
    // This process holds the strangers' ends of the connections.
    let limit = ocelli_os::raise_open_files_limit()?;
    if limit.now < STRANGERS as u64 + 200 {
        return Err(format!(
            "needs {} descriptors; the hard limit is {}",
            STRANGERS + 200,
            limit.now
        )
        .into());
    }
    let nodes = NodeProcesses::start(0, 1_024).await?;
    let orb0 = nodes.deployment.configs[0].listen.orb;
    // From another address than the gateway's, as a stranger on the network would be.
    let stranger_addr: std::net::SocketAddr = "127.0.0.2:0".parse()?;
    let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let closed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut strangers = Vec::new();
    for n in 0..STRANGERS {
        // A few at a time, so that they reach the node rather than overflow its listen queue.
        if n % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (opened, closed) = (opened.clone(), closed.clone());
        strangers.push(tokio::spawn(async move {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(stranger_addr)?;
            let connect = tokio::time::timeout(Duration::from_secs(2), socket.connect(orb0));
            if let Ok(Ok(conn)) = connect.await {
                opened.fetch_add(1, Ordering::SeqCst);
                if closed_within(conn, Duration::from_secs(60)).await.is_ok() {
                    closed.fetch_add(1, Ordering::SeqCst);
                }
            }
            Ok::<_, std::io::Error>(())
        }));
    }
    // Until every connection is open, or its attempt gave up.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while opened.load(Ordering::SeqCst) < STRANGERS && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let started = std::time::Instant::now();
    let orb = nodes.deployment.orb()?;
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(5);
    let meta = sdk_orb::envelope::RequestMeta {
        request_id: sdk_orb::RequestId::random(&mut rng),
        request_type: sdk_orb::RequestType::Uniqueness,
        timestamp_ms: ocelli_node::clock::now_ms(),
        serial_id: 0,
        or_policy: false,
    };
    let left = sdk_orb::template::random(&mut rng, 0.1);
    let right = sdk_orb::template::random(&mut rng, 0.1);
    let env = orb.envelope(&mut rng, &meta, &left, &right)?;
    let outcome = async {
        orb.submit(&env).await?;
        orb.result(&meta.request_id, Duration::from_secs(20)).await
    }
    .await;
    let took = started.elapsed();
    let (opened, closed_by_then) = (opened.load(Ordering::SeqCst), closed.load(Ordering::SeqCst));
    let result = outcome.map_err(|e| {
        format!(
            "{e} ({opened} strangers connected, {closed_by_then} closed by the node); party 0's \
             log:\n{}",
            nodes.log_tail(0)
        )
    })?;
    eprintln!(
        "final after {took:?}; {opened} of {STRANGERS} strangers connected, {closed_by_then} \
         closed by the node by then"
    );
    assert_eq!(result.status, ResultStatus::UniqueEnrolled as i32);
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert_eq!(
        opened, STRANGERS,
        "the node left connections in its listen queue"
    );
    for s in strangers {
        s.abort();
    }
    Ok(())
}

/// A `StreamResults` call names at most 1,000 request ids: 1,001 are refused with
/// INVALID_ARGUMENT, 1,000 are accepted and the named result arrives. A client holds at most
/// `connections.max_result_streams_per_client` streams open (RESOURCE_EXHAUSTED beyond), and
/// one it hangs up on is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_results_bounds_its_ids() -> Res {
    use ocelli_node::server::MAX_STREAM_IDS;
    assert_eq!(MAX_STREAM_IDS, 1_000);
    let mut c = Cluster::start_with(Arc::new(DangerEnrolEverythingForTests), &|c| {
        c.connections.max_result_streams_per_client = 2;
    })
    .await?;
    let env = c.envelope();
    let id = id_of(&env)?;
    submit_everywhere(&c, &env).await?;
    let mut ids: Vec<Vec<u8>> = (1..MAX_STREAM_IDS as u32)
        .map(|n| {
            let mut other = [0xEE; 16];
            other[..4].copy_from_slice(&n.to_be_bytes());
            other.to_vec()
        })
        .collect();
    ids.push(id.to_vec());
    let mut gateway = c.client(0).orb;
    let mut too_many = ids.clone();
    too_many.push(vec![0xEF; 16]);
    let refused = gateway
        .stream_results(StreamResultsRequest {
            request_ids: too_many,
        })
        .await;
    assert_eq!(code(refused), tonic::Code::InvalidArgument);
    let mut stream = gateway
        .stream_results(StreamResultsRequest { request_ids: ids })
        .await?
        .into_inner();
    let r = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await?
        .ok_or("stream ended")??;
    assert_eq!(NodeResult::decode(r.result.as_slice())?.request_id, id);

    // The first stream still waits on 999 ids: a second fits, a third does not.
    let unknown = || StreamResultsRequest {
        request_ids: vec![[0x11; 16].to_vec()],
    };
    let second = gateway.stream_results(unknown()).await?;
    let third = gateway.stream_results(unknown()).await;
    assert_eq!(code(third), tonic::Code::ResourceExhausted);
    let other_gateway = c
        .client_as(0, &c.keys.gateway(1))
        .orb
        .stream_results(unknown())
        .await;
    assert_eq!(
        code(other_gateway),
        tonic::Code::Ok,
        "the cap is per client"
    );
    drop((stream, second));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while code(gateway.stream_results(unknown()).await) != tonic::Code::Ok {
        assert!(
            std::time::Instant::now() < deadline,
            "streams the client hung up on are still counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.stop_all().await?;
    Ok(())
}

/// A gateway cannot tell another gateway's request from an unknown one by `StreamResults`:
/// both are waited for and never delivered, and a stream naming one beside its own request
/// delivers its own only. `Submit` names no serial id it refuses in `or_serial_ids`: any
/// unknown serial reads alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_and_unknown_ids_answer_alike() -> Res {
    let mut c = Cluster::start(Arc::new(DangerEnrolEverythingForTests)).await?;
    let g0 = c.client_as(0, &c.keys.gateway(0));
    let g1 = c.client_as(0, &c.keys.gateway(1));
    let (own, foreign) = (c.envelope(), c.envelope());
    submit_everywhere(&c, &own).await?;
    for i in 0..3 {
        submit_via(&[c.client_as(i, &c.keys.gateway(1))], &foreign).await?;
    }
    c.wait_drained(Duration::from_secs(20)).await?;
    let (own, foreign) = (id_of(&own)?, id_of(&foreign)?);
    let quiet = Duration::from_millis(500);
    for named in [vec![foreign.to_vec()], vec![[0x5A; 16].to_vec()]] {
        let mut stream = g0
            .orb
            .clone()
            .stream_results(StreamResultsRequest { request_ids: named })
            .await?
            .into_inner();
        assert!(
            tokio::time::timeout(quiet, stream.next()).await.is_err(),
            "the stream answered"
        );
    }
    let mut both = g0
        .orb
        .clone()
        .stream_results(StreamResultsRequest {
            request_ids: vec![foreign.to_vec(), own.to_vec()],
        })
        .await?
        .into_inner();
    let r = both.next().await.ok_or("stream ended")??;
    assert_eq!(NodeResult::decode(r.result.as_slice())?.request_id, own);
    assert!(tokio::time::timeout(quiet, both.next()).await.is_err());
    // The other gateway streams its own.
    let mut theirs = g1
        .orb
        .clone()
        .stream_results(StreamResultsRequest {
            request_ids: vec![foreign.to_vec()],
        })
        .await?
        .into_inner();
    let r = theirs.next().await.ok_or("stream ended")??;
    assert_eq!(NodeResult::decode(r.result.as_slice())?.request_id, foreign);

    let mut refusals = Vec::new();
    for serial in [7u64, 8] {
        let s = c
            .client(0)
            .orb
            .submit(SubmitRequest {
                envelope: c.envelope(),
                or_serial_ids: vec![serial],
            })
            .await
            .err()
            .ok_or("an unknown serial id was accepted")?;
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert!(
            !s.message().contains(&serial.to_string()),
            "{}",
            s.message()
        );
        refusals.push(s.message().to_owned());
    }
    assert_eq!(refusals[0], refusals[1]);
    c.stop_all().await?;
    Ok(())
}

/// The HPKE key rotation of docs/operations.md, step by step, on the real MPC evaluator: 20
/// people enrolled; party 2 publishes a new key bundle, switches to the new key keeping the
/// old one as `hpke_previous_secret`, and restarts alone; orbs seal to the new bundle. Then 8
/// new people are enrolled as unique, matching nobody, an impostor's re-authentication as
/// serial 1 is refused and the person's own re-capture accepted. Nothing of the MPC depends on
/// the HPKE keys: each session agrees its pairwise seeds afresh and confirms them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hpke_rotation_as_documented_keeps_decisions_right() -> Res {
    use ocelli_mpc::synthetic;
    use rand_core::SeedableRng;
    use sdk_orb::RequestType;

    let mut c = Cluster::start_mpc(&|cfg| {
        cfg.batch.request_timeout_ms = 600_000;
        cfg.batch.commit_timeout_ms = 600_000;
    })
    .await?;
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(36);
    let people: Vec<_> = (0..28)
        .map(|_| (synthetic::eye(&mut rng), synthetic::eye(&mut rng)))
        .collect();
    let submit = |c: &mut Cluster, t: RequestType, serial: u64, p: &(_, _)| {
        let meta = c.meta(t, serial, ocelli_node::clock::now_ms());
        c.seal_person(&meta, &p.0, &p.1)
    };
    let mut enrolled = Vec::new();
    for p in &people[..20] {
        let env = submit(&mut c, RequestType::Uniqueness, 0, p);
        submit_everywhere(&c, &env).await?;
        enrolled.push(id_of(&env)?);
    }
    c.wait_drained(Duration::from_secs(600)).await?;
    for id in &enrolled {
        assert_eq!(agreed_status(&c, id).await?, ResultStatus::UniqueEnrolled);
    }

    c.node_keys = rotate_hpke(&mut c, 2, true).await?;

    let mut fresh = Vec::new();
    for p in &people[20..] {
        let env = submit(&mut c, RequestType::Uniqueness, 0, p);
        submit_everywhere(&c, &env).await?;
        fresh.push(id_of(&env)?);
    }
    let impostor = (synthetic::eye(&mut rng), synthetic::eye(&mut rng));
    let env = submit(&mut c, RequestType::Reauth, 1, &impostor);
    submit_everywhere(&c, &env).await?;
    let impostor_id = id_of(&env)?;
    let recapture = (
        synthetic::recapture(&mut rng, &people[0].0).0,
        synthetic::recapture(&mut rng, &people[0].1).0,
    );
    let env = submit(&mut c, RequestType::Reauth, 1, &recapture);
    submit_everywhere(&c, &env).await?;
    let genuine_id = id_of(&env)?;
    c.wait_drained(Duration::from_secs(600)).await?;

    for id in &fresh {
        assert_eq!(
            agreed_status(&c, id).await?,
            ResultStatus::UniqueEnrolled,
            "a new person after the rotation"
        );
    }
    assert_eq!(
        agreed_status(&c, &impostor_id).await?,
        ResultStatus::ReauthNoMatch
    );
    assert_eq!(
        agreed_status(&c, &genuine_id).await?,
        ResultStatus::ReauthMatch
    );
    c.assert_stores_agree();
    Ok(())
}

/// A coordinator that equivocates: with a reset of serial 1 pending on all three nodes, party 0
/// has party 2 attest commit A (the reset runs) and party 1 attest commit B of the same batch
/// and attempt (the reset recorded as unopenable), then finalises A at party 1 and B at party 2
/// with its own signature and the other peer's genuine one. Each peer refuses the outcomes it
/// did not attest itself, stores nothing, and counts it; once party 0 batches honestly, the
/// batch runs again as a newer attempt and the three stores agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equivocating_coordinator_cannot_split_the_peers() -> Res {
    use ed25519_dalek::Verifier;
    use ocelli_node::keys::batch_signing_message;
    use sdk_orb::RequestType;
    use shared_proto::v1::BatchItem;

    let mut c = Cluster::start(Arc::new(DangerEnrolEverythingForTests)).await?;
    let first = c.envelope();
    submit_everywhere(&c, &first).await?;
    c.wait_drained(Duration::from_secs(20)).await?;
    party0_batches(&mut c, false).await?;
    let meta = c.meta(RequestType::Reset, 1, ocelli_node::clock::now_ms());
    let reset = c.seal(&meta);
    submit_everywhere(&c, &reset).await?;
    let id = id_of(&reset)?;
    let held = c
        .state(1)
        .store()
        .request(&ocelli_node::ids::RequestId(id))?
        .ok_or("not held")?;
    let before = c.state(1).store().meta()?;
    let batch_id = before.last_applied_batch + 1;

    let a = BatchCommit {
        batch_id,
        request_ids: vec![id.to_vec()],
        next_serial_id: before.next_serial,
        mpc_session: 11,
        attempt: 1,
        ..BatchCommit::default()
    };
    let b = BatchCommit {
        batch_id,
        // Party 0 claims it cannot open the reset: only it could say otherwise.
        unopenable: vec![BatchItem {
            request_id: id.to_vec(),
            envelope_digest: held.digest.clone(),
            reported_by: 0b001,
        }],
        next_serial_id: before.next_serial,
        mpc_session: 12,
        attempt: 1,
        ..BatchCommit::default()
    };
    let (mut to1, mut to2) = (peer_client(&c, 0, 1)?, peer_client(&c, 0, 2)?);
    let sig2 = to2
        .commit_batch(a.clone())
        .await?
        .into_inner()
        .signature
        .ok_or("no attestation")?;
    let sig1 = to1
        .commit_batch(b.clone())
        .await?
        .into_inner()
        .signature
        .ok_or("no attestation")?;

    let mut recorded_a = a.clone();
    recorded_a.outcomes_recorded = true;
    recorded_a.outcomes = vec![RecordedOutcome {
        kind: recorded_outcome::Kind::Apply as i32,
        ..RecordedOutcome::default()
    }];
    let digest_a = batch_digest(
        &recorded_a,
        std::slice::from_ref(&held.digest),
        &recorded_a.outcomes,
    );
    let mut recorded_b = b.clone();
    recorded_b.outcomes_recorded = true;
    let digest_b = batch_digest(&recorded_b, &[], &[]);
    // The peers' attestations are genuine: only the coordinator lies.
    for (party, sig, digest) in [(2u8, &sig2, &digest_a), (1, &sig1, &digest_b)] {
        let s = ed25519_dalek::Signature::from_slice(&sig.signature)?;
        c.state(usize::from(party)).result_verifying_key().verify(
            &batch_signing_message(sdk_orb::PartyId::try_from(party)?, digest),
            &s,
        )?;
    }
    recorded_a.signatures = vec![
        attest_as(&c, PartyId::ALL[0], PartyId::ALL[0], &digest_a)?,
        sig2,
    ];
    recorded_b.signatures = vec![
        attest_as(&c, PartyId::ALL[0], PartyId::ALL[0], &digest_b)?,
        sig1,
    ];
    let at1 = to1.commit_batch(recorded_a).await;
    let at2 = to2.commit_batch(recorded_b).await;
    let refused = [&at1, &at2]
        .iter()
        .filter(|r| {
            r.as_ref()
                .is_err_and(|s| s.code() == tonic::Code::PermissionDenied)
        })
        .count();
    assert_eq!(
        refused, 2,
        "each peer applies only the outcomes it attested"
    );
    for i in [1, 2] {
        assert_eq!(
            c.state(i).store().meta()?,
            before,
            "party {i} applied nothing"
        );
        assert_eq!(not_attested_here(&c, i).await?, 1);
    }

    party0_batches(&mut c, true).await?;
    c.wait_drained(Duration::from_secs(20)).await?;
    assert_eq!(agreed_status(&c, &id).await?, ResultStatus::Reset);
    c.assert_stores_agree();
    let logged = c.state(1).store().batch(batch_id)?.ok_or("batch")?;
    assert_eq!(BatchCommit::decode(logged.commit.as_slice())?.attempt, 2);
    c.stop_all().await?;
    Ok(())
}

/// A fresh commit of an attempt not newer than the one a peer last attested for the batch is
/// refused before it is evaluated: no coordinator gets two attestations of one attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_attest_each_attempt_once() -> Res {
    let mut c = Cluster::start(Arc::new(DangerEnrolEverythingForTests)).await?;
    party0_batches(&mut c, false).await?;
    let env = c.envelope();
    submit_everywhere(&c, &env).await?;
    let id = id_of(&env)?;
    let meta = c.state(1).store().meta()?;
    let commit = |attempt: u32, session: u64| BatchCommit {
        batch_id: meta.last_applied_batch + 1,
        request_ids: vec![id.to_vec()],
        next_serial_id: meta.next_serial,
        mpc_session: session,
        attempt,
        ..BatchCommit::default()
    };
    let mut to1 = peer_client(&c, 0, 1)?;
    assert_eq!(
        code(to1.commit_batch(commit(0, 1)).await),
        tonic::Code::PermissionDenied
    );
    assert_eq!(code(to1.commit_batch(commit(3, 2)).await), tonic::Code::Ok);
    for (attempt, session) in [(3, 3), (2, 4)] {
        assert_eq!(
            code(to1.commit_batch(commit(attempt, session)).await),
            tonic::Code::PermissionDenied,
            "attempt {attempt}"
        );
    }
    assert_eq!(code(to1.commit_batch(commit(4, 5)).await), tonic::Code::Ok);
    c.stop_all().await?;
    Ok(())
}

/// Party 0 alone cannot finalise a pending request against a peer's own evidence: with an
/// enrolment just received by all three, a commit that times it out, or lists it as
/// unopenable or digest-mismatched by a peer that opens it and holds the listed digest, is
/// refused by that peer before anything runs; the request is later enrolled as usual and the
/// stores agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_refuse_unfounded_time_outs() -> Res {
    use shared_proto::v1::BatchItem;

    let mut c = Cluster::start_with(Arc::new(DangerEnrolEverythingForTests), &|cfg| {
        cfg.batch.request_timeout_ms = 60_000;
    })
    .await?;
    party0_batches(&mut c, false).await?;
    let env = c.envelope();
    submit_everywhere(&c, &env).await?;
    let id = id_of(&env)?;
    let digest = c
        .state(1)
        .store()
        .request(&ocelli_node::ids::RequestId(id))?
        .ok_or("not held")?
        .digest;
    let meta = c.state(1).store().meta()?;
    let item = |reported_by| BatchItem {
        request_id: id.to_vec(),
        envelope_digest: digest.clone(),
        reported_by,
    };
    let base = BatchCommit {
        batch_id: meta.last_applied_batch + 1,
        next_serial_id: meta.next_serial,
        ..BatchCommit::default()
    };
    let mut timed_out = base.clone();
    timed_out.timed_out = vec![item(0)];
    let mut unopenable = base.clone();
    unopenable.unopenable = vec![item(0b010)];
    let mut mismatch = base.clone();
    mismatch.digest_mismatch = vec![item(0b010)];
    let mut unreported = base.clone();
    unreported.unopenable = vec![item(0)];
    let mut to1 = peer_client(&c, 0, 1)?;
    for (k, mut commit) in [timed_out, unopenable, mismatch, unreported]
        .into_iter()
        .enumerate()
    {
        commit.attempt = k as u32 + 1;
        commit.mpc_session = k as u64 + 1;
        let r = to1.commit_batch(commit).await;
        assert_eq!(code(r), tonic::Code::PermissionDenied, "commit {k}");
    }
    assert_eq!(c.state(1).store().meta()?, meta, "nothing applied");
    assert_eq!(c.state(1).pending_len(), 1);

    party0_batches(&mut c, true).await?;
    c.wait_drained(Duration::from_secs(20)).await?;
    assert_eq!(agreed_status(&c, &id).await?, ResultStatus::UniqueEnrolled);
    c.assert_stores_agree();
    c.stop_all().await?;
    Ok(())
}

/// The result-key rotation of docs/operations.md, on party 0, while party 2 is down after
/// attesting batch 1 that the other two applied: party 1's operator pins party 0's new
/// verifying key, keeping the old one as `previous_result_keys`, and restarts; party 2's
/// operator does the same while it is down; party 0 switches to the new key and restarts.
/// Party 2 then comes back and catches up on batch 1 (logged under party 0's old key), the
/// next batch is attested under the new key, and the three stores agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_key_rotation_keeps_batches_and_catch_up() -> Res {
    let mut c = Cluster::start_with(Arc::new(DangerEnrolEverythingForTests), &|c| {
        c.batch.request_timeout_ms = 2_000
    })
    .await?;
    let missed = party2_misses_finalisation(&mut c).await?;
    let old_key = c.state(0).result_verifying_key();

    let seed: [u8; 32] = rand::random();
    let new_key = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key();
    let dir = c.dir.path().join("rotated-result-key");
    std::fs::create_dir_all(&dir)?;
    let (secret, public) = (
        dir.join("result-signing.key"),
        dir.join("result-verifying.pub"),
    );
    std::fs::write(&secret, hex::encode(seed))?;
    std::fs::write(&public, hex::encode(new_key.to_bytes()))?;
    for peer in [1, 2] {
        let pinned = c.configs[peer]
            .peers
            .iter_mut()
            .find(|p| p.party_id == PartyId::ALL[0])
            .ok_or("party 0 not configured")?;
        let old = pinned.result_key.replace(public.clone()).ok_or("no key")?;
        pinned.previous_result_keys = vec![old];
    }
    c.restart_node(1).await?;
    c.configs[0].keys.result_signing = secret;
    c.restart_node(0).await?;
    assert_eq!(c.state(0).result_verifying_key(), new_key);

    c.restart_node(2).await?;
    let next = c.envelope();
    submit_everywhere(&c, &next).await?;
    c.wait_drained(Duration::from_secs(30)).await?;
    let before = [
        old_key,
        c.state(1).result_verifying_key(),
        c.state(2).result_verifying_key(),
    ];
    let r = agree(
        &results_of(&c, &id_of(&missed)?).await?,
        &before,
        &id_of(&missed)?,
    )?;
    assert_eq!(
        ResultStatus::try_from(r.status)?,
        ResultStatus::UniqueEnrolled
    );
    assert_eq!(
        agreed_status(&c, &id_of(&next)?).await?,
        ResultStatus::UniqueEnrolled
    );
    assert_eq!(c.state(2).store().meta()?.last_applied_batch, 2);
    c.assert_stores_agree();
    c.stop_all().await?;
    Ok(())
}

/// Requests one gateway sends to party 0 alone do not hold the batch slots: with room for two
/// requests per batch, two envelopes submitted to party 0 only, then one to all three, that one
/// is final while the two still wait (they wait behind it until they time out). Judged against
/// the two's own time-out, not a wall-clock bound, so a loaded machine cannot fail it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gateway_cannot_hold_back_others() -> Res {
    let timeout = Duration::from_secs(15);
    let mut c = Cluster::start_with(Arc::new(DangerEnrolEverythingForTests), &|cfg| {
        cfg.batch.max_size = 2;
        cfg.batch.request_timeout_ms = timeout.as_millis() as u64;
    })
    .await?;
    let to_party0 = c.client(0);
    let mut held_back = Vec::new();
    for _ in 0..2 {
        let env = c.envelope();
        to_party0
            .orb
            .clone()
            .submit(SubmitRequest {
                envelope: env.clone(),
                or_serial_ids: Vec::new(),
            })
            .await?;
        held_back.push(id_of(&env)?);
    }
    // Party 0 proposes the two before the third arrives.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let env = c.envelope();
    let id = id_of(&env)?;
    submit_everywhere(&c, &env).await?;
    let final_status = tokio::time::timeout(timeout, async {
        loop {
            if let Ok(status) = agreed_status(&c, &id).await {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .map_err(|_| "held back until the time-out of the two before it")?;
    assert_eq!(final_status, ResultStatus::UniqueEnrolled);
    for held in &held_back {
        assert!(
            agreed_status(&c, held).await.is_err(),
            "final only after the two held back were"
        );
    }
    c.wait_drained(2 * timeout).await?;
    for id in &held_back {
        assert_eq!(agreed_status(&c, id).await?, ResultStatus::TimedOut);
    }
    c.assert_stores_agree();
    c.stop_all().await?;
    Ok(())
}

/// Every port speaks TLS 1.3 only: a client offering nothing newer than TLS 1.2 fails the
/// handshake on the orb and the peer port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_1_2_is_refused() -> Res {
    let mut c = Cluster::start(Arc::new(NotEvaluated)).await?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in ocelli_node::tls::load_certs(&c.keys.ca_cert())? {
        roots.add(cert)?;
    }
    // The node's own groups: the peer port refuses a TLS 1.3 client without X25519MLKEM768.
    let provider = ocelli_node::tls::provider(ocelli_node::tls::KeyExchange::HybridPreferred);
    for (tls12, code) in [(true, "refused"), (false, "accepted")] {
        let versions: &[&rustls::SupportedProtocolVersion] = if tls12 {
            &[&rustls::version::TLS12]
        } else {
            &[&rustls::version::TLS13]
        };
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)?
            .with_root_certificates(roots.clone())
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        for addr in [c.configs[0].listen.orb, c.configs[0].listen.peer] {
            let tcp = tokio::net::TcpStream::connect(addr).await?;
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
            let handshake = connector.connect(name, tcp).await;
            assert_eq!(handshake.is_err(), tls12, "TLS 1.2 {code} at {addr}");
        }
    }
    c.stop_all().await?;
    Ok(())
}

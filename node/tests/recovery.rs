//! Node recovery through three real nodes (mutual TLS, redb, the MPC pipeline): a node's store
//! is deleted, the two others' operators allow its recovery, `recover` rebuilds it from them,
//! its shares equal the originals, and the cluster carries on deciding correctly. Helpers serve
//! only an allowed party, once per nonce, with pads that never repeat.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/trust.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use cluster::{Cluster, Res};
use ocelli_mpc::synthetic;
use ocelli_node::batch::DangerEnrolEverythingForTests;
use ocelli_node::clock::now_ms;
use ocelli_node::config::NodeConfig;
use ocelli_node::recovery::{allow_recovery, RecoverReport, RecoveryError};
use prost::Message;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use sdk_orb::ring::GaloisRingElement;
use sdk_orb::shamir::{lagrange_coefficient, EVALUATION_POINTS};
use sdk_orb::{IrisTemplate, PartyId, RequestId, RequestType};
use sha2::{Digest, Sha256};
use shared_proto::v1::peer_service_client::PeerServiceClient;
use shared_proto::v1::{NodeResult, RecoverRequest, RecoveryPadOffer, ResultStatus};
use support::peer_client;

/// `ocelli-node recover` as the CLI runs it: the node's own store, opened, then recovered.
async fn recover(config: &NodeConfig) -> Result<RecoverReport, RecoveryError> {
    let store = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || ocelli_node::node::open_store(&config))
            .await
            .map_err(|e| RecoveryError::Task(e.to_string()))??
    };
    ocelli_node::recovery::recover(config, store).await
}

type Person = (IrisTemplate, IrisTemplate);

/// SHA-256 over a node's stored shares in serial order (serial id, share bytes).
fn share_digest(c: &Cluster, i: usize) -> [u8; 32] {
    let mut h = Sha256::new();
    c.state(i)
        .store()
        .for_each_share(&mut |id, s| {
            h.update(id.0.to_be_bytes());
            h.update(s.as_bytes());
        })
        .expect("shares");
    h.finalize().into()
}

/// Submits each person as a uniqueness request, in waves of `wave`, and returns the results
/// (node 0's, in order) once every node has answered.
async fn decide(c: &mut Cluster, people: &[Person], wave: usize) -> Res<Vec<NodeResult>> {
    let mut out = Vec::new();
    for group in people.chunks(wave) {
        let mut ids = Vec::new();
        for p in group {
            let meta = c.meta(RequestType::Uniqueness, 0, now_ms());
            let env = c.seal_person(&meta, &p.0, &p.1);
            for r in c.submit_all(&env).await {
                r?;
            }
            ids.push(meta.request_id);
        }
        c.wait_drained(Duration::from_secs(1800)).await?;
        for id in ids {
            out.push(result(c, 0, &id).await?);
        }
    }
    Ok(out)
}

async fn result(c: &Cluster, node: usize, id: &RequestId) -> Res<NodeResult> {
    let signed = c.signed_result(node, id).await?;
    Ok(NodeResult::decode(signed.result.as_slice())?)
}

async fn recovery_scenario(enrolled: usize, decisions: usize) -> Res {
    let mut c = Cluster::start_mpc(&|cfg| {
        cfg.batch.request_timeout_ms = 600_000;
        cfg.batch.commit_timeout_ms = 1_800_000;
    })
    .await?;
    let mut rng = ChaCha20Rng::seed_from_u64(71);
    let people: Vec<Person> = (0..enrolled)
        .map(|_| (synthetic::eye(&mut rng), synthetic::eye(&mut rng)))
        .collect();
    let results = decide(&mut c, &people, 64).await?;
    let serials: Vec<u64> = results
        .iter()
        .map(|r| {
            assert_eq!(
                r.status,
                ResultStatus::UniqueEnrolled as i32,
                "{}",
                r.detail
            );
            r.serial_id
        })
        .collect();

    // Party 2 loses its store.
    let lost = 2;
    let before = share_digest(&c, lost);
    let meta_before = c.state(lost).store().meta()?;
    let summary_before = c.summaries()[lost].serials.clone();
    c.stop_node(lost).await?;
    std::fs::remove_dir_all(&c.configs[lost].data_dir)?;

    c.allow_recovery(PartyId::ALL[lost], 1)?;
    let report = recover(&c.configs[lost]).await?;
    eprintln!(
        "recovered {} entries in {:.2} s, {} bytes from each helper",
        report.entries, report.seconds, report.bytes_per_helper
    );
    assert_eq!(report.entries, enrolled);
    // A second recovery into the now full store is refused.
    assert!(matches!(
        recover(&c.configs[lost]).await,
        Err(RecoveryError::NotEmpty { .. })
    ));

    c.restart_node(lost).await?;
    assert_eq!(
        share_digest(&c, lost),
        before,
        "recovered shares equal the originals"
    );
    assert_eq!(c.state(lost).store().meta()?, meta_before);
    assert_eq!(c.summaries()[lost].serials, summary_before);

    // The next decisions: re-captures of enrolled people match them, new people are enrolled.
    let mut probes = Vec::new();
    let mut truth = Vec::new();
    for k in 0..decisions {
        if k % 2 == 0 {
            let i = (k * 7919) % enrolled;
            let p = &people[i];
            probes.push((
                synthetic::recapture(&mut rng, &p.0).0,
                synthetic::recapture(&mut rng, &p.1).0,
            ));
            truth.push(Some(serials[i]));
        } else {
            probes.push((synthetic::eye(&mut rng), synthetic::eye(&mut rng)));
            truth.push(None);
        }
    }
    let answers = decide(&mut c, &probes, 64).await?;
    for (k, (r, want)) in answers.iter().zip(&truth).enumerate() {
        match want {
            Some(serial) => {
                assert_eq!(
                    r.status,
                    ResultStatus::Match as i32,
                    "probe {k}: {}",
                    r.detail
                );
                assert_eq!(&r.matched_serial_ids, &vec![*serial], "probe {k}");
            }
            None => assert_eq!(
                r.status,
                ResultStatus::UniqueEnrolled as i32,
                "probe {k}: {}",
                r.detail
            ),
        }
    }
    let s = c.summaries();
    assert_eq!(s[0].serials, s[lost].serials);
    assert_eq!(s[1].serials, s[lost].serials);
    assert_eq!(s[0].next_serial, s[lost].next_serial);
    c.stop_all().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_that_lost_its_store_recovers_it_and_decides_on() -> Res {
    recovery_scenario(20, 8).await
}

/// A thousand enrolled, a hundred decisions after the recovery. Release:
/// `cargo test --release -p ocelli-node --test recovery -- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "1,000 enrolments in MPC; run in release"]
async fn a_node_recovers_a_thousand_people_and_the_next_hundred_decisions_are_right() -> Res {
    recovery_scenario(1000, 100).await
}

/// Every masked contribution of one `RecoverShares` stream, in row order, as u16 words.
async fn recovery_answer(
    client: &mut PeerServiceClient<tonic::transport::Channel>,
    nonce: [u8; 32],
) -> Result<Vec<u16>, tonic::Status> {
    let mut stream = client
        .recover_shares(RecoverRequest {
            nonce: nonce.to_vec(),
        })
        .await?
        .into_inner();
    let mut words = Vec::new();
    while let Some(chunk) = stream.message().await? {
        words.extend(
            chunk
                .contributions
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]])),
        );
    }
    Ok(words)
}

/// Per ring element of one entry: `l * (a - b)`.
fn scaled_difference(l: GaloisRingElement, a: &[u8], b: &[u8]) -> Vec<u16> {
    let element = |bytes: &[u8]| -> GaloisRingElement {
        GaloisRingElement::from_le_bytes(bytes.try_into().expect("8 bytes"))
    };
    a.chunks_exact(8)
        .zip(b.chunks_exact(8))
        .flat_map(|(x, y)| (l * (element(x) - element(y))).0)
        .collect()
}

/// Enrols `n` people (serials 1..=n) through the cluster's evaluator.
async fn enrol(c: &mut Cluster, n: usize) -> Res {
    for _ in 0..n {
        let env = c.envelope();
        for r in c.submit_all(&env).await {
            r?;
        }
        c.wait_drained(Duration::from_secs(20)).await?;
    }
    Ok(())
}

/// Holds that a second answer for the nonce of `before` is refused as a repeat, or, if served,
/// does not differ from `before` at row 0 by `leak`. Returns whether it was served.
fn assert_no_leak(before: &[u16], again: Result<Vec<u16>, tonic::Status>, leak: &[u16]) -> bool {
    match again {
        Err(status) => {
            assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status}");
            false
        }
        Ok(after) => {
            assert_eq!(after.len(), leak.len());
            let difference: Vec<u16> = before[..leak.len()]
                .iter()
                .zip(&after)
                .map(|(x, y)| x.wrapping_sub(*y))
                .collect();
            assert!(
                difference != leak,
                "the repeated nonce's pads cancel: party 2 reads l_0 (s_0(1) - s_0(2))"
            );
            true
        }
    }
}

/// Party 2, deviating, asks helper party 0 for recovery twice with one nonce, around the
/// deletion of serial 1 (so serial 2 moves to row 0): the two answers' difference at row 0
/// must not be party 0's Lagrange term of `s_0(1) - s_0(2)`, which would hand party 2 the
/// difference of two people's shares without a pad. Party 0 refuses the repeated nonce; after
/// a restart, which forgets the nonces served, it serves it with new pads. Nor can party 2 give
/// party 1 a pad of its choosing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recovery_pads_do_not_repeat_across_states() -> Res {
    let mut c = Cluster::start(Arc::new(DangerEnrolEverythingForTests)).await?;
    enrol(&mut c, 2).await?;
    let mut stored = Vec::new();
    c.state(0).store().for_each_share(&mut |id, s| {
        stored.push((id.0, s.as_bytes().to_vec()));
    })?;
    assert_eq!(
        stored.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![1, 2]
    );
    let l0 = lagrange_coefficient(PartyId::ALL[0], PartyId::ALL[1], EVALUATION_POINTS[2]);
    let leak = scaled_difference(l0, &stored[0].1, &stored[1].1);
    let entry_words = leak.len();

    c.allow_recovery(PartyId::ALL[2], 3)?;
    let nonce = [0x5a; 32];
    let before = recovery_answer(&mut peer_client(&c, 2, 0)?, nonce).await?;
    assert_eq!(before.len(), 2 * entry_words);

    let meta = c.meta(RequestType::Deletion, 1, now_ms());
    let deletion = c.seal(&meta);
    for r in c.submit_all(&deletion).await {
        r?;
    }
    c.wait_drained(Duration::from_secs(20)).await?;
    assert_eq!(c.state(0).shares().len(), 1);

    let again = recovery_answer(&mut peer_client(&c, 2, 0)?, nonce).await;
    assert!(
        !assert_no_leak(&before, again, &leak),
        "a repeat is refused"
    );

    c.restart_node(0).await?;
    c.restart_node(1).await?;
    let again = recovery_answer(&mut peer_client(&c, 2, 0)?, nonce).await;
    assert!(
        assert_no_leak(&before, again, &leak),
        "a restarted helper serves it"
    );

    let fresh = recovery_answer(&mut peer_client(&c, 2, 0)?, [0xa5; 32]).await?;
    assert_eq!(fresh.len(), entry_words);

    // Only the lower helper (party 0) hands party 1 the pad of party 2's recovery.
    let planted = peer_client(&c, 2, 1)?
        .share_recovery_pad(RecoveryPadOffer {
            target_party: 2,
            nonce: vec![0x33; 32],
            secret: vec![0; 32],
        })
        .await;
    assert_eq!(support::code(planted), tonic::Code::PermissionDenied);
    c.stop_all().await
}

/// The recovering node's status from a refused recovery.
fn refusal(r: Result<ocelli_node::recovery::RecoverReport, RecoveryError>) -> (PartyId, String) {
    match r {
        Err(RecoveryError::Peer {
            party,
            code: tonic::Code::PermissionDenied,
            message,
        }) => (party, message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A helper serves a recovery only while its operator allows it, for that party, and as many
/// sessions as allowed; the lower helper serves only with the other helper's consent too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recovery_is_served_only_while_both_helpers_allow_it() -> Res {
    let mut c = Cluster::start(Arc::new(DangerEnrolEverythingForTests)).await?;
    enrol(&mut c, 1).await?;
    let lost = 2;
    c.stop_node(lost).await?;
    let data = c.configs[lost].data_dir.clone();
    std::fs::remove_dir_all(&data)?;
    let minutes = Duration::from_secs(600);

    let (party, message) = refusal(recover(&c.configs[lost]).await);
    assert_eq!(party, PartyId::ALL[0]);
    assert!(message.contains("allow-recovery --party 2"), "{message}");

    allow_recovery(&c.configs[0], PartyId::ALL[1], minutes, 1)?;
    let (_, message) = refusal(recover(&c.configs[lost]).await);
    assert!(message.contains("allows party 1"), "{message}");

    allow_recovery(&c.configs[0], PartyId::ALL[2], minutes, 1)?;
    let (party, message) = refusal(recover(&c.configs[lost]).await);
    assert_eq!(party, PartyId::ALL[0]);
    assert!(message.contains("party 1 refused"), "{message}");

    c.allow_recovery(PartyId::ALL[2], 1)?;
    assert_eq!(recover(&c.configs[lost]).await?.entries, 1);

    std::fs::remove_dir_all(&data)?;
    let (_, message) = refusal(recover(&c.configs[lost]).await);
    assert!(message.contains("used up"), "{message}");
    c.stop_all().await
}

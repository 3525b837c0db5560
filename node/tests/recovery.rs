//! Node recovery through three real nodes (mutual TLS, redb, the MPC pipeline): a node's store
//! is deleted, `recover` rebuilds it from the two others, its shares equal the originals, and
//! the cluster carries on deciding correctly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/cluster.rs"]
mod cluster;

use std::time::Duration;

use cluster::{Cluster, Res};
use ocelli_mpc::synthetic;
use ocelli_node::node::now_ms;
use ocelli_node::recovery::{recover, RecoveryError};
use prost::Message;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use sdk_orb::{IrisTemplate, RequestId, RequestType};
use sha2::{Digest, Sha256};
use shared_proto::v1::{GetResultRequest, NodeResult, ResultStatus};

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
    let signed = c
        .client(node)
        .orb
        .get_result(GetResultRequest {
            request_id: id.0.to_vec(),
        })
        .await?
        .into_inner();
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

/// The size: 1,000 enrolled, 100 decisions after the recovery. Release:
/// `cargo test --release -p ocelli-node --test recovery -- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "1,000 enrolments in MPC; run in release"]
async fn a_node_recovers_a_thousand_people_and_the_next_hundred_decisions_are_right() -> Res {
    recovery_scenario(1000, 100).await
}

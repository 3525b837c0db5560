//! Mirror-attack detection and the lookback OR rule end to end through three real nodes
//! (mutual TLS, redb stores, the MPC pipeline over the node-to-node streams), with synthetic
//! irises whose truth is known.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/cluster.rs"]
mod cluster;

use std::time::Duration;

use ocelli_mpc::synthetic;
use ocelli_node::cluster::{Deployment, LocalCluster, Orb};
use ocelli_node::node::now_ms;
use rand_chacha::ChaCha20Rng;
use rand_core::{OsRng, SeedableRng};
use sdk_orb::envelope::RequestMeta;
use sdk_orb::{IrisTemplate, RequestId, RequestType};
use shared_proto::v1::{NodeResult, ResultStatus};

type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
type Person = (IrisTemplate, IrisTemplate);

fn matching(t: &mut toml::Table, key: &str, value: toml::Value) {
    if let Some(toml::Value::Table(b)) = t.get_mut("batch") {
        b.insert("interval_ms".into(), 20.into());
    }
    if let Some(toml::Value::Table(m)) = t.get_mut("matching") {
        m.insert(key.into(), value);
    }
}

async fn ask(orb: &Orb, t: RequestType, p: &Person) -> Res<NodeResult> {
    ask_naming(orb, t, p, &[]).await
}

fn meta(t: RequestType) -> RequestMeta {
    RequestMeta {
        request_id: RequestId::random(&mut OsRng),
        request_type: t,
        timestamp_ms: now_ms(),
        serial_id: 0,
        or_policy: false,
    }
}

/// Asks with `or_serial_ids` named for the OR rule.
async fn ask_naming(orb: &Orb, t: RequestType, p: &Person, ids: &[u64]) -> Res<NodeResult> {
    let meta = meta(t);
    let env = orb.envelope(&mut OsRng, &meta, &p.0, &p.1)?;
    orb.submit_naming(&env, ids).await?;
    orb.result(&meta.request_id, Duration::from_secs(300)).await
}

fn status(r: &NodeResult) -> ResultStatus {
    ResultStatus::try_from(r.status).unwrap()
}

fn person(rng: &mut ChaCha20Rng) -> Person {
    (synthetic::eye(rng), synthetic::eye(rng))
}

fn recapture(rng: &mut ChaCha20Rng, p: &Person) -> Person {
    (
        synthetic::recapture(rng, &p.0).0,
        synthetic::recapture(rng, &p.1).0,
    )
}

/// A fresh capture of `p` with the image flipped: the left eye's code appears, mirrored, as
/// the right eye's and the other way round.
fn mirrored_recapture(rng: &mut ChaCha20Rng, p: &Person) -> Person {
    (
        synthetic::recapture(rng, &p.1).0.mirrored(),
        synthetic::recapture(rng, &p.0).0.mirrored(),
    )
}

/// `p`'s left eye captured again, the right eye someone else's.
fn one_eye_replaced(rng: &mut ChaCha20Rng, p: &Person) -> Person {
    (synthetic::recapture(rng, &p.0).0, synthetic::eye(rng))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mirrored_recapture_is_flagged_and_not_enrolled() -> Res {
    let dir = tempfile::tempdir()?;
    // Mirror detection is on by default: the tweak only speeds batches up.
    let tweak = |t: &mut toml::Table| matching(t, "threshold", 0.345.into());
    let (deployment, listeners) = Deployment::open_or_create(dir.path(), &tweak).await?;
    let cluster = LocalCluster::start(&deployment, listeners).await?;
    let orb = deployment.orb()?;
    let mut rng = ChaCha20Rng::seed_from_u64(51);
    let (a, b) = (person(&mut rng), person(&mut rng));
    use RequestType as T;
    use ResultStatus as S;

    let mut serials = Vec::new();
    for p in [&a, &b] {
        let r = ask(&orb, T::Uniqueness, p).await?;
        assert_eq!(status(&r), S::UniqueEnrolled, "{}", r.detail);
        assert!(!r.mirror_attack);
        serials.push(r.serial_id);
    }
    let enrolled = || cluster.states()[0].shares().len();
    assert_eq!(enrolled(), 2);

    // The mirrored re-capture: flagged, not enrolled, on a uniqueness request and a check.
    let r = ask(&orb, T::Uniqueness, &mirrored_recapture(&mut rng, &a)).await?;
    assert_eq!(status(&r), S::MirrorAttack, "{}", r.detail);
    assert!(r.mirror_attack && r.serial_id == 0 && r.matched_serial_ids.is_empty());
    assert_eq!(enrolled(), 2, "a flagged request is not enrolled");
    let r = ask(&orb, T::UniquenessCheck, &mirrored_recapture(&mut rng, &b)).await?;
    assert_eq!((status(&r), r.mirror_attack), (S::MirrorAttack, true));

    // The plain re-capture is a normal match, not flagged.
    let r = ask(&orb, T::Uniqueness, &recapture(&mut rng, &a)).await?;
    assert_eq!(status(&r), S::Match, "{}", r.detail);
    assert_eq!(r.matched_serial_ids, vec![serials[0]]);
    assert!(!r.mirror_attack);

    // A stranger is enrolled.
    let r = ask(&orb, T::Uniqueness, &person(&mut rng)).await?;
    assert_eq!((status(&r), r.mirror_attack), (S::UniqueEnrolled, false));
    assert_eq!(enrolled(), 3);

    let ids: Vec<Vec<u64>> = cluster
        .states()
        .iter()
        .map(|s| s.shares().rows().serial_ids().to_vec())
        .collect();
    assert_eq!(ids[0], ids[1]);
    assert_eq!(ids[1], ids[2]);
    cluster.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_mirror_detection_the_mirrored_recapture_is_enrolled() -> Res {
    let dir = tempfile::tempdir()?;
    let tweak = |t: &mut toml::Table| matching(t, "mirror_detection", false.into());
    let (deployment, listeners) = Deployment::open_or_create(dir.path(), &tweak).await?;
    let cluster = LocalCluster::start(&deployment, listeners).await?;
    let orb = deployment.orb()?;
    let mut rng = ChaCha20Rng::seed_from_u64(52);
    let a = person(&mut rng);
    let r = ask(&orb, RequestType::Uniqueness, &a).await?;
    assert_eq!(status(&r), ResultStatus::UniqueEnrolled);
    let r = ask(
        &orb,
        RequestType::Uniqueness,
        &mirrored_recapture(&mut rng, &a),
    )
    .await?;
    assert_eq!(
        (status(&r), r.mirror_attack),
        (ResultStatus::UniqueEnrolled, false),
        "plain matching misses a mirrored capture"
    );
    cluster.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_eye_replaced_matches_within_the_lookback_window_or_when_named() -> Res {
    let dir = tempfile::tempdir()?;
    let tweak = |t: &mut toml::Table| matching(t, "lookback", 2.into());
    let (deployment, listeners) = Deployment::open_or_create(dir.path(), &tweak).await?;
    let cluster = LocalCluster::start(&deployment, listeners).await?;
    let orb = deployment.orb()?;
    let mut rng = ChaCha20Rng::seed_from_u64(53);
    use RequestType as T;
    use ResultStatus as S;

    let p = person(&mut rng);
    let r = ask(&orb, T::Uniqueness, &p).await?;
    assert_eq!(status(&r), S::UniqueEnrolled);
    let serial = r.serial_id;
    // p is the most recent enrolment: within the window, one eye suffices.
    let r = ask(&orb, T::Uniqueness, &one_eye_replaced(&mut rng, &p)).await?;
    assert_eq!(status(&r), S::Match, "{}", r.detail);
    assert_eq!(r.matched_serial_ids, vec![serial]);
    // One more enrolment: p is second most recent, still within N = 2.
    assert_eq!(
        status(&ask(&orb, T::Uniqueness, &person(&mut rng)).await?),
        S::UniqueEnrolled
    );
    let r = ask(&orb, T::UniquenessCheck, &one_eye_replaced(&mut rng, &p)).await?;
    assert_eq!(r.matched_serial_ids, vec![serial]);
    // Another: p is third most recent, beyond the window: both eyes must match again.
    assert_eq!(
        status(&ask(&orb, T::Uniqueness, &person(&mut rng)).await?),
        S::UniqueEnrolled
    );
    let r = ask(&orb, T::UniquenessCheck, &one_eye_replaced(&mut rng, &p)).await?;
    assert_eq!(status(&r), S::Unique, "{}", r.detail);
    let r = ask(&orb, T::UniquenessCheck, &recapture(&mut rng, &p)).await?;
    assert_eq!(r.matched_serial_ids, vec![serial], "both eyes still match");

    // Beyond the window, a request naming p's serial id compares with p under the OR rule.
    let half = one_eye_replaced(&mut rng, &p);
    let r = ask_naming(&orb, T::Uniqueness, &half, &[serial]).await?;
    assert_eq!(status(&r), S::Match, "{}", r.detail);
    assert_eq!(r.matched_serial_ids, vec![serial]);

    // Bad lists are refused by every node with a clear error, and nothing is stored: the
    // same envelope is accepted afterwards (it would otherwise be a replay).
    let enrolled = cluster.states()[0].shares().len();
    let m = meta(T::Uniqueness);
    let env = orb.envelope(&mut OsRng, &m, &half.0, &half.1)?;
    let too_many: Vec<u64> = (1..=65).collect();
    for (ids, want) in [
        (&too_many[..], "65 serial ids, at most 64"),
        // Which id is not enrolled is not said.
        (&[serial, 999][..], "a serial id named is not enrolled"),
    ] {
        let e = orb.submit_naming(&env, ids).await.err().ok_or("accepted")?;
        assert!(e.to_string().contains(want), "{e}");
        assert!(!e.to_string().contains("999"), "{e}");
    }
    let reauth = meta(T::Reauth);
    let reauth = RequestMeta {
        serial_id: serial,
        ..reauth
    };
    let e = orb.envelope(&mut OsRng, &reauth, &half.0, &half.1)?;
    let e = orb
        .submit_naming(&e, &[serial])
        .await
        .err()
        .ok_or("accepted")?;
    assert!(e.to_string().contains("only uniqueness"), "{e}");
    orb.submit(&env).await?;
    let r = orb.result(&m.request_id, Duration::from_secs(300)).await?;
    assert_eq!(
        status(&r),
        S::UniqueEnrolled,
        "without the named id, both eyes must match"
    );
    assert_eq!(cluster.states()[0].shares().len(), enrolled + 1);
    cluster.shutdown().await?;

    // Nodes that are gone are named unreachable, not said to refuse the envelope.
    let env = orb.envelope(&mut OsRng, &meta(T::Uniqueness), &half.0, &half.1)?;
    let e = orb
        .submit(&env)
        .await
        .err()
        .ok_or("accepted by stopped nodes")?;
    assert!(e.to_string().contains("could not be reached"), "{e}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_demo_flags_every_mirrored_capture_and_nothing_else() -> Res {
    let opts = ocelli_node::demo::DemoOptions {
        people: 20,
        probes: 20,
        progress: false,
        ..Default::default()
    };
    let report = ocelli_node::demo::run(&opts).await?;
    eprintln!("{report}");
    assert!(report.enrolled >= 20);
    assert_eq!(report.mirrored_captures, 2);
    assert_eq!(report.mirror_attacks_flagged, report.mirrored_captures);
    assert_eq!(report.false_mirror_flags, 0);
    assert_eq!((report.false_matches, report.false_non_matches), (0, 0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_given_different_named_ids_answer_digest_mismatch() -> Res {
    use ocelli_node::batch::DangerEnrolEverythingForTests;
    use prost::Message;
    use shared_proto::v1::{GetResultRequest, SubmitRequest};
    let mut c = cluster::Cluster::start(std::sync::Arc::new(DangerEnrolEverythingForTests))
        .await
        .map_err(|e| e.to_string())?;
    for _ in 0..2 {
        let e = c.envelope();
        for r in c.submit_all(&e).await {
            r?;
        }
    }
    c.wait_drained(Duration::from_secs(20))
        .await
        .map_err(|e| e.to_string())?;
    // One envelope; the gateway names serial 1 to two nodes and serial 2 to the third.
    let meta = c.meta(RequestType::Uniqueness, 0, now_ms());
    let env = c.seal(&meta);
    for (i, ids) in [(0, vec![1]), (1, vec![1]), (2, vec![2])] {
        c.client(i)
            .orb
            .submit(SubmitRequest {
                envelope: env.clone(),
                or_serial_ids: ids,
            })
            .await?;
    }
    c.wait_drained(Duration::from_secs(30))
        .await
        .map_err(|e| e.to_string())?;
    for i in 0..3 {
        let signed = c
            .client(i)
            .orb
            .get_result(GetResultRequest {
                request_id: meta.request_id.0.to_vec(),
            })
            .await?
            .into_inner();
        let r = NodeResult::decode(signed.result.as_slice())?;
        assert_eq!(
            status(&r),
            ResultStatus::DigestMismatch,
            "node {i}: {}",
            r.detail
        );
    }
    assert_eq!(c.state(0).shares().len(), 2, "nothing enrolled");
    c.stop_all().await.map_err(|e| e.to_string())?;
    Ok(())
}

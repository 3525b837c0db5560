//! Every request type end to end through three real nodes (mutual TLS, redb
//! stores, the MPC matching pipeline over the node-to-node streams), with
//! synthetic irises whose truth is known.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ocelli_mpc::synthetic;
use ocelli_node::clock::now_ms;
use ocelli_node::cluster::{Deployment, LocalCluster, Orb};
use rand_chacha::ChaCha20Rng;
use rand_core::{OsRng, SeedableRng};
use sdk_orb::envelope::RequestMeta;
use sdk_orb::{IrisTemplate, RequestId, RequestType};
use shared_proto::v1::{NodeResult, ResultStatus};

type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
type Person = (IrisTemplate, IrisTemplate);

fn fast_batches(t: &mut toml::Table) {
    if let Some(toml::Value::Table(b)) = t.get_mut("batch") {
        b.insert("interval_ms".into(), 20.into());
    }
    untuned(t);
}

/// The CPU engine's defaults: tuning would add its measurement to every node start here.
fn untuned(t: &mut toml::Table) {
    if let Some(toml::Value::Table(m)) = t.get_mut("matching") {
        m.insert("cpu_tuning".into(), false.into());
    }
}

fn privacy_max(t: &mut toml::Table) {
    fast_batches(t);
    if let Some(toml::Value::Table(m)) = t.get_mut("matching") {
        m.insert("privacy_max".into(), true.into());
    }
}

/// A new request's metadata.
fn request(t: RequestType, serial_id: u64, or_policy: bool) -> RequestMeta {
    RequestMeta {
        request_id: RequestId::random(&mut OsRng),
        request_type: t,
        timestamp_ms: now_ms(),
        serial_id,
        or_policy,
    }
}

async fn ask(
    orb: &Orb,
    t: RequestType,
    serial_id: u64,
    or_policy: bool,
    p: &Person,
) -> Res<NodeResult> {
    let meta = request(t, serial_id, or_policy);
    let env = orb.envelope(&mut OsRng, &meta, &p.0, &p.1)?;
    orb.submit(&env).await?;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_request_type_is_decided_in_mpc() -> Res {
    let dir = tempfile::tempdir()?;
    let (deployment, listeners) = Deployment::open_or_create(dir.path(), &fast_batches).await?;
    // The configs may carry a database password (`local-cluster --postgres`).
    for party in 0..3 {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.path().join(format!("keys/party{party}.toml"));
        assert_eq!(
            std::fs::metadata(&path)?.permissions().mode() & 0o777,
            0o600
        );
    }
    let cluster = LocalCluster::start(&deployment, listeners).await?;
    let orb = deployment.orb()?;
    let mut rng = ChaCha20Rng::seed_from_u64(42);
    let (a, b, c) = (person(&mut rng), person(&mut rng), person(&mut rng));
    use RequestType as T;
    use ResultStatus as S;

    // Uniqueness: a new person is enrolled; a re-capture matches them.
    let r = ask(&orb, T::Uniqueness, 0, false, &a).await?;
    assert_eq!(status(&r), S::UniqueEnrolled, "{}", r.detail);
    let serial_a = r.serial_id;
    let r = ask(&orb, T::Uniqueness, 0, false, &recapture(&mut rng, &a)).await?;
    assert_eq!(status(&r), S::Match, "{}", r.detail);
    assert_eq!(r.matched_serial_ids, vec![serial_a]);

    // Uniqueness check: reports, never enrols.
    let r = ask(&orb, T::UniquenessCheck, 0, false, &b).await?;
    assert_eq!(status(&r), S::Unique);
    let r = ask(&orb, T::UniquenessCheck, 0, false, &b).await?;
    assert_eq!(status(&r), S::Unique, "b was not enrolled by a check");
    let r = ask(&orb, T::UniquenessCheck, 0, false, &recapture(&mut rng, &a)).await?;
    assert_eq!(
        (status(&r), r.matched_serial_ids.clone()),
        (S::Match, vec![serial_a])
    );

    // Re-authentication against one serial id.
    let r = ask(&orb, T::Reauth, serial_a, false, &recapture(&mut rng, &a)).await?;
    assert_eq!((status(&r), r.serial_id), (S::ReauthMatch, serial_a));
    let r = ask(&orb, T::Reauth, serial_a, false, &b).await?;
    assert_eq!(status(&r), S::ReauthNoMatch);
    let r = ask(&orb, T::Reauth, 999, false, &b).await?;
    assert_eq!(status(&r), S::UnknownSerialId);

    // The eye policy: only the left eye of c is a re-capture.
    let r = ask(&orb, T::Uniqueness, 0, false, &c).await?;
    let serial_c = r.serial_id;
    let half = (
        synthetic::recapture(&mut rng, &c.0).0,
        synthetic::eye(&mut rng),
    );
    let r = ask(&orb, T::UniquenessCheck, 0, false, &half).await?;
    assert_eq!(status(&r), S::Unique, "both eyes must match by default");
    let r = ask(&orb, T::UniquenessCheck, 0, true, &half).await?;
    assert_eq!(
        (status(&r), r.matched_serial_ids.clone()),
        (S::Match, vec![serial_c])
    );

    // Reset: serial a now holds b's irises.
    let r = ask(&orb, T::Reset, serial_a, false, &b).await?;
    assert_eq!((status(&r), r.serial_id), (S::Reset, serial_a));
    let r = ask(&orb, T::Reauth, serial_a, false, &recapture(&mut rng, &b)).await?;
    assert_eq!(status(&r), S::ReauthMatch);
    let r = ask(&orb, T::UniquenessCheck, 0, false, &recapture(&mut rng, &a)).await?;
    assert_eq!(status(&r), S::Unique, "a's shares were replaced");

    // Deletion: shares gone from matching on all three nodes.
    let r = ask(&orb, T::Deletion, serial_a, false, &b).await?;
    assert_eq!(status(&r), S::Deleted);
    let r = ask(&orb, T::UniquenessCheck, 0, false, &recapture(&mut rng, &b)).await?;
    assert_eq!(status(&r), S::Unique);
    let r = ask(&orb, T::Deletion, serial_a, false, &b).await?;
    assert_eq!(status(&r), S::UnknownSerialId);

    // Intra-batch: the same new person twice at once: one enrolment, one match.
    let d = person(&mut rng);
    let d2 = recapture(&mut rng, &d);
    let (r1, r2) = tokio::join!(
        ask(&orb, T::Uniqueness, 0, false, &d),
        ask(&orb, T::Uniqueness, 0, false, &d2)
    );
    let mut both = [status(&r1?), status(&r2?)];
    both.sort_by_key(|s| *s as i32);
    assert_eq!(both, [S::UniqueEnrolled, S::Match]);

    // All three nodes hold the same enrolled serial ids.
    let states = cluster.states();
    let ids: Vec<Vec<u64>> = states
        .iter()
        .map(|s| s.shares().rows().serial_ids().to_vec())
        .collect();
    assert_eq!(ids[0], ids[1]);
    assert_eq!(ids[1], ids[2]);
    assert_eq!(ids[0].len(), 2, "c and d");
    assert!(states[0].metrics().comparisons.get() > 0);
    cluster.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn privacy_max_opens_only_whether_anything_matched() -> Res {
    let dir = tempfile::tempdir()?;
    let (deployment, listeners) = Deployment::open_or_create(dir.path(), &privacy_max).await?;
    let cluster = LocalCluster::start(&deployment, listeners).await?;
    let orb = deployment.orb()?;
    let mut rng = ChaCha20Rng::seed_from_u64(43);
    let a = person(&mut rng);
    let r = ask(&orb, RequestType::Uniqueness, 0, false, &a).await?;
    assert_eq!(status(&r), ResultStatus::UniqueEnrolled);
    let r = ask(
        &orb,
        RequestType::Uniqueness,
        0,
        false,
        &recapture(&mut rng, &a),
    )
    .await?;
    assert_eq!(status(&r), ResultStatus::Match);
    assert!(
        r.matched_serial_ids.is_empty(),
        "privacy-max reveals no serial id"
    );
    cluster.shutdown().await
}

/// Batches of one keep the opened shares of four pending requests (`4 x batch.max_size`); eight
/// re-captures submitted at once leave some without, whose envelopes are opened again from the
/// store when their batch runs. Every one must still match its person.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_beyond_the_kept_shares_are_opened_again_and_decided_alike() -> Res {
    let dir = tempfile::tempdir()?;
    let batches_of_one = |t: &mut toml::Table| {
        fast_batches(t);
        if let Some(toml::Value::Table(b)) = t.get_mut("batch") {
            b.insert("max_size".into(), 1.into());
        }
    };
    let (deployment, listeners) = Deployment::open_or_create(dir.path(), &batches_of_one).await?;
    let cluster = LocalCluster::start(&deployment, listeners).await?;
    let orb = deployment.orb()?;
    let mut rng = ChaCha20Rng::seed_from_u64(45);
    let people: Vec<Person> = (0..4).map(|_| person(&mut rng)).collect();
    let mut serials = Vec::new();
    for p in &people {
        let r = ask(&orb, RequestType::Uniqueness, 0, false, p).await?;
        assert_eq!(status(&r), ResultStatus::UniqueEnrolled, "{}", r.detail);
        serials.push(r.serial_id);
    }
    let recaptures: Vec<(usize, Person)> = (0..8)
        .map(|k| (k % 4, recapture(&mut rng, &people[k % 4])))
        .collect();
    let answers = futures::future::join_all(
        recaptures
            .iter()
            .map(|(_, p)| ask(&orb, RequestType::Uniqueness, 0, false, p)),
    )
    .await;
    for ((i, _), r) in recaptures.iter().zip(answers) {
        let r = r?;
        assert_eq!(status(&r), ResultStatus::Match, "{}", r.detail);
        assert_eq!(r.matched_serial_ids, vec![serials[*i]]);
    }
    cluster.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn enrolled_data_survives_a_restart_of_the_cluster() -> Res {
    let dir = tempfile::tempdir()?;
    let mut rng = ChaCha20Rng::seed_from_u64(44);
    let a = person(&mut rng);
    let serial = {
        let (deployment, listeners) = Deployment::open_or_create(dir.path(), &fast_batches).await?;
        let cluster = LocalCluster::start(&deployment, listeners).await?;
        let r = ask(&deployment.orb()?, RequestType::Uniqueness, 0, false, &a).await?;
        cluster.shutdown().await?;
        r.serial_id
    };
    let (deployment, listeners) = Deployment::open_or_create(dir.path(), &fast_batches).await?;
    assert!(listeners.is_none(), "the deployment is reused");
    let cluster = LocalCluster::start(&deployment, listeners).await?;
    let r = ask(
        &deployment.orb()?,
        RequestType::Uniqueness,
        0,
        false,
        &recapture(&mut rng, &a),
    )
    .await?;
    assert_eq!(r.matched_serial_ids, vec![serial]);
    cluster.shutdown().await
}

/// `Orb::result` waits on each node's `StreamResults`; where a stream ends without the result
/// (here every node restarts while the request waits for its batch), it polls `GetResult`
/// until the restarted nodes decide the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_result_outlives_the_streams_that_waited_for_it() -> Res {
    let dir = tempfile::tempdir()?;
    let no_batches = |t: &mut toml::Table| {
        if let Some(toml::Value::Table(b)) = t.get_mut("batch") {
            b.insert("interval_ms".into(), 3_600_000.into());
        }
        untuned(t);
    };
    let (deployment, listeners) = Deployment::open_or_create(dir.path(), &no_batches).await?;
    let cluster = LocalCluster::start(&deployment, listeners).await?;
    let orb = deployment.orb()?;
    let a = person(&mut ChaCha20Rng::seed_from_u64(45));
    let meta = request(RequestType::Uniqueness, 0, false);
    orb.submit(&orb.envelope(&mut OsRng, &meta, &a.0, &a.1)?)
        .await?;
    let id = meta.request_id;
    let waiting = tokio::spawn(async move { orb.result(&id, Duration::from_secs(120)).await });
    // The streams are open and nothing is decided.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished());
    cluster.shutdown().await?;

    // The same deployment, now batching.
    for party in 0..3 {
        let path = dir.path().join(format!("keys/party{party}.toml"));
        let mut t: toml::Table = std::fs::read_to_string(&path)?.parse()?;
        fast_batches(&mut t);
        std::fs::write(&path, toml::to_string(&t)?)?;
    }
    let (deployment, listeners) = Deployment::open_or_create(dir.path(), &fast_batches).await?;
    let cluster = LocalCluster::start(&deployment, listeners).await?;
    let r = waiting.await??;
    assert_eq!(status(&r), ResultStatus::UniqueEnrolled, "{}", r.detail);
    cluster.shutdown().await
}

//! Mirror-attack detection, the lookback OR rule and the refusal of malformed shares end to
//! end through three real nodes (mutual TLS, redb stores, the MPC pipeline over the
//! node-to-node streams), with synthetic irises whose truth is known.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/cluster.rs"]
mod cluster;

use std::path::Path;
use std::time::Duration;

use ocelli_mpc::synthetic;
use ocelli_node::clock::now_ms;
use ocelli_node::cluster::{Deployment, LocalCluster, Orb};
use rand_chacha::ChaCha20Rng;
use rand_core::{OsRng, SeedableRng};
use sdk_orb::envelope::{
    encode_payload, envelope_len, hazmat_seal_plaintexts, payload_len, RequestMeta,
};
use sdk_orb::keys::{NodePublicKeys, OrbSigningKey};
use sdk_orb::shamir::share_with_sink;
use sdk_orb::{IrisTemplate, PartyId, PartyShares, RequestId, RequestType, CODE_COEFS, MASK_COEFS};
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

/// What a compromised orb can send: a valid sharing of both eyes with code value 2^15 at one
/// coefficient and a zero mask. Enrolled, it matches almost every query (docs/threat-model.md).
/// Sealed with the deployment's orb key in `dir`.
fn malformed_envelope(dir: &Path, meta: &RequestMeta) -> Res<Vec<u8>> {
    let mut code = vec![0u16; CODE_COEFS];
    code[0] = 1 << 15;
    let mask = vec![0u16; MASK_COEFS];
    let mut shares = vec![PartyShares::zero(); 3];
    for eye in 0..2 {
        share_with_sink(&mut OsRng, &code, |i, s| {
            for (o, s) in shares.iter_mut().zip(s) {
                let e = if eye == 0 { &mut o.left } else { &mut o.right };
                e.code.coefs_mut()[4 * i..4 * i + 4].copy_from_slice(&s.0);
            }
        });
        share_with_sink(&mut OsRng, &mask, |i, s| {
            for (o, s) in shares.iter_mut().zip(s) {
                let e = if eye == 0 { &mut o.left } else { &mut o.right };
                e.mask.coefs_mut()[4 * i..4 * i + 4].copy_from_slice(&s.0);
            }
        });
    }
    let mut payloads = Vec::new();
    for party in PartyId::ALL {
        let mut buf = vec![0u8; payload_len(party)];
        encode_payload(party, &meta.request_id, &shares[party.index()], &mut buf)?;
        payloads.push(buf);
    }
    let keys = dir.join("keys");
    let seed = ocelli_node::keys::read_key32(&keys.join("orb/orb-signing.key"))?;
    let orb = OrbSigningKey::from_bytes(&seed);
    let bundle: [u8; 96] = std::fs::read(keys.join("node-public-keys.bin"))?
        .try_into()
        .map_err(|_| "node-public-keys.bin is not 96 bytes")?;
    let nodes = NodePublicKeys::from_bytes(&bundle).map_err(|e| e.to_string())?;
    let mut out = vec![0u8; envelope_len(meta)];
    let n = hazmat_seal_plaintexts(
        &mut OsRng,
        meta,
        [&payloads[0], &payloads[1], &payloads[2]],
        &nodes,
        &orb,
        &mut out,
    )?;
    out.truncate(n);
    Ok(out)
}

async fn ask_malformed(dir: &Path, orb: &Orb, meta: &RequestMeta) -> Res<NodeResult> {
    orb.submit(&malformed_envelope(dir, meta)?).await?;
    orb.result(&meta.request_id, Duration::from_secs(300)).await
}

/// Asks for every person at once (a few batches).
async fn ask_all(orb: &Orb, t: RequestType, people: &[Person]) -> Res<Vec<NodeResult>> {
    futures::future::join_all(people.iter().map(|p| ask(orb, t, p)))
        .await
        .into_iter()
        .collect()
}

/// A malformed reset and a malformed re-authentication of serial 1 are refused; newcomers
/// still enrol and serial 1 still re-authenticates with its own iris.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_reset_is_refused() -> Res {
    let dir = tempfile::tempdir()?;
    let tweak = |t: &mut toml::Table| matching(t, "threshold", 0.345.into());
    let (deployment, listeners) = Deployment::open_or_create(dir.path(), &tweak).await?;
    let cluster = LocalCluster::start(&deployment, listeners).await?;
    let orb = deployment.orb()?;
    let mut rng = ChaCha20Rng::seed_from_u64(54);
    use RequestType as T;
    use ResultStatus as S;

    let people: Vec<Person> = (0..20).map(|_| person(&mut rng)).collect();
    let results = ask_all(&orb, T::Uniqueness, &people).await?;
    assert!(results.iter().all(|r| status(r) == S::UniqueEnrolled));
    let first = results
        .iter()
        .position(|r| r.serial_id == 1)
        .ok_or("no serial 1")?;

    // A reset alone in its batch: nothing to match, but its shares are checked.
    let reset = RequestMeta {
        serial_id: 1,
        ..meta(T::Reset)
    };
    let r = ask_malformed(dir.path(), &orb, &reset).await?;
    assert_eq!(status(&r), S::MalformedShares, "{}", r.detail);
    assert_eq!(r.serial_id, 1);
    // The same shares as a re-authentication would match serial 1 whatever its iris.
    let reauth = RequestMeta {
        serial_id: 1,
        ..meta(T::Reauth)
    };
    let r = ask_malformed(dir.path(), &orb, &reauth).await?;
    assert_eq!(status(&r), S::MalformedShares, "{}", r.detail);

    let newcomers: Vec<Person> = (0..10).map(|_| person(&mut rng)).collect();
    for r in ask_all(&orb, T::Uniqueness, &newcomers).await? {
        assert_eq!(status(&r), S::UniqueEnrolled, "{}", r.detail);
    }
    assert_eq!(cluster.states()[0].shares().len(), 30);

    // Serial 1 still holds its own shares.
    let reauth = |p: Person| {
        let orb = &orb;
        async move {
            let m = RequestMeta {
                serial_id: 1,
                ..meta(T::Reauth)
            };
            orb.submit(&orb.envelope(&mut OsRng, &m, &p.0, &p.1)?)
                .await?;
            Res::Ok(status(
                &orb.result(&m.request_id, Duration::from_secs(300)).await?,
            ))
        }
    };
    assert_eq!(
        reauth(recapture(&mut rng, &people[first])).await?,
        S::ReauthMatch
    );
    assert_eq!(reauth(person(&mut rng)).await?, S::ReauthNoMatch);
    cluster.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_well_formed_reset_applies_and_a_malformed_enrolment_is_refused() -> Res {
    let dir = tempfile::tempdir()?;
    let tweak = |t: &mut toml::Table| matching(t, "threshold", 0.345.into());
    let (deployment, listeners) = Deployment::open_or_create(dir.path(), &tweak).await?;
    let cluster = LocalCluster::start(&deployment, listeners).await?;
    let orb = deployment.orb()?;
    let mut rng = ChaCha20Rng::seed_from_u64(55);
    use RequestType as T;
    use ResultStatus as S;

    let (a, b, c) = (person(&mut rng), person(&mut rng), person(&mut rng));
    for p in [&a, &b] {
        assert_eq!(
            status(&ask(&orb, T::Uniqueness, p).await?),
            S::UniqueEnrolled
        );
    }
    let enrolled = || cluster.states()[0].shares().len();

    // Serial 1 (a) reset to c's irises: re-authentication then knows c, not a.
    let as_serial_1 = |t: RequestType| RequestMeta {
        serial_id: 1,
        ..meta(t)
    };
    let m = as_serial_1(T::Reset);
    orb.submit(&orb.envelope(&mut OsRng, &m, &c.0, &c.1)?)
        .await?;
    let r = orb.result(&m.request_id, Duration::from_secs(300)).await?;
    assert_eq!((status(&r), r.serial_id), (S::Reset, 1), "{}", r.detail);
    for (p, want) in [(&c, S::ReauthMatch), (&a, S::ReauthNoMatch)] {
        let m = as_serial_1(T::Reauth);
        let p = recapture(&mut rng, p);
        orb.submit(&orb.envelope(&mut OsRng, &m, &p.0, &p.1)?)
            .await?;
        let r = orb.result(&m.request_id, Duration::from_secs(300)).await?;
        assert_eq!(status(&r), want, "{}", r.detail);
    }

    // A crafted enrolment is refused and not enrolled; it is no candidate for the batch's
    // later requests either.
    let m = meta(T::Uniqueness);
    let envelope = malformed_envelope(dir.path(), &m)?;
    let d = person(&mut rng);
    let after = meta(T::Uniqueness);
    let d_envelope = orb.envelope(&mut OsRng, &after, &d.0, &d.1)?;
    orb.submit(&envelope).await?;
    orb.submit(&d_envelope).await?;
    let r = orb.result(&m.request_id, Duration::from_secs(300)).await?;
    assert_eq!(
        (status(&r), r.serial_id),
        (S::MalformedShares, 0),
        "{}",
        r.detail
    );
    let r = orb
        .result(&after.request_id, Duration::from_secs(300))
        .await?;
    assert_eq!(status(&r), S::UniqueEnrolled, "{}", r.detail);
    assert_eq!(enrolled(), 3);
    let r = ask(&orb, T::Uniqueness, &person(&mut rng)).await?;
    assert_eq!(status(&r), S::UniqueEnrolled, "{}", r.detail);
    assert_eq!(enrolled(), 4);
    cluster.shutdown().await
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
    assert_eq!(report.reauthentications, 20);
    assert_eq!(report.failed_reauthentications, 0);
    // The one period opened at the end holds every re-authentication, each of another person.
    let [impostor, _, reauthentication] = report.stats_pairs.expect("the period opened");
    assert!(impostor > 0);
    assert_eq!(reauthentication, 20);
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

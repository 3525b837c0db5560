//! Envelope versions at intake: version 2 (X-Wing) is accepted and stored; version 1 is
//! refused with its own status, and nothing stored, once the node is set to refuse it; a node
//! inside its migration window accepts both.

#[path = "support/cluster.rs"]
mod cluster;

use std::sync::Arc;
use std::time::Duration;

use cluster::{reason, Cluster, Res};
use ocelli_node::batch::NotEvaluated;
use ocelli_node::clock::now_ms;
use sdk_orb::envelope::v2::seal_envelope_v2_to_vec;
use sdk_orb::keys::NodeHybridPublicKeys;
use sdk_orb::RequestType;

fn hybrid_keys(c: &Cluster) -> Res<NodeHybridPublicKeys> {
    let bytes: [u8; NodeHybridPublicKeys::BYTES] = std::fs::read(c.keys.public_keys_v2())?
        .try_into()
        .map_err(|_| "node-public-keys-v2.bin length")?;
    Ok(NodeHybridPublicKeys::from_bytes(&bytes)?)
}

fn envelope_v2(c: &mut Cluster) -> Res<Vec<u8>> {
    let keys = hybrid_keys(c)?;
    let meta = c.meta(RequestType::Uniqueness, 0, now_ms());
    let left = sdk_orb::template::random(&mut c.rng, 0.1);
    let right = sdk_orb::template::random(&mut c.rng, 0.1);
    Ok(seal_envelope_v2_to_vec(
        &mut c.rng, &meta, &left, &right, &keys, &c.orb,
    )?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_version_1_stores_nothing_and_version_2_is_accepted() -> Res {
    let mut c = Cluster::start_with(Arc::new(NotEvaluated), &|cfg| {
        cfg.envelope.refuse_v1 = true;
    })
    .await?;
    let before = c.fingerprints();
    let v1 = c.envelope();
    for r in c.submit_all(&v1).await {
        let s = r
            .err()
            .ok_or("version 1 accepted by a node that refuses it")?;
        assert_eq!(s.code(), tonic::Code::FailedPrecondition, "{s:?}");
        assert_eq!(reason(&s), "version1_refused");
        assert!(s.message().contains("seal version 2"), "{}", s.message());
    }
    assert_eq!(before, c.fingerprints());

    let v2 = envelope_v2(&mut c)?;
    for r in c.submit_all(&v2).await {
        r?;
    }
    c.wait_drained(Duration::from_secs(20)).await?;
    assert_ne!(before, c.fingerprints());
    let summary = c.assert_stores_agree();
    assert_eq!(summary.requests.len(), 1, "{summary:?}");
    c.stop_all().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_the_window_both_versions_are_accepted_and_after_it_version_1_is_refused() -> Res {
    let mut c = Cluster::start_with(Arc::new(NotEvaluated), &|cfg| {
        cfg.envelope.accept_v1_until = Some("2999-01-01T00:00:00Z".into());
    })
    .await?;
    for env in [c.envelope(), envelope_v2(&mut c)?] {
        for r in c.submit_all(&env).await {
            r?;
        }
    }
    c.wait_drained(Duration::from_secs(20)).await?;
    assert_eq!(c.assert_stores_agree().requests.len(), 2);
    c.stop_all().await?;

    let mut c = Cluster::start_with(Arc::new(NotEvaluated), &|cfg| {
        cfg.envelope.accept_v1_until = Some("2020-01-01T00:00:00Z".into());
    })
    .await?;
    let before = c.fingerprints();
    let v1 = c.envelope();
    for r in c.submit_all(&v1).await {
        let s = r.err().ok_or("version 1 accepted after the window")?;
        assert_eq!(reason(&s), "version1_refused");
    }
    assert_eq!(before, c.fingerprints());
    c.stop_all().await?;
    Ok(())
}

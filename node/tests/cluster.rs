//! Three real nodes (keygen certificates, TLS, redb) on 127.0.0.1 port 0.

#[path = "support/cluster.rs"]
mod cluster;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{Cluster, Res};
use ocelli_node::batch::{DangerEnrolEverythingForTests, NotEvaluated};
use shared_proto::v1::ResultStatus;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_envelopes_are_stored_identically_and_answered_not_evaluated() -> Res {
    let mut c = Cluster::start(Arc::new(NotEvaluated)).await?;
    let t = Instant::now();
    let envs: Vec<Vec<u8>> = (0..5).map(|_| c.envelope()).collect();
    eprintln!("sealed 5 envelopes in {:?}", t.elapsed());
    for e in &envs {
        for r in c.submit_all(e).await {
            r?;
        }
    }
    c.wait_drained(Duration::from_secs(20)).await?;
    let s = c.summaries();
    assert_eq!(s[0].requests.len(), 5);
    assert_eq!(s[0], s[1]);
    assert_eq!(s[1], s[2]);
    assert!(
        s[0].serials.is_empty(),
        "nothing may be enrolled unevaluated"
    );
    for (_, (_, _, result)) in &s[0].requests {
        let r: shared_proto::v1::NodeResult =
            prost::Message::decode(result.as_deref().ok_or("missing result")?)?;
        assert_eq!(r.status, ResultStatus::NotEvaluated as i32);
    }
    c.stop_all().await?;
    Ok(())
}

//! A request whose evaluation fails on every attempt, at every node, in a real three-node
//! cluster: it is quarantined after `batch.max_failed_attempts` attempts alone, with the same
//! signed result at all three nodes, while the requests around it are answered as usual and
//! every node stays up and ready.
//!
//! The production evaluator has no failure that one request sets off, so the nodes here run
//! an evaluator that enrols everyone but fails on the requests it is told are poison: by
//! panicking, or by breaking its contract (too few outcomes).
#![allow(clippy::unwrap_used)]

#[path = "support/cluster.rs"]
mod cluster;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::{Cluster, Res};
use ocelli_node::batch::{
    BatchEvaluator, DangerEnrolEverythingForTests, EvalContext, EvalError, EvalRequest, Outcome,
};
use ocelli_node::clock::now_ms;
use ocelli_node::shares::ShareDb;
use prost::Message;
use sdk_orb::{RequestId, RequestType};
use shared_proto::v1::{NodeResult, ResultStatus, SubmitRequest};

#[derive(Clone, Copy, Debug)]
enum Failure {
    Panic,
    TooFewOutcomes,
}

/// Enrols everyone, and fails every batch that holds a poison request.
#[derive(Debug)]
struct Poisoned {
    poison: Mutex<HashSet<RequestId>>,
    failure: Failure,
    /// Evaluations of a poison request alone, at any node.
    alone: AtomicU32,
    /// Evaluations of a poison request with others, at any node.
    mixed: AtomicU32,
}

impl Poisoned {
    fn new(failure: Failure) -> Arc<Self> {
        Arc::new(Self {
            poison: Mutex::new(HashSet::new()),
            failure,
            alone: AtomicU32::new(0),
            mixed: AtomicU32::new(0),
        })
    }
}

impl BatchEvaluator for Poisoned {
    fn name(&self) -> &'static str {
        "poisoned"
    }

    fn evaluate(
        &self,
        ctx: &EvalContext<'_>,
        requests: &[EvalRequest],
        db: &ShareDb,
    ) -> Result<Vec<Outcome>, EvalError> {
        let poison = self.poison.lock().unwrap().clone();
        if requests.iter().any(|r| poison.contains(&r.id)) {
            let n = if requests.len() == 1 {
                &self.alone
            } else {
                &self.mixed
            };
            n.fetch_add(1, Ordering::SeqCst);
            match self.failure {
                Failure::Panic => panic!("a poison request in batch {}", ctx.batch_id),
                Failure::TooFewOutcomes => return Ok(Vec::new()),
            }
        }
        DangerEnrolEverythingForTests.evaluate(ctx, requests, db)
    }
}

/// The result of `id` at each node: the signed bytes are identical, and their status.
async fn status_everywhere(c: &Cluster, id: RequestId) -> Res<ResultStatus> {
    let mut results = Vec::new();
    for i in 0..3 {
        results.push(c.signed_result(i, &id).await?.result);
    }
    assert_eq!(results[0], results[1], "nodes 0 and 1 differ");
    assert_eq!(results[1], results[2], "nodes 1 and 2 differ");
    let r = NodeResult::decode(results[0].as_slice())?;
    Ok(ResultStatus::try_from(r.status)?)
}

/// A fresh uniqueness envelope and its request id.
fn envelope(c: &mut Cluster) -> (Vec<u8>, RequestId) {
    let meta = c.meta(RequestType::Uniqueness, 0, now_ms());
    (c.seal(&meta), meta.request_id)
}

/// Submits `envs` to parties 2 and 1 first, then to party 0: party 0 proposes only what it
/// holds, so they are most likely proposed together.
async fn submit(c: &Cluster, envs: &[Vec<u8>]) -> Res {
    for i in [2, 1, 0] {
        for env in envs {
            c.client(i)
                .orb
                .submit(SubmitRequest {
                    envelope: env.clone(),
                    or_serial_ids: Vec::new(),
                })
                .await?;
        }
    }
    Ok(())
}

async fn poison_is_quarantined_and_the_others_are_answered(failure: Failure) -> Res {
    let evaluator = Poisoned::new(failure);
    let mut c = Cluster::start_with(evaluator.clone(), &|cfg| {
        cfg.batch.max_failed_attempts = 3;
        // Submitting is slow in debug builds: nothing here may time out on the way.
        cfg.batch.request_timeout_ms = 60_000;
    })
    .await?;
    let mut envs = Vec::new();
    let mut before = Vec::new();
    for _ in 0..4 {
        let (env, id) = envelope(&mut c);
        envs.push(env);
        before.push(id);
    }
    let (env, poison) = envelope(&mut c);
    evaluator.poison.lock().unwrap().insert(poison);
    envs.insert(2, env);
    submit(&c, &envs).await?;
    c.wait_drained(Duration::from_secs(60)).await?;

    assert_eq!(
        status_everywhere(&c, poison).await?,
        ResultStatus::Quarantined
    );
    for id in &before {
        assert_eq!(
            status_everywhere(&c, *id).await?,
            ResultStatus::UniqueEnrolled
        );
        assert_eq!(
            c.state(0).store().failed_attempts(id)?,
            0,
            "an innocent was blamed"
        );
    }
    // Counted by party 0 alone, durably; evaluated alone exactly that often at each node.
    eprintln!(
        "evaluations of the poison with others: {}",
        evaluator.mixed.load(Ordering::SeqCst)
    );
    assert_eq!(c.state(0).store().failed_attempts(&poison)?, 3);
    assert_eq!(evaluator.alone.load(Ordering::SeqCst), 3 * 3);
    let cause = match failure {
        Failure::Panic => "panic",
        Failure::TooFewOutcomes => "deterministic",
    };
    let aborted = |i: usize| {
        c.state(i)
            .metrics()
            .batches_aborted
            .with_label_values(&[cause])
            .get()
    };
    assert!(aborted(0) >= 3, "party 0 counted {} aborts", aborted(0));
    if matches!(failure, Failure::Panic) {
        assert!(
            aborted(1) >= 3 && aborted(2) >= 3,
            "the peers count their panics"
        );
    }
    for i in 0..3 {
        let quarantined = c
            .state(i)
            .metrics()
            .results
            .with_label_values(&["quarantined"])
            .get();
        assert_eq!(quarantined, 1, "node {i}");
    }

    // No node went down: all ready, and the next request is answered as usual.
    c.wait_ready(Duration::from_secs(10)).await?;
    let (env, after) = envelope(&mut c);
    submit(&c, &[env]).await?;
    c.wait_drained(Duration::from_secs(20)).await?;
    assert_eq!(
        status_everywhere(&c, after).await?,
        ResultStatus::UniqueEnrolled
    );
    let s = c.assert_stores_agree();
    assert_eq!(s.serials.len(), before.len() + 1);
    c.stop_all().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_evaluation_panics_is_quarantined_and_no_node_goes_down() -> Res {
    poison_is_quarantined_and_the_others_are_answered(Failure::Panic).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_evaluation_fails_is_quarantined() -> Res {
    poison_is_quarantined_and_the_others_are_answered(Failure::TooFewOutcomes).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_failed_attempts_survive_a_restart_of_party_0() -> Res {
    let evaluator = Poisoned::new(Failure::TooFewOutcomes);
    let mut c = Cluster::start_with(evaluator.clone(), &|cfg| {
        cfg.batch.max_failed_attempts = 1_000;
        cfg.batch.request_timeout_ms = 60_000;
    })
    .await?;
    let (env, poison) = envelope(&mut c);
    evaluator.poison.lock().unwrap().insert(poison);
    submit(&c, &[env]).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.state(0).store().failed_attempts(&poison)? < 2 {
        assert!(
            Instant::now() < deadline,
            "party 0 did not count two failures"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.stop_node(0).await?;
    let config = c.configs[0].clone();
    let counted = tokio::task::spawn_blocking(move || {
        ocelli_node::node::open_store(&config)?.failed_attempts(&poison)
    })
    .await??;
    assert!(counted >= 2);

    // One more failure after the restart is the last one allowed.
    c.configs[0].batch.max_failed_attempts = counted + 1;
    let alone = evaluator.alone.load(Ordering::SeqCst);
    c.restart_node(0).await?;
    c.wait_drained(Duration::from_secs(60)).await?;
    assert_eq!(
        status_everywhere(&c, poison).await?,
        ResultStatus::Quarantined
    );
    assert_eq!(c.state(0).store().failed_attempts(&poison)?, counted + 1);
    assert_eq!(
        evaluator.alone.load(Ordering::SeqCst) - alone,
        3,
        "one attempt after the restart, at each node"
    );
    c.assert_stores_agree();
    c.stop_all().await?;
    Ok(())
}

//! Health that means progress: `/readyz` follows the peers, `/livez` turns 503 with a
//! reason when the batch loop cannot commit while requests wait and recovers with it, and
//! the alert rules and dashboard in docs/ops name only metrics the node exports.

#[path = "support/cluster.rs"]
mod cluster;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{http_get, sample, Cluster, Res};
use ocelli_node::batch::{
    BatchEvaluator, EvalContext, EvalError, EvalRequest, NotEvaluated, Outcome,
};
use ocelli_node::metrics::Metrics;
use ocelli_node::shares::ShareDb;
use shared_proto::v1::SubmitRequest;

/// Polls `path` on node `i` until its answer starts with `status` (e.g. "HTTP/1.1 503"),
/// returning the whole answer.
async fn wait_for(
    c: &Cluster,
    i: usize,
    path: &str,
    status: &str,
    within: Duration,
) -> Res<String> {
    let deadline = Instant::now() + within;
    loop {
        let r = http_get(c.configs[i].listen.metrics, path).await?;
        if r.starts_with(status) {
            return Ok(r);
        }
        if Instant::now() > deadline {
            return Err(format!("node {i} {path}: wanted {status}, last answer:\n{r}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const OK: &str = "HTTP/1.1 200";
const UNAVAILABLE: &str = "HTTP/1.1 503";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_is_503_until_both_peers_answer_and_while_one_is_down() -> Res {
    let (mut c, mut rest) =
        Cluster::start_partial(Arc::new(NotEvaluated), false, &|_| {}, &[0]).await?;
    // Node 0 serves but has never heard from its peers.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = http_get(c.configs[0].listen.metrics, "/readyz").await?;
    assert!(r.starts_with(UNAVAILABLE), "{r}");
    assert!(
        r.contains("peer 1 unreachable (never answered") && r.contains("peer 2 unreachable"),
        "{r}"
    );
    assert!(http_get(c.configs[0].listen.metrics, "/livez")
        .await?
        .starts_with(OK));

    for i in [1, 2] {
        let l = rest[i].take().ok_or("listeners")?;
        c.start_node(i, l).await?;
    }
    for i in 0..3 {
        let r = wait_for(&c, i, "/readyz", OK, Duration::from_secs(10)).await?;
        assert!(r.ends_with("ready\n"), "{r}");
    }
    let m = http_get(c.configs[0].listen.metrics, "/metrics").await?;
    assert_eq!(
        sample(&m, "ocelli_peer_up{peer=\"2\",party=\"0\"}"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(sample(&m, "ocelli_ready{party=\"0\"}"), Some(1.0), "{m}");

    c.stop_node(2).await?;
    let r = wait_for(&c, 0, "/readyz", UNAVAILABLE, Duration::from_secs(10)).await?;
    assert!(r.contains("peer 2 unreachable (last answered"), "{r}");
    assert!(!r.contains("peer 1"), "{r}");
    let m = http_get(c.configs[0].listen.metrics, "/metrics").await?;
    assert_eq!(
        sample(&m, "ocelli_peer_up{peer=\"2\",party=\"0\"}"),
        Some(0.0),
        "{m}"
    );
    assert_eq!(sample(&m, "ocelli_ready{party=\"0\"}"), Some(0.0), "{m}");

    c.restart_node(2).await?;
    wait_for(&c, 0, "/readyz", OK, Duration::from_secs(10)).await?;
    c.stop_all().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_reports_no_commit_while_a_peer_is_down_and_recovers() -> Res {
    let mut c = Cluster::start_with(Arc::new(NotEvaluated), &|cfg| {
        cfg.health.max_commit_gap_s = 1;
    })
    .await?;
    c.wait_ready(Duration::from_secs(10)).await?;
    assert!(http_get(c.configs[0].listen.metrics, "/livez")
        .await?
        .starts_with(OK));

    c.stop_node(2).await?;
    let env = c.envelope();
    for i in [0, 1] {
        c.client(i)
            .orb
            .submit(SubmitRequest {
                envelope: env.clone(),
                or_serial_ids: Vec::new(),
            })
            .await?;
    }
    let r = wait_for(&c, 0, "/livez", UNAVAILABLE, Duration::from_secs(10)).await?;
    assert!(
        r.contains("stuck: no batch committed for ")
            && r.contains("(bound 1 s) while 1 requests wait"),
        "{r}"
    );
    let m = http_get(c.configs[0].listen.metrics, "/metrics").await?;
    let aborted: f64 = ["peer_timeout", "peer_refused"]
        .iter()
        .filter_map(|cause| {
            sample(
                &m,
                &format!("ocelli_batches_aborted_total{{cause=\"{cause}\",party=\"0\"}}"),
            )
        })
        .sum();
    assert!(aborted >= 1.0, "{m}");
    assert!(
        sample(&m, "ocelli_oldest_pending_age_seconds{party=\"0\"}").unwrap_or(0.0) >= 1.0,
        "{m}"
    );

    // Node 2 back: the request is decided (it times out, node 2 never held it) and the loop
    // is live again.
    c.restart_node(2).await?;
    wait_for(&c, 0, "/livez", OK, Duration::from_secs(20)).await?;
    assert_eq!(c.state(0).pending_len(), 0);
    c.stop_all().await?;
    Ok(())
}

/// Fails every evaluation while `fail` is set, else answers "not evaluated": a batch loop that
/// cannot commit although every peer answers.
#[derive(Debug, Default)]
struct FailsWhile {
    fail: AtomicBool,
}

impl BatchEvaluator for FailsWhile {
    fn name(&self) -> &'static str {
        "fails-while-for-tests"
    }
    fn evaluate(
        &self,
        ctx: &EvalContext<'_>,
        requests: &[EvalRequest],
        db: &ShareDb,
    ) -> Result<Vec<Outcome>, EvalError> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(EvalError::NotServing);
        }
        NotEvaluated.evaluate(ctx, requests, db)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_reports_an_old_request_while_peers_are_up_and_recovers() -> Res {
    let ev = Arc::new(FailsWhile {
        fail: AtomicBool::new(true),
    });
    let mut c = Cluster::start_with(ev.clone(), &|cfg| {
        cfg.health.max_pending_age_s = 4;
    })
    .await?;
    c.wait_ready(Duration::from_secs(10)).await?;
    let env = c.envelope();
    for submitted in c.submit_all(&env).await {
        submitted?;
    }
    let r = wait_for(&c, 0, "/livez", UNAVAILABLE, Duration::from_secs(15)).await?;
    assert!(
        r.contains("stuck: oldest pending request ")
            && r.contains("(bound 4 s) while peers are up"),
        "{r}"
    );
    let m = http_get(c.configs[0].listen.metrics, "/metrics").await?;
    assert!(
        sample(
            &m,
            "ocelli_batches_aborted_total{cause=\"evaluation\",party=\"0\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{m}"
    );
    // Still ready: the peers answer; the node is stuck, not cut off.
    assert!(http_get(c.configs[0].listen.metrics, "/readyz")
        .await?
        .starts_with(OK));

    ev.fail.store(false, Ordering::SeqCst);
    wait_for(&c, 0, "/livez", OK, Duration::from_secs(10)).await?;
    let m = http_get(c.configs[0].listen.metrics, "/metrics").await?;
    assert_eq!(
        sample(&m, "ocelli_oldest_pending_age_seconds{party=\"0\"}"),
        Some(0.0),
        "{m}"
    );
    c.stop_all().await?;
    Ok(())
}

/// Every `ocelli_...` name in the alert rules and the dashboard is one the node exports
/// (a histogram's `_bucket`, `_sum` and `_count` included), and both files parse.
#[test]
fn alert_rules_and_dashboard_name_only_exported_metrics() -> Res {
    let metrics = Metrics::new(sdk_orb::PartyId::ALL[0]);
    let known = metrics.names();
    assert!(known.iter().any(|n| n == "ocelli_peer_up"), "{known:?}");
    let exported = |name: &str| {
        known.iter().any(|k| k == name)
            || ["_bucket", "_sum", "_count"].iter().any(|s| {
                name.strip_suffix(s)
                    .is_some_and(|b| known.iter().any(|k| k == b))
            })
    };
    let ops = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ops");
    let rules = std::fs::read_to_string(ops.join("alerts.yml"))?;
    let dashboard = std::fs::read_to_string(ops.join("grafana-dashboard.json"))?;

    // The dashboard is JSON with panels, each with at least one query.
    let json: serde_json::Value = serde_json::from_str(&dashboard)?;
    let panels = json["panels"].as_array().ok_or("dashboard has no panels")?;
    assert!(panels.len() >= 6);
    for p in panels {
        let targets = p["targets"].as_array().ok_or("panel without targets")?;
        assert!(
            targets
                .iter()
                .all(|t| t["expr"].as_str().is_some_and(|e| !e.is_empty())),
            "{p}"
        );
    }
    // The rules file: every alert has an expression, a duration, a severity and a summary.
    let alerts = rules.matches("- alert: ").count();
    assert!(alerts >= 4, "{alerts} alerts");
    for key in ["expr: ", "for: ", "severity: ", "summary: ", "runbook: "] {
        assert_eq!(
            rules.matches(key).count(),
            alerts,
            "each alert needs one {key:?}"
        );
    }

    let mut mentioned = 0;
    for (file, text) in [
        ("alerts.yml", &rules),
        ("grafana-dashboard.json", &dashboard),
    ] {
        let mut rest = text.as_str();
        while let Some(at) = rest.find("ocelli_") {
            let tail = &rest[at..];
            let end = tail
                .find(|ch: char| !(ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_'))
                .unwrap_or(tail.len());
            let name = &tail[..end];
            assert!(
                exported(name),
                "{file} names {name}, which the node does not export"
            );
            mentioned += 1;
            rest = &tail[end..];
        }
    }
    for must in [
        "ocelli_oldest_pending_age_seconds",
        "ocelli_seconds_since_last_commit",
        "ocelli_batches_aborted_total",
        "ocelli_peer_up",
        "ocelli_ready",
        "ocelli_mpc_key_agreement_failures_total",
        "quarantined",
    ] {
        assert!(rules.contains(must), "alerts.yml lacks {must}");
        assert!(dashboard.contains(must), "the dashboard lacks {must}");
    }
    assert!(mentioned > 10);
    // Every alert's runbook is a heading of the operations guide.
    let guide = std::fs::read_to_string(ops.join("../operations.md"))?;
    for line in rules.lines() {
        if let Some(name) = line.trim().strip_prefix("- alert: ") {
            assert!(
                guide.contains(&format!("\n### {name}\n")),
                "docs/operations.md has no section for {name}"
            );
        }
    }
    Ok(())
}

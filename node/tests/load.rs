//! A bounded load run over loopback: envelopes through three nodes, no
//! loss, memory sampled as it goes. The normal suite runs a small version;
//! the figures in docs/benchmarks.md come from the ignored full run:
//!
//! ```text
//! cargo test --release -p ocelli-node --test load -- --ignored --nocapture
//! ```
//! (`OCELLI_LOAD_N` sets the count, default 2,000.)

#[path = "support/cluster.rs"]
mod cluster;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{Cluster, Res};
use ocelli_node::batch::NotEvaluated;
use shared_proto::v1::SubmitRequest;

/// Resident set size of this process (all three nodes), KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

async fn run_load(n: usize, chunk: usize, in_flight: usize) -> Res {
    let mut c = Cluster::start_with(Arc::new(NotEvaluated), &|cfg| {
        cfg.batch.request_timeout_ms = 120_000;
        cfg.batch.max_size = 256;
        cfg.intake.freshness_window_s = 3_600;
    })
    .await?;
    let clients: Vec<_> = (0..3).map(|i| c.client(i)).collect();
    let mut latencies = Vec::with_capacity(n * 3);
    let mut intake_time = Duration::ZERO;
    let mut seal_time = Duration::ZERO;
    let mut rss = vec![rss_kib()];
    let started = Instant::now();
    let mut done = 0;
    while done < n {
        let m = chunk.min(n - done);
        let t = Instant::now();
        let envs: Vec<Arc<Vec<u8>>> = (0..m).map(|_| Arc::new(c.envelope())).collect();
        seal_time += t.elapsed();
        let t = Instant::now();
        let sem = Arc::new(tokio::sync::Semaphore::new(in_flight));
        let mut tasks = Vec::with_capacity(m * 3);
        for e in &envs {
            for client in &clients {
                let mut client = client.clone();
                let e = e.clone();
                let permit = sem.clone().acquire_owned().await?;
                tasks.push(tokio::spawn(async move {
                    let t = Instant::now();
                    let r = client
                        .orb
                        .submit(SubmitRequest {
                            envelope: e.to_vec(),
                            or_serial_ids: Vec::new(),
                        })
                        .await;
                    drop(permit);
                    r.map(|_| t.elapsed())
                }));
            }
        }
        for t in tasks {
            latencies.push(t.await??);
        }
        intake_time += t.elapsed();
        done += m;
        drop(envs);
        rss.push(rss_kib());
    }
    let submitted = started.elapsed();
    c.wait_drained(Duration::from_secs(300)).await?;
    let end_to_end = started.elapsed();
    let s = c.assert_stores_agree();
    assert_eq!(s.requests.len(), n, "requests lost");
    assert!(s.requests.values().all(|r| r.result.is_some()));
    latencies.sort();
    let batches = c.state(0).metrics().last_batch.get();
    let bytes: Vec<i64> = (0..3)
        .map(|i| c.state(i).metrics().store_bytes.get())
        .collect();
    println!("## load run: {n} envelopes x 3 nodes, {in_flight} submissions in flight");
    println!("envelope size:           {} bytes", c.envelope().len());
    println!(
        "sealing (test side):     {:.1} s total",
        seal_time.as_secs_f64()
    );
    println!(
        "intake:                  {:.2} s for {} submissions = {:.0} submissions/s ({:.0} envelopes/s through all three nodes)",
        intake_time.as_secs_f64(),
        n * 3,
        (n * 3) as f64 / intake_time.as_secs_f64(),
        n as f64 / intake_time.as_secs_f64()
    );
    println!(
        "submit latency:          p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        percentile(&latencies, 1.0).as_secs_f64() * 1e3
    );
    println!(
        "all answered after:      {:.2} s (submission phase {:.2} s), {batches} batches",
        end_to_end.as_secs_f64(),
        submitted.as_secs_f64()
    );
    println!("store files:             {bytes:?} bytes");
    println!(
        "process RSS (KiB) per chunk of {chunk}: {}",
        rss.iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    c.stop_all().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_smoke() -> Res {
    run_load(30, 15, 16).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full load run for docs/benchmarks.md; run in release"]
async fn load_full() -> Res {
    let n = std::env::var("OCELLI_LOAD_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    run_load(n, 250, 48).await
}

//! Helpers of `trust.rs`: reading results as the results consumer, hand-made encodings,
//! test evaluators, and acting as a misbehaving party.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ocelli_node::batch::{
    BatchEvaluator, DangerEnrolEverythingForTests, EvalContext, EvalError, EvalRequest, Outcome,
};
use ocelli_node::client::{agree, OrbClient};
use ocelli_node::clock::now_ms;
use ocelli_node::keys::{batch_signing_message, read_key32};
use ocelli_node::shares::ShareDb;
use ocelli_node::tls::NodeTls;
use sdk_orb::envelope::EnvelopeView;
use sdk_orb::keys::{NodePublicKeys, NodeSecretKey};
use sdk_orb::{PartyId, RequestType};
use shared_proto::v1::peer_service_client::PeerServiceClient;
use shared_proto::v1::{
    BatchSignature, GetResultRequest, ResultStatus, SignedResult, SubmitRequest,
};

pub use crate::cluster::http_get;
use crate::cluster::{Cluster, Res};

/// Three results of `id`, fetched from the three nodes by the results consumer (a gateway
/// reads a node's result only where it submitted the request).
pub async fn results_of(c: &Cluster, id: &[u8; 16]) -> Res<Vec<SignedResult>> {
    let mut out = Vec::new();
    for i in 0..3 {
        let r = c
            .client_as(i, &c.keys.results_consumer())
            .orb
            .get_result(GetResultRequest {
                request_id: id.to_vec(),
            })
            .await?;
        out.push(r.into_inner());
    }
    Ok(out)
}

/// The request id of an envelope.
pub fn id_of(env: &[u8]) -> Res<[u8; 16]> {
    Ok(EnvelopeView::parse(env)
        .map_err(|e| format!("{e:?}"))?
        .request_id()
        .0)
}

/// Reads a varint at `at`; returns it and the position after it.
pub fn varint(b: &[u8], mut at: usize) -> (u64, usize) {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let x = b[at];
        v |= u64::from(x & 0x7f) << shift;
        at += 1;
        if x < 0x80 {
            return (v, at);
        }
        shift += 7;
    }
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Re-encodes a canonical envelope with `extra` inserted after top-level field `after`, or,
/// with `in_payload`, at the start of the first sealed payload (party 0's).
pub fn with_explicit_zero(env: &[u8], after: u64, extra: &[u8], in_payload: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut done = false;
    while at < env.len() {
        let start = at;
        let (key, next) = varint(env, at);
        let (field, wire) = (key >> 3, key & 7);
        at = next;
        if wire == 0 {
            at = varint(env, at).1;
        } else {
            let (len, body) = varint(env, at);
            at = body + len as usize;
            if in_payload && field == 8 && !done {
                let mut inner = extra.to_vec();
                inner.extend_from_slice(&env[body..at]);
                put_varint(&mut out, key);
                put_varint(&mut out, inner.len() as u64);
                out.extend_from_slice(&inner);
                done = true;
                continue;
            }
        }
        out.extend_from_slice(&env[start..at]);
        if !in_payload && field == after && !done {
            out.extend_from_slice(extra);
            done = true;
        }
    }
    out
}

/// Submits `env` to the three nodes as `client` (one per node).
pub async fn submit_via(clients: &[OrbClient], env: &[u8]) -> Res {
    for c in clients {
        c.orb
            .clone()
            .submit(SubmitRequest {
                envelope: env.to_vec(),
                or_serial_ids: Vec::new(),
            })
            .await?;
    }
    Ok(())
}

pub fn code<T>(r: Result<T, tonic::Status>) -> tonic::Code {
    match r {
        Ok(_) => tonic::Code::Ok,
        Err(s) => s.code(),
    }
}

/// Sets party 0's batch interval (an hour: no batch runs; or fast) and restarts it.
pub async fn party0_batches(c: &mut Cluster, run: bool) -> Res {
    c.configs[0].batch.interval_ms = if run { 20 } else { 3_600_000 };
    c.restart_node(0).await
}

/// Rotates `party`'s HPKE key as docs/operations.md says: publishes the new key bundle to orbs
/// (`keygen`'s `node-public-keys.bin`), sets the new key with the old one as
/// `hpke_previous_secret` if `keep`, and restarts the node alone. Returns the bundle orbs seal
/// to from now on.
pub async fn rotate_hpke(c: &mut Cluster, party: usize, keep: bool) -> Res<NodePublicKeys> {
    let new = NodeSecretKey::generate(&mut c.rng);
    let path = c.dir.path().join(format!("hpke-rotated-{party}.key"));
    std::fs::write(&path, hex::encode(*new.to_bytes()))?;
    let mut bundle = c.node_keys.to_bytes();
    bundle[32 * party..32 * (party + 1)].copy_from_slice(&new.public_key().to_bytes());
    std::fs::write(c.keys.public_keys(), bundle)?;
    let old = std::mem::replace(&mut c.configs[party].keys.hpke_secret, path);
    c.configs[party].keys.hpke_previous_secret = keep.then_some(old);
    c.restart_node(party).await?;
    Ok(NodePublicKeys::from_bytes(&bundle).map_err(|_| "bundle")?)
}

/// Status of the agreed result of `id` (three identical, validly signed results).
pub async fn agreed_status(c: &Cluster, id: &[u8; 16]) -> Res<ResultStatus> {
    let keys = [0, 1, 2].map(|i| c.state(i).result_verifying_key());
    let r = agree(&results_of(c, id).await?, &keys, id)?;
    Ok(ResultStatus::try_from(r.status)?)
}

/// Enrols one person (serial 1) and leaves party 0 not batching, with a deletion of serial 1
/// and a uniqueness request pending on all three nodes. Returns their ids.
pub async fn pending_deletion_and_enrolment(c: &mut Cluster) -> Res<([u8; 16], [u8; 16])> {
    let first = c.envelope();
    for r in c.submit_all(&first).await {
        r?;
    }
    c.wait_drained(Duration::from_secs(20)).await?;
    assert_eq!(
        agreed_status(c, &id_of(&first)?).await?,
        ResultStatus::UniqueEnrolled
    );
    party0_batches(c, false).await?;
    let meta = c.meta(RequestType::Deletion, 1, now_ms());
    let deletion = c.seal(&meta);
    let enrol = c.envelope();
    for env in [&deletion, &enrol] {
        for r in c.submit_all(env).await {
            r?;
        }
    }
    assert!((0..3).all(|i| c.state(i).pending_len() == 2));
    Ok((id_of(&deletion)?, id_of(&enrol)?))
}

/// Enrols every uniqueness request like [`DangerEnrolEverythingForTests`], taking `delay_ms`
/// per batch while `slow` is set: a batch longer than the request timeout.
#[derive(Debug, Default)]
pub struct SlowForTests {
    pub slow: AtomicBool,
    pub delay_ms: u64,
}

impl BatchEvaluator for SlowForTests {
    fn name(&self) -> &'static str {
        "slow-for-tests"
    }
    fn evaluate(
        &self,
        ctx: &EvalContext<'_>,
        requests: &[EvalRequest],
        db: &ShareDb,
    ) -> Result<Vec<Outcome>, EvalError> {
        if self.slow.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(self.delay_ms));
        }
        DangerEnrolEverythingForTests.evaluate(ctx, requests, db)
    }
}

/// Fails every evaluation: a node whose MPC did not complete (nothing of the batch stored, its
/// requests still pending).
#[derive(Debug)]
pub struct FailsForTests;

impl BatchEvaluator for FailsForTests {
    fn name(&self) -> &'static str {
        "fails-for-tests"
    }
    fn evaluate(
        &self,
        _: &EvalContext<'_>,
        _: &[EvalRequest],
        _: &ShareDb,
    ) -> Result<Vec<Outcome>, EvalError> {
        Err(EvalError::NotServing)
    }
}

/// Enrols every uniqueness request like [`DangerEnrolEverythingForTests`] and records that it
/// evaluated a batch.
#[derive(Debug, Default)]
pub struct SignalsForTests {
    pub evaluated: AtomicBool,
}

impl BatchEvaluator for SignalsForTests {
    fn name(&self) -> &'static str {
        "signals-for-tests"
    }
    fn evaluate(
        &self,
        ctx: &EvalContext<'_>,
        requests: &[EvalRequest],
        db: &ShareDb,
    ) -> Result<Vec<Outcome>, EvalError> {
        let out = DangerEnrolEverythingForTests.evaluate(ctx, requests, db);
        self.evaluated.store(true, Ordering::SeqCst);
        out
    }
}

/// Runs one uniqueness request as batch 1 such that party 2 evaluates and attests it, then
/// goes down before the batch is finalised: parties 0 and 1 apply it, party 2 (left stopped)
/// holds the request as pending. Party 0 evaluates slowly while this happens. Returns the
/// envelope.
pub async fn party2_misses_finalisation(c: &mut Cluster) -> Res<Vec<u8>> {
    let slow = std::sync::Arc::new(SlowForTests {
        slow: AtomicBool::new(true),
        delay_ms: 2_000,
    });
    let signals = std::sync::Arc::new(SignalsForTests::default());
    let good = std::mem::replace(&mut c.evaluator, slow.clone());
    c.restart_node(0).await?;
    c.evaluator = signals.clone();
    c.restart_node(2).await?;
    c.evaluator = good;
    let env = c.envelope();
    submit_everywhere(c, &env).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !signals.evaluated.load(Ordering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "party 2 evaluated nothing"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Graceful: its ack still goes out, while party 0 is still evaluating.
    c.stop_node(2).await?;
    while c.state(0).store().meta()?.last_applied_batch < 1 {
        assert!(std::time::Instant::now() < deadline, "no batch");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    slow.slow.store(false, Ordering::SeqCst);
    Ok(env)
}

pub async fn submit_everywhere(c: &Cluster, env: &[u8]) -> Res {
    for r in c.submit_all(env).await {
        r?;
    }
    Ok(())
}

/// A node-to-node client of node `to` with party `from`'s identity: what a misbehaving party
/// `from` can send.
pub fn peer_client(
    c: &Cluster,
    from: usize,
    to: usize,
) -> Res<PeerServiceClient<tonic::transport::Channel>> {
    let tls = NodeTls::load(&c.configs[from])?;
    let cfg = tls
        .peer_clients
        .get(&PartyId::ALL[to])
        .ok_or("no client")?
        .clone();
    let ch = ocelli_node::tls::channel(
        c.configs[to].listen.peer,
        "127.0.0.1",
        cfg,
        Duration::from_secs(10),
    )?;
    Ok(PeerServiceClient::new(ch))
}

/// Party `party`'s attestation of `digest`, made with its result key (what that party, if it
/// misbehaves, can produce).
pub fn attest_as(
    c: &Cluster,
    party: PartyId,
    key_of: PartyId,
    digest: &[u8; 32],
) -> Res<BatchSignature> {
    use ed25519_dalek::Signer;
    let seed = read_key32(&c.keys.party_file(key_of, "result-signing.key"))?;
    let key = ed25519_dalek::SigningKey::from_bytes(&seed);
    Ok(BatchSignature {
        party_id: u32::from(party.get()),
        signature: key
            .sign(&batch_signing_message(party, digest))
            .to_bytes()
            .to_vec(),
    })
}

/// How many batches `node` refused as unattested, by its metrics page.
pub async fn refused_unattested(c: &Cluster, node: usize) -> Res<u64> {
    batches_counted(c, node, "refused_unattested").await
}

/// How many recorded outcomes `node` refused as not the ones it attested, by its metrics page.
pub async fn not_attested_here(c: &Cluster, node: usize) -> Res<u64> {
    batches_counted(c, node, "refused_not_attested_here").await
}

/// `ocelli_batches_total{outcome}` on `node`'s metrics page.
async fn batches_counted(c: &Cluster, node: usize, outcome: &str) -> Res<u64> {
    let page = http_get(c.configs[node].listen.metrics, "/metrics").await?;
    let label = format!("outcome=\"{outcome}\"");
    Ok(page
        .lines()
        .find(|l| l.starts_with("ocelli_batches_total") && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}

/// Three `ocelli-node serve` processes on a fresh deployment directory (`Deployment`), party
/// `limited` started with a descriptor limit (soft and hard) of `open_files`. Killed on drop.
pub struct NodeProcesses {
    pub deployment: ocelli_node::cluster::Deployment,
    children: Vec<std::process::Child>,
    logs: Vec<std::path::PathBuf>,
    _dir: tempfile::TempDir,
}

impl NodeProcesses {
    pub async fn start(limited: usize, open_files: u32) -> Res<Self> {
        let dir = tempfile::tempdir()?;
        let tweak = |t: &mut toml::Table| {
            let mut batch = toml::Table::new();
            batch.insert("interval_ms".into(), 20.into());
            batch.insert("peer_rpc_timeout_ms".into(), 2_000.into());
            t.insert("batch".into(), batch.into());
            let mut matching = toml::Table::new();
            matching.insert("round_timeout_ms".into(), 10_000.into());
            matching.insert("cpu_tuning".into(), false.into());
            t.insert("matching".into(), matching.into());
        };
        let (deployment, listeners) =
            ocelli_node::cluster::Deployment::open_or_create(dir.path(), &tweak).await?;
        // The processes bind these ports.
        drop(listeners);
        let mut children = Vec::new();
        let mut logs = Vec::new();
        for party in 0..3 {
            let config = dir.path().join(format!("keys/party{party}.toml"));
            let log = dir.path().join(format!("party{party}.log"));
            let mut cmd = if party == limited {
                // `ulimit -n` sets the soft and the hard limit: the node cannot raise it.
                let mut sh = std::process::Command::new("sh");
                sh.arg("-c")
                    .arg(format!("ulimit -n {open_files} && exec \"$0\" \"$@\""))
                    .arg(env!("CARGO_BIN_EXE_ocelli-node"));
                sh
            } else {
                std::process::Command::new(env!("CARGO_BIN_EXE_ocelli-node"))
            };
            let child = cmd
                .arg("serve")
                .arg("--config")
                .arg(&config)
                .env("OCELLI_LOG", "info")
                .env("NO_COLOR", "1")
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(&log)?)
                .spawn()?;
            children.push(child);
            logs.push(log);
        }
        let nodes = Self {
            deployment,
            children,
            logs,
            _dir: dir,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        for cfg in &nodes.deployment.configs {
            while !http_get(cfg.listen.metrics, "/readyz")
                .await
                .is_ok_and(|r| r.starts_with("HTTP/1.1 200"))
            {
                if std::time::Instant::now() > deadline {
                    return Err(format!("party {} did not become ready", cfg.party_id).into());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(nodes)
    }

    /// The last lines of party `party`'s log.
    pub fn log_tail(&self, party: usize) -> String {
        let log = std::fs::read_to_string(&self.logs[party]).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for NodeProcesses {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Reads from `conn` until the other side closes it; how long that took, or an error if it
/// is still open after `bound`.
pub async fn closed_within<S: tokio::io::AsyncRead + Unpin>(
    mut conn: S,
    bound: Duration,
) -> Res<Duration> {
    use tokio::io::AsyncReadExt;
    let started = std::time::Instant::now();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(bound, async {
        // A reset or an end of TLS without close_notify is a close too.
        while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await
    .map_err(|_| format!("still open after {bound:?}"))?;
    Ok(started.elapsed())
}

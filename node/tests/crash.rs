//! kill -9 a node (the real binary) during intake, restart it: the three
//! stores agree again and nothing acknowledged is lost. Then SIGTERM: every
//! node exits 0.

#[path = "support/process.rs"]
mod process;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ocelli_node::client::OrbClient;
use ocelli_node::clock::now_ms;
use ocelli_node::keys::{keygen, read_key32, KeygenOptions, KeygenOutput};
use process::{
    check_share_snapshot, store_summary, submit_until_held, wait_drained, wait_ready, Node,
    PgTarget, Res, CALL_TIMEOUT,
};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;
use sdk_orb::envelope::{seal_envelope_to_vec, RequestMeta};
use sdk_orb::keys::{NodePublicKeys, OrbSigningKey};
use sdk_orb::{RequestId, RequestType};
use shared_proto::v1::SubmitRequest;

fn free_port() -> Res<u16> {
    // Bind port 0, read the port, release it for the child to bind.
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

fn write_config(
    dir: &Path,
    keys: &Path,
    party: u8,
    ports: &[[u16; 3]; 3],
    pg: PgTarget<'_>,
) -> Res<PathBuf> {
    let [o, p, m] = ports[party as usize];
    let mut s = format!(
        "party_id = {party}\ndata_dir = \"{}\"\n[listen]\norb = \"127.0.0.1:{o}\"\npeer = \"127.0.0.1:{p}\"\nmetrics = \"127.0.0.1:{m}\"\n\
         [tls]\nca = \"{k}/ca.pem\"\ncert = \"{k}/party{party}/tls.pem\"\nkey = \"{k}/party{party}/tls.key.pem\"\ngateways = [\"{k}/gateway0/tls.pem\"]\n\
         [keys]\nhpke_secret = \"{k}/party{party}/hpke.key\"\nresult_signing = \"{k}/party{party}/result-signing.key\"\n\
         orb_allow_list = \"{k}/orb-allow-list.txt\"\n[batch]\ninterval_ms = 20\nrequest_timeout_ms = 60000\npeer_rpc_timeout_ms = 1000\ncommit_timeout_ms = 30000\n[matching]\nround_timeout_ms = 10000\n",
        dir.join(format!("data{party}")).display(),
        k = keys.display()
    );
    if let Some((url, prefix)) = pg {
        s.push_str(&format!(
            "[store]\nurl = \"{url}\"\nschema = \"{prefix}_p{party}\"\nsnapshot_interval_s = 1\n"
        ));
    }
    for peer in (0u8..3).filter(|&x| x != party) {
        s.push_str(&format!(
            "[[peers]]\nparty_id = {peer}\naddress = \"127.0.0.1:{}\"\ncert = \"{k}/party{peer}/tls.pem\"\nresult_key = \"{k}/party{peer}/result-verifying.pub\"\n",
            ports[peer as usize][1],
            k = keys.display()
        ));
    }
    let path = dir.join(format!("party{party}.toml"));
    std::fs::write(&path, s)?;
    Ok(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_intake_loses_nothing_acknowledged() -> Res {
    kill_9_run(None).await
}

/// The same on PostgreSQL stores (where `OCELLI_TEST_POSTGRES` names a server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_kill_9_during_intake_loses_nothing_acknowledged() -> Res {
    let Ok(url) = std::env::var("OCELLI_TEST_POSTGRES") else {
        eprintln!("skipping the PostgreSQL crash test: OCELLI_TEST_POSTGRES is unset (.ci/postgres.sh starts a server)");
        return Ok(());
    };
    let prefix = format!("crash_{}", now_ms());
    kill_9_run(Some((&url, &prefix))).await
}

/// How long an orb keeps retrying a submission to a node that is down.
const PATIENCE: Duration = Duration::from_secs(120);

/// The kill -9 runs go one at a time: two clusters at once on a two-core runner compete for
/// the cores and for ephemeral ports.
static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Three nodes started and ready. A port picked by `free_port` is free only until another
/// process's outgoing connection takes it; a node that cannot bind exits, and the cluster is
/// started again on new ports.
async fn start_cluster(
    dir: &Path,
    keys: &KeygenOutput,
    pg: PgTarget<'_>,
) -> Res<(Vec<Node>, Vec<OrbClient>)> {
    for attempt in 1..=3 {
        let mut ports = [[0u16; 3]; 3];
        for p in &mut ports {
            for x in p.iter_mut() {
                *x = free_port()?;
            }
        }
        let mut nodes = Vec::new();
        let mut clients = Vec::new();
        for party in 0u8..3 {
            let config = write_config(dir, &keys.dir, party, &ports, pg)?;
            let mut n = Node::new(config, dir.join(format!("party{party}.log")));
            // JSON lines, for `wait_snapshot_at`.
            n.env.push(("OCELLI_LOG_JSON".into(), "1".into()));
            n.spawn()?;
            nodes.push(n);
            let orb = ([127, 0, 0, 1], ports[party as usize][0]).into();
            clients.push(OrbClient::with_identity(
                orb,
                "localhost",
                &keys.ca_cert(),
                &keys.gateway(0),
            )?);
        }
        let mut ready = true;
        for (c, n) in clients.iter().zip(&mut nodes) {
            if let Err(e) = wait_ready(c, Duration::from_secs(30), Some(n)).await {
                eprintln!("cluster start {attempt}: {e}");
                ready = false;
                break;
            }
        }
        if ready {
            return Ok((nodes, clients));
        }
    }
    Err("the cluster did not start in three attempts".into())
}

async fn kill_9_run(pg: PgTarget<'_>) -> Res {
    let _one = ONE_CLUSTER.lock().await;
    let dir = tempfile::tempdir()?;
    let keys = keygen(&KeygenOptions::local(dir.path().join("keys")))?;
    let (mut nodes, clients) = start_cluster(dir.path(), &keys, pg).await?;

    let orb = OrbSigningKey::from_bytes(&*read_key32(&keys.orb_signing_key())?);
    let pk: [u8; 96] = std::fs::read(keys.public_keys())?
        .try_into()
        .map_err(|_| "bundle")?;
    let node_keys = NodePublicKeys::from_bytes(&pk).map_err(|_| "bundle")?;
    let mut rng = ChaCha20Rng::seed_from_u64(99);
    const N: usize = 30;
    let mut ids = Vec::new();
    for k in 0..N {
        let meta = RequestMeta {
            request_id: RequestId::random(&mut rng),
            request_type: RequestType::Uniqueness,
            timestamp_ms: now_ms(),
            serial_id: 0,
            or_policy: false,
        };
        ids.push(meta.request_id.0);
        let l = sdk_orb::template::random(&mut rng, 0.1);
        let r = sdk_orb::template::random(&mut rng, 0.1);
        let env = seal_envelope_to_vec(&mut rng, &meta, &l, &r, &node_keys, &orb)?;
        // Crash party 1 (a voter), later party 0 (the batch coordinator),
        // each while a submission to it is in flight; restart each after
        // three more envelopes.
        for (at, victim) in [(N / 3, 1usize), (2 * N / 3, 0)] {
            if k == at {
                let cv = clients[victim].clone();
                let ev = env.clone();
                let inflight = tokio::spawn(async move {
                    let mut c = cv.orb.clone();
                    c.submit(SubmitRequest {
                        envelope: ev,
                        or_serial_ids: Vec::new(),
                    })
                    .await
                });
                tokio::time::sleep(Duration::from_millis(2)).await;
                nodes[victim].kill9()?;
                let _ = tokio::time::timeout(CALL_TIMEOUT, inflight).await;
            }
            if k == at + 3 {
                nodes[victim].spawn()?;
            }
        }
        let mut tasks = Vec::new();
        for c in &clients {
            let c = c.clone();
            let e = env.clone();
            tasks.push(tokio::spawn(async move {
                submit_until_held(&c, &e, PATIENCE).await
            }));
        }
        // Running nodes must acknowledge now; a crashed one gets the
        // submission when it is back (the task keeps retrying).
        for (i, t) in tasks.into_iter().enumerate() {
            if nodes[i].child.is_none() {
                drop(t);
                continue;
            }
            t.await??;
        }
    }
    // Submissions made while a node was down keep retrying in the
    // background (an orb retrying until its request is held) and land now.
    for c in &clients {
        wait_ready(c, Duration::from_secs(30), None).await?;
    }
    // Wait until every node has answered everything.
    wait_drained(&clients, &nodes, Duration::from_secs(180)).await?;
    if pg.is_some() {
        for (party, n) in nodes.iter().enumerate() {
            let data = dir.path().join(format!("data{party}"));
            let last = store_summary(&data, party as u8, pg)
                .await?
                .last_applied_batch;
            wait_snapshot_at(n, last, Duration::from_secs(30)).await?;
        }
    }
    // Graceful stop: exit status 0.
    for n in &mut nodes {
        let status = n.terminate()?;
        assert!(status.success(), "exit status {status:?}");
    }
    // The three stores agree, and hold every request, answered.
    let mut summaries = Vec::new();
    for party in 0..3 {
        let data = dir.path().join(format!("data{party}"));
        summaries.push(store_summary(&data, party, pg).await?);
    }
    assert_eq!(summaries[0], summaries[1]);
    assert_eq!(summaries[1], summaries[2]);
    // With PostgreSQL each node kept a share snapshot (taken every second, through the
    // crashes); the one left fits its store and loads what the store alone does, all of it
    // from the file.
    if pg.is_some() {
        for party in 0..3 {
            let data = dir.path().join(format!("data{party}"));
            check_share_snapshot(&data, party, pg).await?;
        }
    }
    for id in &ids {
        let r = summaries[0].requests.get(id).ok_or("request lost")?;
        assert_eq!(r.state, 2, "request final");
        assert!(r.result.is_some());
    }
    Ok(())
}

/// Waits until `node` logs a share snapshot taken at `batch`.
async fn wait_snapshot_at(node: &Node, batch: u64, timeout: Duration) -> Res {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let log = std::fs::read_to_string(&node.log)?;
        let taken = log.lines().any(|l| {
            serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| {
                v["fields"]["message"] == "share snapshot written"
                    && v["fields"]["batch"].as_u64() == Some(batch)
            })
        });
        if taken {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(
                format!("no share snapshot at batch {batch}: {}", node.log_tail(20)).into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn keygen_cli_writes_a_deployment() -> Res {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir()?;
    let out_dir = dir.path().join("keys");
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_ocelli-node"))
            .arg("keygen")
            .arg("--out")
            .arg(&out_dir)
            .output()
    };
    let out = run()?;
    assert!(out.status.success(), "{out:?}");
    for f in [
        "party1/hpke.key",
        "party2/tls.key.pem",
        "orb/orb-signing.key",
        "ca.key.pem",
    ] {
        let mode = std::fs::metadata(out_dir.join(f))?.permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{f}");
    }
    let cfg = ocelli_node::config::NodeConfig::load(&out_dir.join("party1.toml"))?;
    assert_eq!(cfg.party_id, sdk_orb::PartyId::ALL[1]);
    // Refuses to overwrite without --force.
    assert!(!run()?.status.success());
    Ok(())
}

//! `ocelli-node serve` as a real child process, and what a test does with one: wait until it
//! is ready, submit until it holds a request, ask how much it still has pending, read its
//! store once it has stopped.
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ocelli_node::client::OrbClient;
use ocelli_node::store::postgres::{PgOptions, PgStore, PgTls};
use ocelli_node::store::redb::RedbStore;
use ocelli_node::store::{Store, StoreSummary};
use shared_proto::v1::{HealthCheckRequest, SubmitRequest};

pub type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Every call to a node gets a deadline: a connection to a killed or cut-off process must turn
/// into a retry, never into a test that waits forever.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// One node process. It runs in its own process group, so a kill reaches it through any
/// launcher in front of it (`ip netns exec`).
pub struct Node {
    pub config: PathBuf,
    pub log: PathBuf,
    /// Program and arguments that run the node binary (empty: the binary itself).
    pub launcher: Vec<OsString>,
    /// Extra environment of the process.
    pub env: Vec<(OsString, OsString)>,
    pub child: Option<Child>,
}

impl Node {
    pub fn new(config: PathBuf, log: PathBuf) -> Self {
        Node {
            config,
            log,
            launcher: Vec::new(),
            env: Vec::new(),
            child: None,
        }
    }

    pub fn spawn(&mut self) -> Res {
        use std::os::unix::process::CommandExt as _;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let bin = OsString::from(env!("CARGO_BIN_EXE_ocelli-node"));
        let mut argv = self.launcher.clone();
        argv.push(bin);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .env("OCELLI_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0);
        self.child = Some(cmd.spawn()?);
        Ok(())
    }

    /// Whether the process has exited (a node that could not bind its ports exits at once).
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    fn signal_group(&self, signal: &str) -> Res {
        let c = self.child.as_ref().ok_or("not running")?;
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg("--")
            .arg(format!("-{}", c.id()))
            .stderr(Stdio::null())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill -{signal} of process group {} failed", c.id()).into())
        }
    }

    pub fn kill9(&mut self) -> Res {
        if self.child.is_some() {
            // The group may already be gone (the node exited): reaping it is what matters.
            let _ = self.signal_group("KILL");
            if let Some(mut c) = self.child.take() {
                c.wait()?;
            }
        }
        Ok(())
    }

    /// SIGTERM, then the exit status (SIGKILL and an error after 30 s).
    pub fn terminate(&mut self) -> Res<std::process::ExitStatus> {
        self.signal_group("TERM")?;
        let mut c = self.child.take().ok_or("not running")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = c.try_wait()? {
                return Ok(s);
            }
            if Instant::now() > deadline {
                self.child = Some(c);
                self.kill9()?;
                return Err("node did not exit after SIGTERM".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Resident memory of the process group, KiB (0 when it is not running).
    pub fn rss_kib(&self) -> u64 {
        let Some(c) = self.child.as_ref() else {
            return 0;
        };
        let group = c.id().to_string();
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return 0;
        };
        let mut total = 0;
        for p in procs.flatten() {
            let Ok(stat) = std::fs::read_to_string(p.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid pgrp ...: the fields after the last ')'.
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                continue;
            };
            if rest.split_whitespace().nth(2) != Some(group.as_str()) {
                continue;
            }
            let status = std::fs::read_to_string(p.path().join("status")).unwrap_or_default();
            total += status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
        total
    }

    /// The last `n` lines of its log, newest first.
    pub fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(n).collect();
        tail.join("\n  ")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.kill9();
    }
}

/// Waits until the node answers ready; fails at once if `node` has exited, with its log.
pub async fn wait_ready(client: &OrbClient, timeout: Duration, mut node: Option<&mut Node>) -> Res {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(n) = node.as_deref_mut() {
            if n.exited() {
                return Err(format!("node exited: {}", n.log_tail(5)).into());
            }
        }
        let mut h = client.health.clone();
        if let Ok(Ok(r)) = tokio::time::timeout(CALL_TIMEOUT, h.check(HealthCheckRequest {})).await
        {
            if r.into_inner().ready {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err("node not ready in time".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Submits until acknowledged (OK) or known (ALREADY_EXISTS), retrying while the node is down
/// or cut off, as an orb does, for at most `patience`.
pub async fn submit_until_held(client: &OrbClient, env: &[u8], patience: Duration) -> Res {
    let deadline = Instant::now() + patience;
    loop {
        let mut c = client.orb.clone();
        let attempt = c.submit(SubmitRequest {
            envelope: env.to_vec(),
            or_serial_ids: Vec::new(),
        });
        match tokio::time::timeout(CALL_TIMEOUT, attempt).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(s)) if s.code() == tonic::Code::AlreadyExists => return Ok(()),
            Ok(Err(s)) if Instant::now() > deadline => return Err(s.into()),
            Err(_) if Instant::now() > deadline => return Err("submission timed out".into()),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Requests the node holds without a final result, or `None` when it does not answer.
pub async fn pending_of(client: &OrbClient) -> Option<u64> {
    let mut h = client.health.clone();
    match tokio::time::timeout(CALL_TIMEOUT, h.check(HealthCheckRequest {})).await {
        Ok(Ok(r)) => Some(r.into_inner().pending),
        _ => None,
    }
}

/// Waits until no node has anything pending; on time-out, an error with each node's pending
/// count and log tail.
pub async fn wait_drained(clients: &[OrbClient], nodes: &[Node], timeout: Duration) -> Res {
    let deadline = Instant::now() + timeout;
    loop {
        let mut pending = 0;
        for c in clients {
            // A node that does not answer counts as still busy.
            pending += pending_of(c).await.unwrap_or(1);
        }
        if pending == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            let mut report = format!("{pending} still pending");
            for (i, n) in nodes.iter().enumerate() {
                let p = pending_of(&clients[i]).await;
                report.push_str(&format!(
                    "\nparty {i}: pending {p:?}; log, newest first:\n  {}",
                    n.log_tail(15)
                ));
            }
            return Err(report.into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A PostgreSQL server and this run's schema prefix, or the redb stores.
pub type PgTarget<'a> = Option<(&'a str, &'a str)>;

/// The summary of party `party`'s store (its node stopped): redb in `data`, or the PostgreSQL
/// schema `{prefix}_p{party}`.
pub async fn store_summary(data: &Path, party: u8, pg: PgTarget<'_>) -> Res<StoreSummary> {
    let data = data.to_owned();
    let pg = pg.map(|(url, prefix)| PgOptions {
        url: url.to_owned(),
        schema: format!("{prefix}_p{party}"),
        pool_size: 1,
        tls: PgTls::Disable,
    });
    // Store calls block: off the test's async workers, as the node makes them.
    let rt = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || -> Res<_> {
        let s: Box<dyn Store> = match pg {
            None => Box::new(RedbStore::open(&data)?),
            Some(opts) => Box::new(PgStore::open(&opts, rt)?),
        };
        Ok(s.summary()?)
    })
    .await?
}

/// Checks the share snapshot a node left in `data` (PostgreSQL stores keep one) after it was
/// taken at the store's last batch: it fits the store, every entry comes from it, and the rows
/// are those the store alone gives.
pub async fn check_share_snapshot(data: &Path, party: u8, pg: PgTarget<'_>) -> Res {
    use ocelli_node::store::load::{share_db, share_db_logged};
    let path = data.join(ocelli_node::config::SHARE_SNAPSHOT_FILE);
    let (url, prefix) = pg.ok_or("a PostgreSQL store")?;
    let opts = PgOptions {
        url: url.to_owned(),
        schema: format!("{prefix}_p{party}"),
        pool_size: 2,
        tls: PgTls::Disable,
    };
    let rt = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || -> Res {
        let s = PgStore::open(&opts, rt)?;
        let (through, report) = share_db_logged(&s, Some(&path))?;
        let loaded = report.snapshot.ok_or("the snapshot was not used")?;
        let alone = share_db(&s, &|_| ())?;
        assert_eq!(
            loaded.from_snapshot,
            alone.len() as u64,
            "party {party}: all from the file"
        );
        let (a, b) = (through.rows(), alone.rows());
        assert_eq!(a.serial_ids(), b.serial_ids());
        for eye in ocelli_mpc::db::Eye::BOTH {
            for part in [ocelli_mpc::db::Part::Code, ocelli_mpc::db::Part::Mask] {
                let same = a.vectors(eye, part, 0..a.len()) == b.vectors(eye, part, 0..b.len());
                assert!(same, "party {party}: {eye:?} {part:?} rows differ");
            }
        }
        Ok(())
    })
    .await?
}

//! Three real nodes in this process: keygen-made certificates, TLS, redb
//! stores in a temporary directory, listeners on 127.0.0.1 port 0. Each node
//! is the library's [`RunningNode`] (what `LocalCluster` runs), started,
//! stopped and restarted one at a time here.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ocelli_node::batch::BatchEvaluator;
use ocelli_node::client::OrbClient;
use ocelli_node::clock::now_ms;
use ocelli_node::cluster::RunningNode;
use ocelli_node::config::NodeConfig;
use ocelli_node::keys::{keygen, read_key32, sample_node_config, KeygenOptions, KeygenOutput};
use ocelli_node::node::NodeState;
use ocelli_node::server::Listeners;
use ocelli_node::store::StoreSummary;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;
use sdk_orb::envelope::{seal_envelope_to_vec, RequestMeta};
use sdk_orb::keys::{NodePublicKeys, OrbSigningKey};
use sdk_orb::{PartyId, RequestId, RequestType};
use shared_proto::v1::{GetResultRequest, SignedResult};
use tokio::net::TcpListener;

pub type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub keys: KeygenOutput,
    pub configs: Vec<NodeConfig>,
    pub nodes: Vec<Option<RunningNode>>,
    pub orb: OrbSigningKey,
    pub node_keys: NodePublicKeys,
    pub evaluator: Arc<dyn BatchEvaluator>,
    /// Each node runs the real three-party matching pipeline (its own evaluator) instead of
    /// `evaluator`.
    pub mpc: bool,
    pub rng: ChaCha20Rng,
}

async fn bind0() -> Res<TcpListener> {
    Ok(TcpListener::bind("127.0.0.1:0").await?)
}

async fn bind_again(addr: SocketAddr) -> Res<TcpListener> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) if Instant::now() > deadline => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// `OCELLI_TEST_STORE=postgres` runs the cluster on PostgreSQL stores (one
/// schema per node) on the server `OCELLI_TEST_POSTGRES` names.
fn postgres_store() -> Res<Option<String>> {
    match std::env::var("OCELLI_TEST_STORE").as_deref() {
        Ok("postgres") => Ok(Some(std::env::var("OCELLI_TEST_POSTGRES").map_err(
            |_| "OCELLI_TEST_STORE=postgres needs OCELLI_TEST_POSTGRES (.ci/postgres.sh)",
        )?)),
        Ok("redb") | Err(_) => Ok(None),
        Ok(other) => Err(format!("OCELLI_TEST_STORE={other:?}: redb or postgres").into()),
    }
}

/// Keygen into a fresh directory; configs whose addresses are the given listeners.
pub fn configs_for(
    dir: &Path,
    addrs: &[(SocketAddr, SocketAddr, SocketAddr); 3],
    tweak: &dyn Fn(&mut NodeConfig),
) -> Res<(KeygenOutput, Vec<NodeConfig>)> {
    let keys = keygen(&KeygenOptions::local(dir.join("keys")))?;
    let run = rand::random::<u64>();
    let mut configs = Vec::new();
    for party in PartyId::ALL {
        let mut c = sample_node_config(party, 1);
        c.resolve_paths(&keys.dir);
        c.data_dir = dir.join(format!("data{}", party.get()));
        let (o, p, m) = addrs[party.index()];
        c.listen.orb = o;
        c.listen.peer = p;
        c.listen.metrics = m;
        for peer in &mut c.peers {
            peer.address = addrs[peer.party_id.index()].1;
        }
        if let Some(url) = postgres_store()? {
            c.store.url = Some(url);
            c.store.schema = format!("cluster_{run:016x}_p{}", party.get());
            c.store.pool_size = 2;
        }
        c.batch.interval_ms = 20;
        // The engine's defaults: tuning would add its measurement to every node start here.
        c.matching.cpu_tuning = false;
        c.batch.request_timeout_ms = 3_000;
        c.batch.peer_rpc_timeout_ms = 2_000;
        // Readiness follows the peers within a fraction of a second.
        c.health.peer_probe_interval_ms = 100;
        tweak(&mut c);
        c.validate()?;
        configs.push(c);
    }
    Ok((keys, configs))
}

impl Cluster {
    pub async fn start(evaluator: Arc<dyn BatchEvaluator>) -> Res<Self> {
        Self::start_with(evaluator, &|_| {}).await
    }

    pub async fn start_with(
        evaluator: Arc<dyn BatchEvaluator>,
        tweak: &dyn Fn(&mut NodeConfig),
    ) -> Res<Self> {
        Self::start_inner(evaluator, false, tweak).await
    }

    /// Three nodes deciding in MPC.
    pub async fn start_mpc(tweak: &dyn Fn(&mut NodeConfig)) -> Res<Self> {
        Self::start_inner(Arc::new(ocelli_node::batch::NotEvaluated), true, tweak).await
    }

    async fn start_inner(
        evaluator: Arc<dyn BatchEvaluator>,
        mpc: bool,
        tweak: &dyn Fn(&mut NodeConfig),
    ) -> Res<Self> {
        let (c, _) = Self::start_partial(evaluator, mpc, tweak, &[0, 1, 2]).await?;
        Ok(c)
    }

    /// Starts only the nodes in `running`; the listeners of the others are returned, for
    /// [`Cluster::start_node`].
    pub async fn start_partial(
        evaluator: Arc<dyn BatchEvaluator>,
        mpc: bool,
        tweak: &dyn Fn(&mut NodeConfig),
        running: &[usize],
    ) -> Res<(Self, Vec<Option<Listeners>>)> {
        let dir = tempfile::tempdir()?;
        let mut listeners = Vec::new();
        let mut addrs = Vec::new();
        for _ in 0..3 {
            let l = Listeners {
                orb: bind0().await?,
                peer: bind0().await?,
                metrics: bind0().await?,
            };
            addrs.push(l.addrs()?);
            listeners.push(l);
        }
        let addrs: [_; 3] = [addrs[0], addrs[1], addrs[2]];
        let (keys, configs) = configs_for(dir.path(), &addrs, tweak)?;
        let orb = OrbSigningKey::from_bytes(&*read_key32(&keys.orb_signing_key())?);
        let pk: [u8; 96] = std::fs::read(keys.public_keys())?
            .try_into()
            .map_err(|_| "bundle length")?;
        let node_keys = NodePublicKeys::from_bytes(&pk).map_err(|_| "bundle")?;
        let mut c = Self {
            dir,
            keys,
            configs,
            nodes: vec![None, None, None],
            orb,
            node_keys,
            evaluator,
            mpc,
            rng: ChaCha20Rng::seed_from_u64(7),
        };
        let mut rest = Vec::new();
        for (i, l) in listeners.into_iter().enumerate() {
            if running.contains(&i) {
                c.start_node(i, l).await?;
                rest.push(None);
            } else {
                rest.push(Some(l));
            }
        }
        Ok((c, rest))
    }

    /// Waits until every running node answers `/readyz` with 200.
    pub async fn wait_ready(&self, timeout: Duration) -> Res {
        let deadline = Instant::now() + timeout;
        for (i, n) in self.nodes.iter().enumerate() {
            if n.is_none() {
                continue;
            }
            while ocelli_node::node::health::readiness(self.state(i)).is_err() {
                if Instant::now() > deadline {
                    return Err(format!("node {i} not ready in {timeout:?}").into());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }

    pub async fn start_node(&mut self, i: usize, listeners: Listeners) -> Res {
        let deadline = Instant::now() + Duration::from_secs(10);
        // The previous instance may still be closing its store.
        let state = loop {
            let cfg = self.configs[i].clone();
            let ev = if self.mpc {
                ocelli_node::matching::evaluator_for(&cfg)?
            } else {
                self.evaluator.clone()
            };
            match tokio::task::spawn_blocking(move || NodeState::open(cfg, ev)).await? {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => return Err(e.into()),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        self.nodes[i] = Some(RunningNode::serve(state, listeners));
        Ok(())
    }

    pub async fn stop_node(&mut self, i: usize) -> Res {
        if let Some(r) = self.nodes[i].take() {
            r.stop().await?;
        }
        Ok(())
    }

    pub async fn restart_node(&mut self, i: usize) -> Res {
        self.stop_node(i).await?;
        let c = &self.configs[i];
        let l = Listeners {
            orb: bind_again(c.listen.orb).await?,
            peer: bind_again(c.listen.peer).await?,
            metrics: bind_again(c.listen.metrics).await?,
        };
        self.start_node(i, l).await
    }

    pub async fn stop_all(&mut self) -> Res {
        for i in 0..3 {
            self.stop_node(i).await?;
        }
        Ok(())
    }

    pub fn state(&self, i: usize) -> &Arc<NodeState> {
        self.nodes[i].as_ref().expect("node running").state()
    }

    /// Gateway 0's client of node `i`.
    pub fn client(&self, i: usize) -> OrbClient {
        self.client_as(i, &self.keys.gateway(0))
    }

    /// A client of node `i` with the identity in directory `identity` (see `KeygenOutput`).
    pub fn client_as(&self, i: usize, identity: &Path) -> OrbClient {
        OrbClient::with_identity(
            self.configs[i].listen.orb,
            "localhost",
            &self.keys.ca_cert(),
            identity,
        )
        .expect("client")
    }

    /// A client of node `i` holding only the CA certificate.
    pub fn stranger(&self, i: usize) -> OrbClient {
        OrbClient::new(
            self.configs[i].listen.orb,
            "localhost",
            &self.keys.ca_cert(),
        )
        .expect("client")
    }

    pub fn meta(&mut self, t: RequestType, serial_id: u64, timestamp_ms: u64) -> RequestMeta {
        RequestMeta {
            request_id: RequestId::random(&mut self.rng),
            request_type: t,
            timestamp_ms,
            serial_id,
            or_policy: false,
        }
    }

    /// A fresh, valid uniqueness envelope.
    pub fn envelope(&mut self) -> Vec<u8> {
        let meta = self.meta(RequestType::Uniqueness, 0, now_ms());
        self.seal(&meta)
    }

    pub fn seal(&mut self, meta: &RequestMeta) -> Vec<u8> {
        let left = sdk_orb::template::random(&mut self.rng, 0.1);
        let right = sdk_orb::template::random(&mut self.rng, 0.1);
        self.seal_person(meta, &left, &right)
    }

    /// An envelope of these two templates.
    pub fn seal_person(
        &mut self,
        meta: &RequestMeta,
        left: &sdk_orb::IrisTemplate,
        right: &sdk_orb::IrisTemplate,
    ) -> Vec<u8> {
        seal_envelope_to_vec(&mut self.rng, meta, left, right, &self.node_keys, &self.orb)
            .expect("seal")
    }

    pub fn fingerprints(&self) -> Vec<[u8; 32]> {
        (0..3)
            .map(|i| self.state(i).store().fingerprint().expect("fingerprint"))
            .collect()
    }

    pub fn summaries(&self) -> Vec<StoreSummary> {
        (0..3)
            .map(|i| self.state(i).store().summary().expect("summary"))
            .collect()
    }

    /// Asserts that the three stores hold the same requests, results and entries, and
    /// returns that common summary.
    pub fn assert_stores_agree(&self) -> StoreSummary {
        let [s0, s1, s2]: [StoreSummary; 3] = self.summaries().try_into().expect("three summaries");
        assert_eq!(s0, s1);
        assert_eq!(s1, s2);
        s0
    }

    /// What the operators of `party`'s two helpers run before it recovers
    /// (`ocelli-node allow-recovery --party PARTY --minutes 10 --sessions SESSIONS`).
    pub fn allow_recovery(&self, party: PartyId, sessions: u32) -> Res {
        for helper in ocelli_node::ids::others(party) {
            ocelli_node::recovery::allow_recovery(
                &self.configs[helper.index()],
                party,
                Duration::from_secs(600),
                sessions,
            )?;
        }
        Ok(())
    }

    /// Waits until no node has pending requests.
    pub async fn wait_drained(&self, timeout: Duration) -> Res {
        let deadline = Instant::now() + timeout;
        loop {
            if (0..3).all(|i| self.state(i).pending_len() == 0) {
                return Ok(());
            }
            if Instant::now() > deadline {
                let p: Vec<_> = (0..3).map(|i| self.state(i).pending_len()).collect();
                return Err(format!("still pending after {timeout:?}: {p:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Node `i`'s signed result of request `id`.
    pub async fn signed_result(&self, i: usize, id: &RequestId) -> Res<SignedResult> {
        Ok(self
            .client(i)
            .orb
            .get_result(GetResultRequest {
                request_id: id.0.to_vec(),
            })
            .await?
            .into_inner())
    }

    /// Submits to all three nodes; returns the three outcomes.
    pub async fn submit_all(&self, env: &[u8]) -> Vec<Result<(), tonic::Status>> {
        let mut out = Vec::new();
        for i in 0..3 {
            let mut c = self.client(i);
            out.push(
                c.orb
                    .submit(shared_proto::v1::SubmitRequest {
                        envelope: env.to_vec(),
                        or_serial_ids: Vec::new(),
                    })
                    .await
                    .map(|_| ()),
            );
        }
        out
    }
}

/// The response to `GET path` on a node's plain HTTP port, status line included.
pub async fn http_get(addr: SocketAddr, path: &str) -> Res<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}

/// The value of the series `name{labels}` (labels as exported, in order) in a scrape.
pub fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// The `ocelli-reject-reason` of a status.
pub fn reason(s: &tonic::Status) -> String {
    s.metadata()
        .get(ocelli_node::intake::REJECT_REASON_KEY)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

//! A whole deployment on one machine: the three nodes `ocelli-node demo` and
//! `local-cluster` run in one process, and the orb side that `submit` and the
//! demo use.
//!
//! A deployment directory holds `keys/` (what `keygen` writes, with the three
//! node configs adjusted to free local ports chosen at creation) and
//! `data/party{0,1,2}/` (the stores). Opening an existing directory reuses
//! both, so enrolled data survives a restart.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand_core::{CryptoRng, RngCore};
use sdk_orb::envelope::v2::seal_envelope_v2_to_vec;
use sdk_orb::envelope::RequestMeta;
use sdk_orb::keys::{NodeHybridPublicKeys, OrbSigningKey};
use sdk_orb::{IrisTemplate, PartyId, RequestId};
use shared_proto::v1::{
    GetResultRequest, NodeResult, SignedResult, StreamResultsRequest, SubmitRequest,
};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::batch::BatchEvaluator;
use crate::client::{agree, OrbClient};
use crate::config::NodeConfig;
use crate::keys::{keygen, party_dir, read_key32, KeygenOptions};
use crate::node::{NodeState, StartError};
use crate::server::{self, Listeners};

/// Errors of the local tools, as text for the operator.
pub type ToolError = Box<dyn std::error::Error + Send + Sync>;

/// A deployment directory.
#[derive(Debug)]
pub struct Deployment {
    /// The directory.
    pub dir: PathBuf,
    /// The three node configs (paths resolved).
    pub configs: Vec<NodeConfig>,
}

fn keys_dir(dir: &Path) -> PathBuf {
    dir.join("keys")
}

fn config_path(dir: &Path, party: PartyId) -> PathBuf {
    keys_dir(dir).join(format!("{}.toml", party_dir(party)))
}

impl Deployment {
    /// Opens `dir`, creating keys, certificates and configs on first use.
    /// Returns listeners already bound when the directory was just created
    /// (their ports are the ones written into the configs).
    ///
    /// # Errors
    /// Unwritable directory, keygen or config failures.
    pub async fn open_or_create(
        dir: &Path,
        tweak: &(dyn Fn(&mut toml::Table) + Sync),
    ) -> Result<(Self, Option<Vec<Listeners>>), ToolError> {
        if config_path(dir, PartyId::ALL[0]).exists() {
            return Ok((Self::open(dir)?, None));
        }
        std::fs::create_dir_all(dir)?;
        let keys = keygen(&KeygenOptions::local(keys_dir(dir)))?;
        let mut listeners = Vec::new();
        let mut addrs: Vec<[SocketAddr; 3]> = Vec::new();
        for _ in 0..3 {
            let l = Listeners {
                orb: TcpListener::bind("127.0.0.1:0").await?,
                peer: TcpListener::bind("127.0.0.1:0").await?,
                metrics: TcpListener::bind("127.0.0.1:0").await?,
            };
            let (o, p, m) = l.addrs()?;
            addrs.push([o, p, m]);
            listeners.push(l);
        }
        for party in PartyId::ALL {
            let path = keys.config(party);
            let mut t: toml::Table = std::fs::read_to_string(&path)?.parse()?;
            t.insert(
                "data_dir".into(),
                format!("../data/{}", party_dir(party)).into(),
            );
            let [o, p, m] = addrs[party.index()];
            let mut listen = toml::Table::new();
            listen.insert("orb".into(), o.to_string().into());
            listen.insert("peer".into(), p.to_string().into());
            listen.insert("metrics".into(), m.to_string().into());
            t.insert("listen".into(), listen.into());
            if let Some(toml::Value::Array(peers)) = t.get_mut("peers") {
                for peer in peers {
                    if let toml::Value::Table(peer) = peer {
                        let id = peer
                            .get("party_id")
                            .cloned()
                            .and_then(|id| id.try_into::<PartyId>().ok())
                            .ok_or("keygen wrote a peer without a party id")?;
                        peer.insert("address".into(), addrs[id.index()][1].to_string().into());
                    }
                }
            }
            tweak(&mut t);
            // Private: with `--postgres` the store URL carries the database password.
            crate::keys::write_private(&path, toml::to_string(&t)?.as_bytes())?;
        }
        Ok((Self::open(dir)?, Some(listeners)))
    }

    /// Opens an existing deployment directory.
    ///
    /// # Errors
    /// Missing or invalid configs.
    pub fn open(dir: &Path) -> Result<Self, ToolError> {
        let configs = PartyId::ALL
            .into_iter()
            .map(|p| NodeConfig::load(&config_path(dir, p)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            dir: dir.to_owned(),
            configs,
        })
    }

    /// The orb side: device key, node keys, one client per node.
    ///
    /// # Errors
    /// Unreadable key files.
    pub fn orb(&self) -> Result<Orb, ToolError> {
        let keys = keys_dir(&self.dir);
        let signing = OrbSigningKey::from_bytes(&*read_key32(&keys.join("orb/orb-signing.key"))?);
        let bundle: [u8; NodeHybridPublicKeys::BYTES] =
            std::fs::read(keys.join("node-public-keys-v2.bin"))?
                .try_into()
                .map_err(|_| "node-public-keys-v2.bin is not three X-Wing public keys")?;
        let nodes = NodeHybridPublicKeys::from_bytes(&bundle).map_err(|e| e.to_string())?;
        let mut result_keys = Vec::new();
        let mut clients = Vec::new();
        for (party, cfg) in PartyId::ALL.into_iter().zip(&self.configs) {
            let pk = read_key32(&keys.join(party_dir(party)).join("result-verifying.pub"))?;
            result_keys.push(ed25519_dalek::VerifyingKey::from_bytes(&pk)?);
            clients.push(OrbClient::with_identity(
                cfg.listen.orb,
                "localhost",
                &keys.join("ca.pem"),
                &keys.join("gateway0"),
            )?);
        }
        let result_keys: [ed25519_dalek::VerifyingKey; 3] =
            result_keys.try_into().map_err(|_| "three result keys")?;
        Ok(Orb {
            signing,
            nodes,
            result_keys,
            clients,
        })
    }
}

/// One node serving in this process: what [`LocalCluster`] runs three of, and the tests'
/// harness starts, stops and restarts one at a time.
pub struct RunningNode {
    state: Arc<NodeState>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), StartError>>,
}

impl std::fmt::Debug for RunningNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningNode")
            .field("party", &self.state.party)
            .finish_non_exhaustive()
    }
}

impl RunningNode {
    /// Opens the node (store, shares; on a blocking thread) and serves it on `listeners`.
    ///
    /// # Errors
    /// The node fails to open.
    pub async fn start(
        config: NodeConfig,
        evaluator: Arc<dyn BatchEvaluator>,
        listeners: Listeners,
    ) -> Result<Self, ToolError> {
        let state =
            tokio::task::spawn_blocking(move || NodeState::open(config, evaluator)).await??;
        Ok(Self::serve(state, listeners))
    }

    /// Serves an opened node on `listeners` until [`RunningNode::stop`].
    pub fn serve(state: Arc<NodeState>, listeners: Listeners) -> Self {
        let (stop, rx) = oneshot::channel();
        let task = tokio::spawn(server::run(state.clone(), listeners, async move {
            let _ = rx.await;
        }));
        Self { state, stop, task }
    }

    /// The node's state.
    pub fn state(&self) -> &Arc<NodeState> {
        &self.state
    }

    /// Tells the server to stop; the handle completes when it has.
    pub fn halt(self) -> JoinHandle<Result<(), StartError>> {
        let _ = self.stop.send(());
        self.task
    }

    /// Stops the server and waits for it (its store is closed once the state's last
    /// reference, this one included, is gone).
    ///
    /// # Errors
    /// The server failed.
    pub async fn stop(self) -> Result<(), ToolError> {
        self.halt().await??;
        Ok(())
    }
}

/// The three nodes of a deployment, running in this process.
pub struct LocalCluster {
    nodes: Vec<RunningNode>,
}

impl std::fmt::Debug for LocalCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCluster")
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

impl LocalCluster {
    /// Starts the three nodes (opening stores, loading shares) and waits until
    /// all are ready.
    ///
    /// # Errors
    /// A node fails to start.
    pub async fn start(
        deployment: &Deployment,
        listeners: Option<Vec<Listeners>>,
    ) -> Result<Self, ToolError> {
        let mut listeners = match listeners {
            Some(l) => l,
            None => {
                let mut l = Vec::new();
                for cfg in &deployment.configs {
                    l.push(Listeners::bind(&cfg.listen).await?);
                }
                l
            }
        };
        let mut nodes = Vec::new();
        for cfg in &deployment.configs {
            let evaluator = crate::matching::evaluator_for(cfg)?;
            nodes.push(RunningNode::start(cfg.clone(), evaluator, listeners.remove(0)).await?);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !nodes.iter().all(|n| n.state.is_ready()) {
            if Instant::now() > deadline {
                return Err("nodes did not become ready".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Self { nodes })
    }

    /// The node states, by party.
    pub fn states(&self) -> Vec<Arc<NodeState>> {
        self.nodes.iter().map(|n| n.state.clone()).collect()
    }

    /// Stops the three nodes gracefully.
    ///
    /// # Errors
    /// A node's server failed.
    pub async fn shutdown(self) -> Result<(), ToolError> {
        for n in &self.nodes {
            n.state.set_draining();
        }
        let tasks: Vec<_> = self.nodes.into_iter().map(RunningNode::halt).collect();
        for t in tasks {
            t.await??;
        }
        Ok(())
    }
}

/// The orb side of a deployment.
pub struct Orb {
    signing: OrbSigningKey,
    nodes: NodeHybridPublicKeys,
    result_keys: [ed25519_dalek::VerifyingKey; 3],
    clients: Vec<OrbClient>,
}

impl std::fmt::Debug for Orb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Orb").finish_non_exhaustive()
    }
}

impl Orb {
    /// Seals and signs a person's envelope (version 2).
    ///
    /// # Errors
    /// A serial id that does not fit the request type.
    pub fn envelope<R: RngCore + CryptoRng>(
        &self,
        rng: &mut R,
        meta: &RequestMeta,
        left: &IrisTemplate,
        right: &IrisTemplate,
    ) -> Result<Vec<u8>, ToolError> {
        Ok(seal_envelope_v2_to_vec(
            rng,
            meta,
            left,
            right,
            &self.nodes,
            &self.signing,
        )?)
    }

    /// Submits an envelope to the three nodes.
    ///
    /// # Errors
    /// A node refused it (the status says why).
    pub async fn submit(&self, envelope: &[u8]) -> Result<(), ToolError> {
        self.submit_naming(envelope, &[]).await
    }

    /// [`Orb::submit`] naming enrolled serial ids to compare with under the OR rule
    /// (strictly increasing, at most 64; the same to all three nodes).
    ///
    /// # Errors
    /// A node refuses the request (bad ids included) or cannot be reached.
    pub async fn submit_naming(
        &self,
        envelope: &[u8],
        or_serial_ids: &[u64],
    ) -> Result<(), ToolError> {
        let calls = self.clients.iter().map(|c| {
            let mut c = c.orb.clone();
            let envelope = envelope.to_vec();
            let or_serial_ids = or_serial_ids.to_vec();
            async move {
                c.submit(SubmitRequest {
                    envelope,
                    or_serial_ids,
                })
                .await
            }
        });
        for (party, r) in PartyId::ALL
            .into_iter()
            .zip(futures::future::join_all(calls).await)
        {
            r.map_err(|s| {
                if unreachable(&s) {
                    format!("{party} could not be reached: {}", s.message())
                } else {
                    format!("{party} refused the envelope: {}", s.message())
                }
            })?;
        }
        Ok(())
    }

    /// Waits for the three signed results of `id` and accepts them only if all
    /// three are validly signed and identical.
    ///
    /// # Errors
    /// No result in time, or results that do not agree.
    pub async fn result(&self, id: &RequestId, timeout: Duration) -> Result<NodeResult, ToolError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let waits = self
            .clients
            .iter()
            .map(|client| wait_for_result(client, id, deadline));
        let results = futures::future::try_join_all(waits).await?;
        Ok(agree(&results, &self.result_keys, &id.0)?)
    }
}

/// Whether a call failed for want of the node rather than by its answer: it is down or
/// restarting (UNAVAILABLE), or the client made the status from its own transport error, which
/// it carries as the source.
fn unreachable(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::Unavailable || std::error::Error::source(s).is_some()
}

/// One node's signed result of `id`. The node holds the call open until the result is
/// final (`StreamResults` naming the id), so waiting costs no polling; where the stream
/// ends without it (the node restarted, or the stream fell behind), `GetResult` is polled
/// with a growing pause.
async fn wait_for_result(
    client: &OrbClient,
    id: &RequestId,
    deadline: tokio::time::Instant,
) -> Result<SignedResult, ToolError> {
    let late = || ToolError::from(format!("no result for {id} in time"));
    let request_ids = vec![id.0.to_vec()];
    if let Ok(stream) = client
        .orb
        .clone()
        .stream_results(StreamResultsRequest { request_ids })
        .await
    {
        match tokio::time::timeout_at(deadline, stream.into_inner().message()).await {
            Ok(Ok(Some(r))) => return Ok(r),
            Ok(_) => {}
            Err(_) => return Err(late()),
        }
    }
    let mut pause = Duration::from_millis(10);
    loop {
        match client
            .orb
            .clone()
            .get_result(GetResultRequest {
                request_id: id.0.to_vec(),
            })
            .await
        {
            Ok(r) => return Ok(r.into_inner()),
            // A node that is down or restarting answers UNAVAILABLE, or the call is cancelled
            // with the connection it was sent on, or the connection fails under it (a status
            // the client made from its own transport error, which it carries as the source,
            // such as an HTTP/2 error while the node shuts down); one that has not decided yet
            // answers NOT_FOUND. Asking again is harmless: GetResult only reads.
            Err(s)
                if unreachable(&s)
                    || matches!(s.code(), tonic::Code::Cancelled | tonic::Code::NotFound) =>
            {
                if tokio::time::Instant::now() + pause > deadline {
                    return Err(late());
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            Err(s) => return Err(s.message().to_owned().into()),
        }
    }
}

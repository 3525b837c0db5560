//! Faults through real processes. Three `ocelli-node serve` processes, each in its own network
//! namespace joined to this one by a veth pair; every link between two nodes goes through
//! Toxiproxy in this namespace. The faults come from the usual tools: a partition is a veth
//! link taken down, latency with jitter, bandwidth limits and reset connections are Toxiproxy
//! toxics, packet loss is an nftables rule in a node's namespace (the kernel here has no netem),
//! a node's clock is moved with libfaketime, a full disk is a small tmpfs, a crash is SIGKILL.
//!
//! After each scenario: every request got exactly one final result, the same at the three
//! nodes (their stores agree); nobody is enrolled twice; each node's resident memory stayed
//! under a bound. docs/operations.md lists the scenarios and what each showed.
//!
//! Needs root, `ip`, `nft`, libfaketime and `toxiproxy-server`; `.ci/faults.sh` installs what
//! is missing and runs this. Without `OCELLI_FAULTS` set (`ci`: the short set, `full`: every
//! scenario at full length) it only says it skipped.

#[path = "support/process.rs"]
mod process;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ocelli_node::client::OrbClient;
use ocelli_node::clock::now_ms;
use ocelli_node::keys::{keygen, read_key32, KeygenOptions};
use ocelli_node::store::StoreSummary;
use process::{store_summary, submit_until_held, wait_drained, wait_ready, Node, Res};
use prost::Message as _;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;
use sdk_orb::envelope::v2::seal_envelope_v2_to_vec;
use sdk_orb::envelope::RequestMeta;
use sdk_orb::keys::{NodeHybridPublicKeys, OrbSigningKey};
use sdk_orb::{IrisTemplate, RequestId, RequestType};
use shared_proto::v1::{NodeResult, ResultStatus};

const ORB_PORT: u16 = 7100;
const PEER_PORT: u16 = 7101;
const METRICS_PORT: u16 = 7102;
/// Resident memory a node may reach in these small runs.
const RSS_BOUND_KIB: u64 = 1 << 20;
/// How long an orb keeps retrying a submission to a node it cannot reach.
const PATIENCE: Duration = Duration::from_secs(240);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Length {
    Short,
    Full,
}

fn length() -> Option<Length> {
    match std::env::var("OCELLI_FAULTS").ok()?.as_str() {
        "ci" => Some(Length::Short),
        "full" => Some(Length::Full),
        _ => None,
    }
}

/// A number from the environment, or `default`.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> Res<T> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .map_err(|_| format!("{name}={v} is not a number").into()),
        Err(_) => Ok(default),
    }
}

/// Runs a command to completion; its stderr in the error.
fn sh(program: &str, args: &[&str]) -> Res {
    let out = Command::new(program).args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into())
    }
}

/// The second octet of this run's addresses, from its process id, so two runs on one machine
/// (a soak and a test, say) do not take each other's addresses.
fn subnet() -> u32 {
    64 + std::process::id() % 128
}

fn host_ip(party: usize) -> String {
    format!("10.{}.{party}.1", subnet())
}

fn node_ip(party: usize) -> String {
    format!("10.{}.{party}.2", subnet())
}

/// Three namespaces, each with a veth pair to this one: 10.S.k.1 here, 10.S.k.2 in namespace
/// k (S from [`subnet`]). Removed on drop (the veth pairs go with them).
struct Net {
    tag: String,
}

impl Net {
    fn create() -> Res<Net> {
        let net = Net {
            tag: format!("ocf{}", std::process::id() % 100_000),
        };
        for k in 0..3 {
            let (ns, host, inner) = (net.ns(k), net.host_if(k), format!("{}n{k}", net.tag));
            sh("ip", &["netns", "add", &ns])?;
            sh("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
            sh(
                "ip",
                &["link", "add", &host, "type", "veth", "peer", "name", &inner],
            )?;
            sh("ip", &["link", "set", &inner, "netns", &ns])?;
            sh(
                "ip",
                &["addr", "add", &format!("{}/24", host_ip(k)), "dev", &host],
            )?;
            sh("ip", &["link", "set", &host, "up"])?;
            sh(
                "ip",
                &[
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("{}/24", node_ip(k)),
                    "dev",
                    &inner,
                ],
            )?;
            sh("ip", &["-n", &ns, "link", "set", &inner, "up"])?;
        }
        Ok(net)
    }

    fn ns(&self, k: usize) -> String {
        format!("{}-{k}", self.tag)
    }

    fn host_if(&self, k: usize) -> String {
        format!("{}h{k}", self.tag)
    }

    /// Cuts node `k` off from everything (`up = false`) or joins it again.
    fn link(&self, k: usize, up: bool) -> Res {
        let state = if up { "up" } else { "down" };
        sh("ip", &["link", "set", &self.host_if(k), state])
    }

    /// Drops `percent` of the packets node `k` receives and sends (0: none).
    fn loss(&self, k: usize, percent: u32) -> Res {
        let ns = self.ns(k);
        let _ = sh(
            "ip",
            &[
                "netns", "exec", &ns, "nft", "delete", "table", "inet", "faults",
            ],
        );
        if percent == 0 {
            return Ok(());
        }
        let rules = format!(
            "table inet faults {{\n\
             chain in {{ type filter hook input priority 0; numgen random mod 100 < {percent} drop; }}\n\
             chain out {{ type filter hook output priority 0; numgen random mod 100 < {percent} drop; }}\n\
             }}\n"
        );
        let mut nft = Command::new("ip")
            .args(["netns", "exec", &ns, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        nft.stdin
            .take()
            .ok_or("stdin")?
            .write_all(rules.as_bytes())?;
        let out = nft.wait_with_output()?;
        if !out.status.success() {
            return Err(format!("nft: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        Ok(())
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for k in 0..3 {
            let _ = sh("ip", &["netns", "delete", &self.ns(k)]);
            let _ = sh("ip", &["link", "delete", &self.host_if(k)]);
        }
    }
}

/// A `toxiproxy-server` and its HTTP API.
struct Toxiproxy {
    child: Child,
    api: SocketAddr,
}

impl Toxiproxy {
    fn start(log: &Path) -> Res<Toxiproxy> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(toxiproxy_server()?)
            .args(["-host", "127.0.0.1", "-port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?)
            .spawn()?;
        let t = Toxiproxy {
            child,
            api: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while t.call("GET", "/version", None).is_err() {
            if Instant::now() > deadline {
                return Err("toxiproxy did not start".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(t)
    }

    /// One HTTP/1.1 request; the status must be 2xx.
    fn call(&self, method: &str, path: &str, body: Option<&str>) -> Res<String> {
        let mut s = TcpStream::connect_timeout(&self.api, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let body = body.unwrap_or("");
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: toxiproxy\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
        let mut reply = String::new();
        s.read_to_string(&mut reply)?;
        let status = reply.split_whitespace().nth(1).unwrap_or("");
        if status.starts_with('2') {
            Ok(reply)
        } else {
            Err(format!(
                "toxiproxy {method} {path}: {}",
                reply.lines().next().unwrap_or("")
            )
            .into())
        }
    }

    fn proxy(&self, name: &str, listen: &str, upstream: &str) -> Res {
        let body = format!(r#"{{"name":"{name}","listen":"{listen}","upstream":"{upstream}"}}"#);
        self.call("POST", "/proxies", Some(&body)).map(drop)
    }

    /// Adds toxic `kind` with `attributes` (JSON object) to both directions of `proxy`.
    fn toxic(&self, proxy: &str, kind: &str, attributes: &str) -> Res {
        for stream in ["upstream", "downstream"] {
            let body = format!(
                r#"{{"name":"{kind}_{stream}","type":"{kind}","stream":"{stream}","toxicity":1.0,"attributes":{attributes}}}"#
            );
            self.call("POST", &format!("/proxies/{proxy}/toxics"), Some(&body))?;
        }
        Ok(())
    }

    fn clear(&self, proxy: &str, kind: &str) -> Res {
        for stream in ["upstream", "downstream"] {
            self.call(
                "DELETE",
                &format!("/proxies/{proxy}/toxics/{kind}_{stream}"),
                None,
            )?;
        }
        Ok(())
    }
}

impl Drop for Toxiproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `toxiproxy-server` from `OCELLI_TOXIPROXY_SERVER`, else from PATH.
fn toxiproxy_server() -> Res<PathBuf> {
    if let Ok(p) = std::env::var("OCELLI_TOXIPROXY_SERVER") {
        return Ok(p.into());
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("toxiproxy-server"))
        .find(|p| p.is_file())
        .ok_or_else(|| "toxiproxy-server not found (.ci/faults.sh installs it)".into())
}

/// libfaketime's preload library.
fn libfaketime() -> Res<PathBuf> {
    for dir in [
        "/usr/lib/x86_64-linux-gnu/faketime",
        "/usr/lib/aarch64-linux-gnu/faketime",
    ] {
        let p = Path::new(dir).join("libfaketime.so.1");
        if p.is_file() {
            return Ok(p);
        }
    }
    Err("libfaketime not found (Debian package libfaketime)".into())
}

/// The proxy node `from` dials to reach node `to`.
fn proxy_name(from: usize, to: usize) -> String {
    format!("p{from}{to}")
}

fn proxy_listen(from: usize, to: usize) -> String {
    format!("{}:{}", host_ip(from), 7200 + 10 * from + to)
}

/// The `host:port` of a PostgreSQL URL.
fn pg_host(url: &str) -> Res<String> {
    let rest = url.rsplit_once('@').map_or(url, |(_, r)| r);
    let host = rest.split(['/', '?']).next().unwrap_or(rest);
    if host.contains(':') {
        Ok(host.to_owned())
    } else {
        Err(format!("no port in the PostgreSQL URL's host {host}").into())
    }
}

/// Where node `party` reaches the PostgreSQL server.
fn pg_listen(party: usize) -> String {
    format!("{}:{}", host_ip(party), 7300 + party)
}

/// Every pair's two proxies.
fn pair(a: usize, b: usize) -> [String; 2] {
    [proxy_name(a, b), proxy_name(b, a)]
}

/// Node `party`'s config: its listeners on its namespace's address, its peers through the
/// proxies, the data directory `data_dir`.
fn write_config(
    dir: &Path,
    keys: &Path,
    party: usize,
    data_dir: &Path,
    postgres: Option<(String, String)>,
) -> Res<PathBuf> {
    let ip = node_ip(party);
    let mut s = format!(
        "party_id = {party}\ndata_dir = \"{data}\"\n\
         [listen]\norb = \"{ip}:{ORB_PORT}\"\npeer = \"{ip}:{PEER_PORT}\"\nmetrics = \"{ip}:{METRICS_PORT}\"\n\
         [tls]\nca = \"{k}/ca.pem\"\ncert = \"{k}/party{party}/tls.pem\"\nkey = \"{k}/party{party}/tls.key.pem\"\n\
         gateways = [\"{k}/gateway0/tls.pem\"]\n\
         [keys]\nhpke_secret = \"{k}/party{party}/hpke.key\"\nhpke_hybrid_secret = \"{k}/party{party}/hpke-hybrid.key\"\nresult_signing = \"{k}/party{party}/result-signing.key\"\n\
         orb_allow_list = \"{k}/orb-allow-list.txt\"\n\
         [batch]\ninterval_ms = 50\nrequest_timeout_ms = 300000\npeer_rpc_timeout_ms = 2000\ncommit_timeout_ms = 60000\n\
         [matching]\nround_timeout_ms = 15000\ncpu_tuning = false\n",
        data = data_dir.display(),
        k = keys.display()
    );
    if let Some((url, schema)) = postgres {
        // Plaintext to the test's own server through its proxy (TLS to PostgreSQL has its own
        // tests in tests/store.rs).
        s.push_str(&format!(
            "[store]\nurl = \"{url}\"\nschema = \"{schema}\"\ntls = \"disable\"\n"
        ));
    }
    for peer in (0..3).filter(|&x| x != party) {
        s.push_str(&format!(
            "[[peers]]\nparty_id = {peer}\naddress = \"{}\"\nserver_name = \"localhost\"\n\
             cert = \"{k}/party{peer}/tls.pem\"\nresult_key = \"{k}/party{peer}/result-verifying.pub\"\n",
            proxy_listen(party, peer),
            k = keys.display()
        ));
    }
    let path = dir.join(format!("party{party}.toml"));
    std::fs::write(&path, s)?;
    Ok(path)
}

/// A person and the requests sealed for them: a first capture and a re-capture (the same
/// templates under a new request id), so a correct cluster enrols each person once.
struct Person {
    envelopes: Vec<([u8; 16], Vec<u8>)>,
    templates: (IrisTemplate, IrisTemplate),
}

/// How a scenario's cluster differs from the plain one.
#[derive(Default)]
struct Setup {
    /// A node's data directory elsewhere than the run's temporary directory.
    data_dirs: [Option<PathBuf>; 3],
    /// A libfaketime offset of a node's clock (`+240s`).
    clock_offset: [Option<&'static str>; 3],
    /// Every node on PostgreSQL: the server's URL (as this namespace reaches it) and the
    /// schema prefix of the run.
    postgres: Option<(String, String)>,
}

struct Cluster {
    net: Net,
    toxi: Toxiproxy,
    /// Keys, configs, logs and stores; removed with the cluster.
    _dir: tempfile::TempDir,
    data_dirs: Vec<PathBuf>,
    postgres: Option<(String, String)>,
    nodes: Vec<Node>,
    clients: Vec<OrbClient>,
    orb: OrbSigningKey,
    node_keys: NodeHybridPublicKeys,
    rng: ChaCha20Rng,
    /// Highest resident memory seen per node, KiB.
    rss_peak: [u64; 3],
    /// Resident memory a node may reach, KiB.
    rss_bound_kib: u64,
    /// People enrolled before the nodes started (serial ids 1 to this).
    prefilled: usize,
}

impl Cluster {
    /// Namespaces, proxies and keys; nodes configured but not started.
    async fn new(setup: Setup) -> Res<Self> {
        let dir = tempfile::tempdir()?;
        let keys = keygen(&KeygenOptions::local(dir.path().join("keys")))?;
        let net = Net::create()?;
        let toxi = Toxiproxy::start(&dir.path().join("toxiproxy.log"))?;
        for from in 0..3 {
            for to in (0..3).filter(|&t| t != from) {
                toxi.proxy(
                    &proxy_name(from, to),
                    &proxy_listen(from, to),
                    &format!("{}:{PEER_PORT}", node_ip(to)),
                )?;
            }
            // A node reaches the PostgreSQL server on this namespace's loopback through a
            // proxy too (whose address is its side of its veth pair).
            if let Some((url, _)) = &setup.postgres {
                toxi.proxy(&format!("pg{from}"), &pg_listen(from), &pg_host(url)?)?;
            }
        }
        let mut nodes = Vec::new();
        let mut clients = Vec::new();
        let data_dirs: Vec<PathBuf> = (0..3)
            .map(|party| {
                setup.data_dirs[party]
                    .clone()
                    .unwrap_or_else(|| dir.path().join(format!("data{party}")))
            })
            .collect();
        for (party, data) in data_dirs.iter().enumerate() {
            let store = match &setup.postgres {
                Some((url, prefix)) => Some((
                    url.replace(&pg_host(url)?, &pg_listen(party)),
                    format!("{prefix}_p{party}"),
                )),
                None => None,
            };
            let config = write_config(dir.path(), &keys.dir, party, data, store)?;
            let mut n = Node::new(config, dir.path().join(format!("party{party}.log")));
            n.launcher = ["ip", "netns", "exec", &net.ns(party)]
                .map(Into::into)
                .to_vec();
            if let Some(offset) = setup.clock_offset[party] {
                n.env.push(("LD_PRELOAD".into(), libfaketime()?.into()));
                n.env.push(("FAKETIME".into(), offset.into()));
            }
            nodes.push(n);
            let orb = format!("{}:{ORB_PORT}", node_ip(party)).parse()?;
            clients.push(OrbClient::with_identity(
                orb,
                "localhost",
                &keys.ca_cert(),
                &keys.gateway(0),
            )?);
        }
        let orb = OrbSigningKey::from_bytes(&*read_key32(&keys.orb_signing_key())?);
        let bundle: [u8; NodeHybridPublicKeys::BYTES] = std::fs::read(keys.public_keys_v2())?
            .try_into()
            .map_err(|_| "public key bundle")?;
        let node_keys = NodeHybridPublicKeys::from_bytes(&bundle)?;
        Ok(Cluster {
            net,
            toxi,
            _dir: dir,
            data_dirs,
            postgres: setup.postgres,
            nodes,
            clients,
            orb,
            node_keys,
            rng: ChaCha20Rng::seed_from_u64(now_ms()),
            rss_peak: [0; 3],
            rss_bound_kib: RSS_BOUND_KIB,
            prefilled: 0,
        })
    }

    async fn start(&mut self) -> Res {
        for n in &mut self.nodes {
            n.spawn()?;
        }
        for (c, n) in self.clients.iter().zip(&mut self.nodes) {
            wait_ready(c, Duration::from_secs(60), Some(n)).await?;
        }
        Ok(())
    }

    fn people(&mut self, count: usize) -> Res<Vec<Person>> {
        let mut people = Vec::new();
        for _ in 0..count {
            let mut p = self.person(1)?;
            self.capture(&mut p)?;
            people.push(p);
        }
        Ok(people)
    }

    /// A new person with `captures` envelopes (a first capture and re-captures).
    fn person(&mut self, captures: usize) -> Res<Person> {
        let l = sdk_orb::template::random(&mut self.rng, 0.1);
        let r = sdk_orb::template::random(&mut self.rng, 0.1);
        let mut p = Person {
            envelopes: Vec::new(),
            templates: (l, r),
        };
        for _ in 0..captures {
            self.capture(&mut p)?;
        }
        Ok(p)
    }

    /// Seals another capture of `p` (the same templates under a new request id).
    fn capture(&mut self, p: &mut Person) -> Res<([u8; 16], Vec<u8>)> {
        let meta = RequestMeta {
            request_id: RequestId::random(&mut self.rng),
            request_type: RequestType::Uniqueness,
            timestamp_ms: now_ms(),
            serial_id: 0,
            or_policy: false,
        };
        let (l, r) = &p.templates;
        let env = seal_envelope_v2_to_vec(&mut self.rng, &meta, l, r, &self.node_keys, &self.orb)?;
        p.envelopes.push((meta.request_id.0, env.clone()));
        Ok((meta.request_id.0, env))
    }

    /// Submits every envelope to the three nodes, as orbs do, retrying a node it cannot reach;
    /// returns the tasks (join them after the fault).
    fn submit(&self, people: &[Person]) -> Vec<tokio::task::JoinHandle<Res>> {
        let mut tasks = Vec::new();
        for p in people {
            for (_, env) in &p.envelopes {
                tasks.extend(self.submit_one(env));
            }
        }
        tasks
    }

    fn submit_one(&self, env: &[u8]) -> Vec<tokio::task::JoinHandle<Res>> {
        self.clients
            .iter()
            .map(|c| {
                let (c, env) = (c.clone(), env.to_vec());
                tokio::spawn(async move { submit_until_held(&c, &env, PATIENCE).await })
            })
            .collect()
    }

    fn sample_rss(&mut self) {
        for (peak, n) in self.rss_peak.iter_mut().zip(&self.nodes) {
            *peak = (*peak).max(n.rss_kib());
        }
    }

    /// Sleeps `d`, sampling memory.
    async fn hold(&mut self, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.sample_rss();
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Joins the submissions, waits until nothing is pending, stops the nodes, and checks the
    /// invariants on their stores. Returns a one-line account.
    async fn finish(
        mut self,
        people: &[Person],
        tasks: Vec<tokio::task::JoinHandle<Res>>,
    ) -> Res<String> {
        for t in tasks {
            t.await??;
        }
        let drain = Instant::now() + Duration::from_secs(300);
        while Instant::now() < drain {
            self.sample_rss();
            if wait_drained(&self.clients, &self.nodes, Duration::from_millis(500))
                .await
                .is_ok()
            {
                break;
            }
        }
        wait_drained(&self.clients, &self.nodes, Duration::from_secs(1)).await?;
        for n in &mut self.nodes {
            let status = n.terminate()?;
            if !status.success() {
                return Err(format!("a node exited with {status:?}").into());
            }
        }
        let mut summaries = Vec::new();
        let pg = self
            .postgres
            .as_ref()
            .map(|(u, p)| (u.as_str(), p.as_str()));
        for (party, data) in (0u8..).zip(&self.data_dirs) {
            summaries.push(store_summary(data, party, pg).await?);
        }
        for (party, other) in summaries.iter().enumerate().skip(1) {
            if *other != summaries[0] {
                return Err(format!(
                    "the stores of parties 0 and {party} differ: {}",
                    difference(&summaries[0], other)
                )
                .into());
            }
        }
        let s = &summaries[0];
        let mut statuses = std::collections::BTreeMap::<String, usize>::new();
        let mut enrolled = 0;
        for p in people {
            let mut enrolments = 0;
            for (id, _) in &p.envelopes {
                let r = s.requests.get(id).ok_or("a request was lost")?;
                if r.state != 2 {
                    return Err(format!("a request is not final (state {})", r.state).into());
                }
                let result = NodeResult::decode(r.result.as_deref().ok_or("no result")?)?;
                let status = ResultStatus::try_from(result.status)?;
                enrolments += usize::from(status == ResultStatus::UniqueEnrolled);
                *statuses.entry(status.as_str_name().to_owned()).or_default() += 1;
            }
            if enrolments > 1 {
                return Err("a person was enrolled twice".into());
            }
            enrolled += enrolments;
        }
        if s.serials.len() != self.prefilled + enrolled {
            return Err(format!(
                "{} serials for {} enrolled before and {enrolled} enrolments",
                s.serials.len(),
                self.prefilled
            )
            .into());
        }
        let peak = self.rss_peak.iter().max().copied().unwrap_or(0);
        if peak > self.rss_bound_kib {
            return Err(format!("a node reached {peak} KiB resident").into());
        }
        Ok(format!("{statuses:?}, peak resident {} MiB", peak / 1024))
    }
}

/// What differs between two store summaries, in a line.
fn difference(a: &StoreSummary, b: &StoreSummary) -> String {
    let mut out = Vec::new();
    if (a.last_applied_batch, a.next_serial) != (b.last_applied_batch, b.next_serial) {
        out.push(format!(
            "last batch {} / {}, next serial {} / {}",
            a.last_applied_batch, b.last_applied_batch, a.next_serial, b.next_serial
        ));
    }
    if a.serials != b.serials {
        out.push(format!("serials {:?} / {:?}", a.serials, b.serials));
    }
    let status = |r: Option<&ocelli_node::store::RequestSummary>| {
        r.map(|r| {
            let s = r
                .result
                .as_deref()
                .and_then(|b| NodeResult::decode(b).ok())
                .map(|n| n.status);
            (r.state, s)
        })
    };
    for id in a.requests.keys().chain(b.requests.keys()) {
        let (x, y) = (a.requests.get(id), b.requests.get(id));
        if x != y {
            out.push(format!(
                "request {}: (state, status) {:?} / {:?}",
                hex::encode(&id[..4]),
                status(x),
                status(y)
            ));
        }
    }
    out.join("; ")
}

type Scenario = fn(Length) -> std::pin::Pin<Box<dyn std::future::Future<Output = Res<String>>>>;

async fn latency(_: Length) -> Res<String> {
    let mut c = Cluster::new(Setup::default()).await?;
    c.start().await?;
    for p in pair(0, 1) {
        c.toxi
            .toxic(&p, "latency", r#"{"latency":200,"jitter":50}"#)?;
    }
    let people = c.people(3)?;
    let tasks = c.submit(&people);
    c.finish(&people, tasks).await
}

async fn loss(len: Length) -> Res<String> {
    let mut c = Cluster::new(Setup::default()).await?;
    c.start().await?;
    c.net.loss(2, 5)?;
    let people = c.people(if len == Length::Full { 8 } else { 3 })?;
    let tasks = c.submit(&people);
    c.finish(&people, tasks).await
}

/// Node `victim` cut off from everything for a while, requests arriving meanwhile.
async fn partition(victim: usize, len: Length) -> Res<String> {
    let mut c = Cluster::new(Setup::default()).await?;
    c.start().await?;
    let before = c.people(2)?;
    let mut tasks = c.submit(&before);
    c.net.link(victim, false)?;
    let during = c.people(2)?;
    tasks.extend(c.submit(&during));
    c.hold(Duration::from_secs(if len == Length::Full {
        30
    } else {
        10
    }))
    .await;
    c.net.link(victim, true)?;
    let people: Vec<Person> = before.into_iter().chain(during).collect();
    c.finish(&people, tasks).await
}

async fn partition_voter(len: Length) -> Res<String> {
    partition(2, len).await
}

async fn partition_coordinator(len: Length) -> Res<String> {
    partition(0, len).await
}

/// SIGKILL while batches run: each node in turn, at offsets that fall in different phases of
/// a batch (intake, agreement, matching rounds, commit), restarted after a pause.
async fn kill9(len: Length) -> Res<String> {
    let mut c = Cluster::new(Setup::default()).await?;
    c.start().await?;
    let offsets_ms: &[u64] = if len == Length::Full {
        &[0, 40, 120, 250, 500, 900]
    } else {
        &[40, 250]
    };
    let mut people = Vec::new();
    let mut tasks = Vec::new();
    for (i, &at) in offsets_ms.iter().enumerate() {
        let victim = i % 3;
        let wave = c.people(2)?;
        tasks.extend(c.submit(&wave));
        people.extend(wave);
        tokio::time::sleep(Duration::from_millis(at)).await;
        c.sample_rss();
        c.nodes[victim].kill9()?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        c.nodes[victim].spawn()?;
        wait_ready(
            &c.clients[victim],
            Duration::from_secs(60),
            Some(&mut c.nodes[victim]),
        )
        .await?;
    }
    c.finish(&people, tasks).await
}

/// Party 1's clock four minutes ahead of the others' (within the intake's freshness window of
/// five minutes, so it accepts the same envelopes).
async fn clock_offset(_: Length) -> Res<String> {
    let mut c = Cluster::new(Setup {
        clock_offset: [None, Some("+240s"), None],
        ..Setup::default()
    })
    .await?;
    c.start().await?;
    let people = c.people(3)?;
    let tasks = c.submit(&people);
    c.finish(&people, tasks).await
}

/// Slow links (a bandwidth limit between parties 0 and 2) and connections reset every few
/// seconds between parties 1 and 2.
async fn slow_and_reset(len: Length) -> Res<String> {
    let mut c = Cluster::new(Setup::default()).await?;
    c.start().await?;
    for p in pair(0, 2) {
        c.toxi.toxic(&p, "bandwidth", r#"{"rate":512}"#)?;
    }
    for p in pair(1, 2) {
        c.toxi.toxic(&p, "reset_peer", r#"{"timeout":3000}"#)?;
    }
    let people = c.people(3)?;
    let tasks = c.submit(&people);
    c.hold(Duration::from_secs(if len == Length::Full {
        30
    } else {
        10
    }))
    .await;
    for p in pair(1, 2) {
        c.toxi.clear(&p, "reset_peer")?;
    }
    c.finish(&people, tasks).await
}

/// Party 2's store on a small tmpfs that fills up while requests arrive, freed later.
async fn disk_full(len: Length) -> Res<String> {
    let mount = tempfile::tempdir()?;
    sh(
        "mount",
        &[
            "-t",
            "tmpfs",
            "-o",
            "size=48m",
            "tmpfs",
            &mount.path().display().to_string(),
        ],
    )?;
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = sh("umount", &["-l", &self.0.display().to_string()]);
        }
    }
    let _unmount = Unmount(mount.path().to_owned());
    let data = mount.path().join("data2");
    let mut c = Cluster::new(Setup {
        data_dirs: [None, None, Some(data)],
        ..Setup::default()
    })
    .await?;
    c.start().await?;
    let filler = mount.path().join("filler");
    // Whatever space is left, taken: writes fail with ENOSPC from here on.
    let _ = sh(
        "dd",
        &[
            "if=/dev/zero",
            &format!("of={}", filler.display()),
            "bs=1M",
            "count=64",
        ],
    );
    let people = c.people(3)?;
    let tasks = c.submit(&people);
    c.hold(Duration::from_secs(if len == Length::Full {
        20
    } else {
        8
    }))
    .await;
    std::fs::remove_file(&filler)?;
    c.finish(&people, tasks).await
}

/// Every node on PostgreSQL, the server restarted (by `.ci/postgres.sh restart`) while
/// requests arrive. Runs where `OCELLI_TEST_POSTGRES` names the server `.ci/postgres.sh`
/// started.
async fn postgres_restart(_: Length) -> Res<String> {
    let Ok(url) = std::env::var("OCELLI_TEST_POSTGRES") else {
        return Ok("skipped: OCELLI_TEST_POSTGRES is unset".into());
    };
    let mut c = Cluster::new(Setup {
        postgres: Some((url, format!("faults_{}", now_ms()))),
        ..Setup::default()
    })
    .await?;
    c.start().await?;
    let before = c.people(2)?;
    let mut tasks = c.submit(&before);
    c.hold(Duration::from_millis(500)).await;
    sh(
        "bash",
        &[
            concat!(env!("CARGO_MANIFEST_DIR"), "/../.ci/postgres.sh"),
            "restart",
        ],
    )?;
    let after = c.people(2)?;
    tasks.extend(c.submit(&after));
    let people: Vec<Person> = before.into_iter().chain(after).collect();
    c.finish(&people, tasks).await
}

fn scenarios() -> Vec<(&'static str, bool, Scenario)> {
    // (name, in the short set, run)
    vec![
        (
            "200 ms latency with 50 ms jitter between parties 0 and 1",
            true,
            |l| Box::pin(latency(l)),
        ),
        ("5 % packet loss at party 2", true, |l| Box::pin(loss(l))),
        ("party 2 partitioned, then back", true, |l| {
            Box::pin(partition_voter(l))
        }),
        (
            "party 0 (the coordinator) partitioned, then back",
            true,
            |l| Box::pin(partition_coordinator(l)),
        ),
        ("SIGKILL and restart at points across a batch", true, |l| {
            Box::pin(kill9(l))
        }),
        ("party 1's clock four minutes ahead", false, |l| {
            Box::pin(clock_offset(l))
        }),
        ("bandwidth limit and connection resets", false, |l| {
            Box::pin(slow_and_reset(l))
        }),
        ("party 2's disk full, then freed", false, |l| {
            Box::pin(disk_full(l))
        }),
        ("PostgreSQL restarted under load", false, |l| {
            Box::pin(postgres_restart(l))
        }),
    ]
}

/// Enrols `people` random people straight into the three (empty, stopped) stores, shared as
/// the orb shares them, so the nodes match new requests against a real population.
fn prefill(data_dirs: &[PathBuf], people: u64, rng: &mut ChaCha20Rng) -> Res {
    use ocelli_node::ids::SerialId;
    use ocelli_node::shares::{StoredShares, CODE_BYTES, ENTRY_BYTES, MASK_BYTES};
    use ocelli_node::store::redb::RedbStore;
    use ocelli_node::store::{BatchWrite, ShareWrite, Store as _};
    use sdk_orb::shamir::{share_template_streaming, write_element, TemplatePart};

    let stores = data_dirs
        .iter()
        .map(|d| RedbStore::open(d))
        .collect::<Result<Vec<_>, _>>()?;
    // Where each part of an entry starts: left code, left mask, right code, right mask.
    let parts = [
        (0, TemplatePart::Code, 0),
        (0, TemplatePart::Mask, CODE_BYTES),
        (1, TemplatePart::Code, CODE_BYTES + MASK_BYTES),
        (1, TemplatePart::Mask, 2 * CODE_BYTES + MASK_BYTES),
    ];
    let mut all = vec![0u8; 3 * ENTRY_BYTES];
    let mut serial = 1;
    while serial <= people {
        let end = people.min(serial + 499);
        let mut writes: [Vec<(SerialId, ShareWrite)>; 3] = Default::default();
        for id in serial..=end {
            let eyes = [
                sdk_orb::template::random(rng, 0.1),
                sdk_orb::template::random(rng, 0.1),
            ];
            for (eye, part, at) in parts {
                let base = [at, ENTRY_BYTES + at, 2 * ENTRY_BYTES + at];
                share_template_streaming(rng, &eyes[eye], part, |e, shares| {
                    write_element(&mut all, &base, e, shares)
                });
            }
            for (party, w) in writes.iter_mut().enumerate() {
                let entry = &all[party * ENTRY_BYTES..(party + 1) * ENTRY_BYTES];
                let stored = StoredShares::build(|b| b.copy_from_slice(entry));
                w.push((SerialId(id), ShareWrite::Put(stored)));
            }
        }
        for (store, shares) in stores.iter().zip(writes) {
            store.apply_batch(&BatchWrite {
                shares,
                next_serial: end + 1,
                ..BatchWrite::default()
            })?;
        }
        serial = end + 1;
    }
    Ok(())
}

/// One request of the soak: when it was submitted (seconds since the start) and how long
/// until party 0 had its result (seconds).
#[derive(Clone, Copy)]
struct Answered {
    at: f64,
    latency: f64,
}

/// Polls party 0 until it has the result of `id`.
async fn answered(client: OrbClient, id: [u8; 16], at: f64) -> Res<Answered> {
    let deadline = Instant::now() + Duration::from_secs(900);
    let submitted = Instant::now();
    loop {
        let mut c = client.orb.clone();
        let call = c.get_result(shared_proto::v1::GetResultRequest {
            request_id: id.to_vec(),
        });
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(5), call).await {
            return Ok(Answered {
                at,
                latency: submitted.elapsed().as_secs_f64(),
            });
        }
        if Instant::now() > deadline {
            return Err("no result in 15 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A fault of the soak's schedule: seconds into each five-minute cycle it starts and ends.
struct Fault {
    name: &'static str,
    from: u64,
    to: u64,
}

const SCHEDULE: [Fault; 4] = [
    Fault {
        name: "100 ms latency 0-1",
        from: 60,
        to: 120,
    },
    Fault {
        name: "party 2 cut off",
        from: 150,
        to: 170,
    },
    Fault {
        name: "party 1 SIGKILL",
        from: 210,
        to: 212,
    },
    Fault {
        name: "5 % loss at party 0",
        from: 240,
        to: 270,
    },
];

impl Cluster {
    /// Starts (`on`) or ends fault `i` of [`SCHEDULE`].
    async fn fault(&mut self, i: usize, on: bool) -> Res {
        match i {
            0 => {
                for p in pair(0, 1) {
                    if on {
                        self.toxi
                            .toxic(&p, "latency", r#"{"latency":100,"jitter":20}"#)?;
                    } else {
                        self.toxi.clear(&p, "latency")?;
                    }
                }
            }
            1 => self.net.link(2, !on)?,
            2 if on => self.nodes[1].kill9()?,
            2 => self.nodes[1].spawn()?,
            _ => self.net.loss(0, if on { 5 } else { 0 })?,
        }
        Ok(())
    }
}

/// A line of a plot: its name, colour and points.
type Series<'a> = (&'a str, &'a str, &'a [(f64, f64)]);

/// The soak's record as an SVG: answered requests per minute, latency p50 and p99 per minute,
/// and each node's resident memory, over time, with the faults shaded.
fn soak_svg(answers: &[Answered], rss: &[(f64, [u64; 3])], minutes: u64) -> String {
    let (w, h, left, top) = (900.0, 200.0, 70.0, 30.0);
    let span = (minutes * 60) as f64;
    let x = |t: f64| left + w * t / span;
    let per_minute = |f: &dyn Fn(&[f64]) -> f64| -> Vec<(f64, f64)> {
        (0..minutes)
            .filter_map(|m| {
                let mut v: Vec<f64> = answers
                    .iter()
                    .filter(|a| a.at >= (m * 60) as f64 && a.at < ((m + 1) * 60) as f64)
                    .map(|a| a.latency)
                    .collect();
                v.sort_by(f64::total_cmp);
                (!v.is_empty()).then(|| ((m * 60 + 30) as f64, f(&v)))
            })
            .collect()
    };
    let pct = |p: f64| move |v: &[f64]| v[((v.len() - 1) as f64 * p).round() as usize];
    let count = per_minute(&|v: &[f64]| v.len() as f64);
    let p50 = per_minute(&pct(0.5));
    let p99 = per_minute(&pct(0.99));
    let mem: Vec<Vec<(f64, f64)>> = (0..3)
        .map(|k| {
            rss.iter()
                .map(|(t, r)| (*t, r[k] as f64 / 1024.0))
                .collect()
        })
        .collect();
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">"#,
        w + left + 150.0,
        3.0 * (h + top) + 40.0
    );
    let panels: [(&str, Vec<Series<'_>>); 3] = [
        (
            "answered requests per minute",
            vec![("answered", "#1f77b4", &count)],
        ),
        (
            "latency to a result, seconds (per minute)",
            vec![("p50", "#2ca02c", &p50), ("p99", "#d62728", &p99)],
        ),
        (
            "resident memory, MiB",
            vec![
                ("party 0", "#1f77b4", &mem[0]),
                ("party 1", "#ff7f0e", &mem[1]),
                ("party 2", "#2ca02c", &mem[2]),
            ],
        ),
    ];
    for (i, (title, lines)) in panels.iter().enumerate() {
        let y0 = top + i as f64 * (h + top);
        let ymax = lines
            .iter()
            .flat_map(|(_, _, pts)| pts.iter().map(|p| p.1))
            .fold(0.0_f64, f64::max)
            .max(1e-9)
            * 1.1;
        let y = |v: f64| y0 + h - h * v / ymax;
        for cycle in 0..minutes.div_ceil(5) {
            for f in &SCHEDULE {
                let (a, b) = ((cycle * 300 + f.from) as f64, (cycle * 300 + f.to) as f64);
                if a < span {
                    svg += &format!(
                        r##"<rect x="{:.1}" y="{y0:.1}" width="{:.1}" height="{h}" fill="#bbbbbb" opacity="0.35"/>"##,
                        x(a),
                        (x(b.min(span)) - x(a)).max(1.0)
                    );
                }
            }
        }
        svg += &format!(
            r##"<rect x="{left}" y="{y0:.1}" width="{w}" height="{h}" fill="none" stroke="#333"/><text x="{left}" y="{:.1}">{title}</text><text x="{:.1}" y="{:.1}" text-anchor="end">{:.1}</text><text x="{:.1}" y="{:.1}" text-anchor="end">0</text>"##,
            y0 - 6.0,
            left - 4.0,
            y0 + 10.0,
            ymax,
            left - 4.0,
            y0 + h
        );
        for (k, (name, colour, pts)) in lines.iter().enumerate() {
            let path: Vec<String> = pts
                .iter()
                .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v)))
                .collect();
            svg += &format!(
                r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/><text x="{:.1}" y="{:.1}" fill="{colour}">{name}</text>"#,
                path.join(" "),
                left + w + 10.0,
                y0 + 15.0 + 15.0 * k as f64
            );
        }
    }
    let y_axis = 3.0 * (h + top) + 10.0;
    for m in (0..=minutes).step_by(5) {
        svg += &format!(
            r#"<text x="{:.1}" y="{y_axis:.1}" text-anchor="middle">{m} min</text>"#,
            x((m * 60) as f64)
        );
    }
    svg += &format!(
        r#"<text x="{left}" y="{:.1}">shaded: the fault schedule, every five minutes: {}</text></svg>"#,
        y_axis + 20.0,
        SCHEDULE
            .map(|f| format!("{} ({}-{} s)", f.name, f.from, f.to))
            .join(", ")
    );
    svg
}

/// The bounded soak (by hand, release build; docs/operations.md): a steady request rate
/// against an enrolled population with faults on a five-minute schedule; throughput, latency
/// and memory over time written to `OCELLI_SOAK_OUT` (CSV and SVG), then the invariants.
async fn soak() -> Res {
    let minutes: u64 = env_or("OCELLI_SOAK_MINUTES", 30)?;
    let people: u64 = env_or("OCELLI_SOAK_PEOPLE", 10_000)?;
    let rate: f64 = env_or("OCELLI_SOAK_RATE", 1.0)?;
    let out = PathBuf::from(
        std::env::var("OCELLI_SOAK_OUT")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../target/soak").into()),
    );
    std::fs::create_dir_all(&out)?;
    let mut c = Cluster::new(Setup::default()).await?;
    c.rss_bound_kib = 4 << 20;
    eprintln!("soak: writing {people} enrolled people into the three stores");
    let t = Instant::now();
    prefill(&c.data_dirs, people, &mut c.rng)?;
    c.prefilled = usize::try_from(people)?;
    eprintln!(
        "soak: written in {:.0} s; starting the nodes",
        t.elapsed().as_secs_f64()
    );
    c.start().await?;

    let started = Instant::now();
    let span = Duration::from_secs(minutes * 60);
    let interval = Duration::from_secs_f64(1.0 / rate);
    let mut crowd: Vec<Person> = Vec::new();
    let mut tasks = Vec::new();
    let mut waits = Vec::new();
    let mut rss = Vec::new();
    let mut active = [false; SCHEDULE.len()];
    let mut next_request = started;
    let mut next_sample = started;
    let mut sent = 0u64;
    while started.elapsed() < span {
        let now = started.elapsed().as_secs();
        for (i, f) in SCHEDULE.iter().enumerate() {
            let within = (f.from..f.to).contains(&(now % 300));
            if within != active[i] {
                eprintln!(
                    "soak: {:>5} s {} {}",
                    now,
                    if within { "start" } else { "end" },
                    f.name
                );
                c.fault(i, within).await?;
                active[i] = within;
            }
        }
        if Instant::now() >= next_request {
            next_request += interval;
            sent += 1;
            // Every fourth request is a re-capture of someone the soak enrolled.
            let (id, env) = if sent.is_multiple_of(4) && !crowd.is_empty() {
                let k = (sent as usize / 4) % crowd.len();
                let mut p = std::mem::replace(&mut crowd[k], c.person(0)?);
                let r = c.capture(&mut p)?;
                crowd[k] = p;
                r
            } else {
                let mut p = c.person(0)?;
                let r = c.capture(&mut p)?;
                crowd.push(p);
                r
            };
            tasks.extend(c.submit_one(&env));
            let at = started.elapsed().as_secs_f64();
            waits.push(tokio::spawn(answered(c.clients[0].clone(), id, at)));
        }
        if Instant::now() >= next_sample {
            next_sample += Duration::from_secs(5);
            c.sample_rss();
            let r = [0, 1, 2].map(|k| c.nodes[k].rss_kib());
            rss.push((started.elapsed().as_secs_f64(), r));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (i, on) in active.iter().enumerate() {
        if *on {
            c.fault(i, false).await?;
        }
    }
    eprintln!("soak: {sent} requests sent; waiting for every result");
    let mut answers = Vec::new();
    for w in waits {
        answers.push(w.await??);
    }
    let mut csv = String::from("submitted_s,latency_s\n");
    for a in &answers {
        csv += &format!("{:.3},{:.3}\n", a.at, a.latency);
    }
    std::fs::write(out.join("soak-requests.csv"), csv)?;
    let mut csv = String::from("t_s,rss_kib_0,rss_kib_1,rss_kib_2\n");
    for (t, r) in &rss {
        csv += &format!("{t:.1},{},{},{}\n", r[0], r[1], r[2]);
    }
    std::fs::write(out.join("soak-memory.csv"), csv)?;
    std::fs::write(out.join("soak.svg"), soak_svg(&answers, &rss, minutes))?;
    let mut lat: Vec<f64> = answers.iter().map(|a| a.latency).collect();
    lat.sort_by(f64::total_cmp);
    let q = |p: f64| lat[((lat.len() - 1) as f64 * p).round() as usize];
    let account = c.finish(&crowd, tasks).await?;
    eprintln!(
        "soak passed: {minutes} min, {people} enrolled before, {sent} requests at {rate}/s, \
         {:.2} answered/s, latency p50 {:.2} s p99 {:.2} s max {:.2} s; {account}; written to {}",
        answers.len() as f64 / span.as_secs_f64(),
        q(0.5),
        q(0.99),
        q(1.0),
        out.display()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_soak() -> Res {
    if std::env::var("OCELLI_FAULTS").as_deref() != Ok("soak") {
        eprintln!("skipping the soak: OCELLI_FAULTS is not `soak` (.ci/faults.sh soak runs it)");
        return Ok(());
    }
    soak().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_scenarios() -> Res {
    let Some(len) = length() else {
        eprintln!("skipping the fault scenarios: OCELLI_FAULTS is unset (.ci/faults.sh runs them)");
        return Ok(());
    };
    let only = std::env::var("OCELLI_FAULTS_ONLY").ok();
    let mut failed = Vec::new();
    for (name, short, run) in scenarios() {
        if len == Length::Short && !short {
            continue;
        }
        if only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let started = Instant::now();
        match run(len).await {
            Ok(account) if account.starts_with("skipped") => {
                eprintln!("fault scenario {account}: {name}");
            }
            Ok(account) => eprintln!(
                "fault scenario passed in {:.0} s: {name}: {account}",
                started.elapsed().as_secs_f64()
            ),
            Err(e) => {
                eprintln!("fault scenario FAILED: {name}: {e}");
                failed.push(name);
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("fault scenarios failed: {failed:?}").into())
    }
}

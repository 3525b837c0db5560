//! The key exchange of the node's TLS, over real sockets: both ports complete a handshake
//! with a client offering only X25519MLKEM768; the peer port refuses a client offering only
//! X25519 unless `tls.require_hybrid_kx_peers` is off, the orb port accepts it unless
//! `tls.require_hybrid_kx_orbs` is on; an MPC link between two nodes keys with
//! X25519MLKEM768; `ocelli_tls_handshakes_total` counts each port's handshakes by group.

#[path = "support/cluster.rs"]
mod cluster;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{http_get, sample, Cluster, Res};
use ocelli_node::batch::NotEvaluated;
use ocelli_node::config::NodeConfig;
use ocelli_node::links::Peers;
use ocelli_node::tls::{load_certs, load_key, NodeTls};
use rustls::crypto::{aws_lc_rs, ring, CryptoProvider, SupportedKxGroup};
use rustls::pki_types::ServerName;
use rustls::{AlertDescription, ClientConfig, NamedGroup, RootCertStore};
use sdk_orb::PartyId;
use tokio_rustls::TlsConnector;

const HYBRID: NamedGroup = NamedGroup::X25519MLKEM768;
const CLASSICAL: NamedGroup = NamedGroup::X25519;

fn group(name: NamedGroup) -> &'static dyn SupportedKxGroup {
    match name {
        HYBRID => aws_lc_rs::kx_group::X25519MLKEM768,
        _ => ring::kx_group::X25519,
    }
}

/// A TLS 1.3 client that offers only `kx`, trusts the cluster's CA and presents the
/// certificate in the key directory `identity`, if any (its own code: not the node's configs).
fn client(c: &Cluster, kx: NamedGroup, identity: Option<&Path>) -> Res<Arc<ClientConfig>> {
    let provider = CryptoProvider {
        kx_groups: vec![group(kx)],
        ..ring::default_provider()
    };
    let mut roots = RootCertStore::empty();
    for cert in load_certs(&c.keys.ca_cert())? {
        roots.add(cert)?;
    }
    let builder = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(dir) => builder.with_client_auth_cert(
            load_certs(&dir.join("tls.pem"))?,
            load_key(&dir.join("tls.key.pem"))?,
        )?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// A handshake with `addr`: the group it negotiated, or the alert the server answered.
async fn handshake(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
) -> Res<Result<NamedGroup, AlertDescription>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost")?;
    match TlsConnector::from(config).connect(name, tcp).await {
        Ok(tls) => {
            let group = tls.get_ref().1.negotiated_key_exchange_group();
            Ok(Ok(group.ok_or("no key exchange group")?.name()))
        }
        Err(e) => match e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
            Some(rustls::Error::AlertReceived(alert)) => Ok(Err(*alert)),
            _ => Err(e.into()),
        },
    }
}

/// Node `i`'s count of handshakes on `port` that negotiated `group`, once it reaches `at_least`
/// (a server counts a handshake after its client has finished it).
async fn handshakes(
    c: &Cluster,
    i: usize,
    port: &str,
    group: NamedGroup,
    at_least: f64,
) -> Res<f64> {
    let series =
        format!("ocelli_tls_handshakes_total{{group=\"{group:?}\",port=\"{port}\",party=\"{i}\"}}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let scrape = http_get(c.configs[i].listen.metrics, "/metrics").await?;
        let n = sample(&scrape, &series).unwrap_or(0.0);
        if n >= at_least || Instant::now() > deadline {
            return Ok(n);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Node 0 alone, with `tweak` applied to the configs.
async fn node0(tweak: &dyn Fn(&mut NodeConfig)) -> Res<Cluster> {
    let (c, _) = Cluster::start_partial(Arc::new(NotEvaluated), false, tweak, &[0]).await?;
    Ok(c)
}

/// Party 1's key directory: its certificate is the one node 0 accepts as party 1.
fn party1_dir(c: &Cluster) -> std::path::PathBuf {
    c.keys.party_file(PartyId::ALL[1], "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_ports_complete_a_handshake_offering_only_x25519mlkem768() -> Res {
    let mut c = node0(&|_| {}).await?;
    let orb = client(&c, HYBRID, Some(&c.keys.gateway(0)))?;
    assert_eq!(handshake(c.configs[0].listen.orb, orb).await?, Ok(HYBRID));
    let peer = client(&c, HYBRID, Some(&party1_dir(&c)))?;
    assert_eq!(handshake(c.configs[0].listen.peer, peer).await?, Ok(HYBRID));
    assert_eq!(handshakes(&c, 0, "orb", HYBRID, 1.0).await?, 1.0);
    assert_eq!(handshakes(&c, 0, "peer", HYBRID, 1.0).await?, 1.0);
    c.stop_all().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_x25519_alone_is_refused_by_the_peer_port_and_accepted_by_the_orb_port() -> Res {
    let mut c = node0(&|_| {}).await?;
    let peer = client(&c, CLASSICAL, Some(&party1_dir(&c)))?;
    assert_eq!(
        handshake(c.configs[0].listen.peer, peer).await?,
        Err(AlertDescription::HandshakeFailure)
    );
    let orb = client(&c, CLASSICAL, Some(&c.keys.gateway(0)))?;
    assert_eq!(
        handshake(c.configs[0].listen.orb, orb).await?,
        Ok(CLASSICAL)
    );
    // What an operator reads to see how much orb traffic is still classical.
    assert_eq!(handshakes(&c, 0, "orb", CLASSICAL, 1.0).await?, 1.0);
    assert_eq!(handshakes(&c, 0, "peer", CLASSICAL, 0.0).await?, 0.0);
    c.stop_all().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_settings_move_each_port_between_required_and_preferred() -> Res {
    let mut c = node0(&|cfg| {
        cfg.tls.require_hybrid_kx_orbs = true;
        cfg.tls.require_hybrid_kx_peers = false;
    })
    .await?;
    let orb = client(&c, CLASSICAL, Some(&c.keys.gateway(0)))?;
    assert_eq!(
        handshake(c.configs[0].listen.orb, orb).await?,
        Err(AlertDescription::HandshakeFailure)
    );
    let orb = client(&c, HYBRID, Some(&c.keys.gateway(0)))?;
    assert_eq!(handshake(c.configs[0].listen.orb, orb).await?, Ok(HYBRID));
    let peer = client(&c, CLASSICAL, Some(&party1_dir(&c)))?;
    assert_eq!(
        handshake(c.configs[0].listen.peer, peer).await?,
        Ok(CLASSICAL)
    );
    c.stop_all().await?;
    Ok(())
}

/// Node 0's own MPC dialer opens a link to node 1's peer port, the only connection that port
/// accepts here (node 0 runs no server, so nothing else dials node 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mpc_link_between_two_nodes_keys_with_x25519mlkem768() -> Res {
    let (mut c, _) = Cluster::start_partial(Arc::new(NotEvaluated), true, &|_| {}, &[1]).await?;
    let tls = NodeTls::load(&c.configs[0])?;
    let peers = Peers::connect(&c.configs[0], &tls)?;
    let dialer = peers.mpc(PartyId::ALL[1]).ok_or("no dialer for party 1")?;
    let _link = dialer.dial(5).await?;
    assert_eq!(handshakes(&c, 1, "peer", HYBRID, 1.0).await?, 1.0);
    assert_eq!(handshakes(&c, 1, "peer", CLASSICAL, 0.0).await?, 0.0);
    c.stop_all().await?;
    Ok(())
}

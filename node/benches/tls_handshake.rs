//! Full TLS 1.3 handshakes over loopback against a node's peer port config (mutual
//! authentication, keygen's certificates), one row per key exchange: X25519 offered alone
//! with ring's default provider (the node's configs before X25519MLKEM768), the peer links'
//! client (X25519MLKEM768 alone), and a client offering X25519MLKEM768 first with X25519 as
//! well (what the node's orb client sends). The rows take turns in rounds, client and server on
//! one thread, so a handshake's time is both ends' work; no session is resumed.
//!
//! `cargo bench -p ocelli-node --bench tls_handshake` (`OCELLI_HANDSHAKES` per row, 2,000 by
//! default). Prints the median and mean per row and each row's median against the first.

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ocelli_node::config::NodeConfig;
use ocelli_node::keys::{keygen, sample_node_config, KeygenOptions, KeygenOutput};
use ocelli_node::tls::{load_certs, load_key, NodeTls};
use rustls::client::Resumption;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use sdk_orb::PartyId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

type Res<T> = Result<T, Box<dyn Error>>;

const ROUNDS: usize = 20;

fn config(keys: &KeygenOutput, party: usize, require_hybrid: bool) -> NodeConfig {
    let mut c = sample_node_config(PartyId::ALL[party], 50050);
    c.resolve_paths(&keys.dir);
    c.tls.require_hybrid_kx_peers = require_hybrid;
    c
}

/// Party 1's client of party 0's peer port under `c`, resuming no session.
fn peer_client(c: &NodeConfig) -> Res<ClientConfig> {
    let tls = NodeTls::load(c)?;
    let mut client = (**tls.peer_clients.get(&PartyId::ALL[0]).ok_or("no client")?).clone();
    client.resumption = Resumption::disabled();
    Ok(client)
}

/// Party 1's certificate and key with ring's default provider: X25519, P-256 and P-384.
fn ring_client(keys: &KeygenOutput) -> Res<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(&keys.ca_cert())? {
        roots.add(cert)?;
    }
    let p1 = PartyId::ALL[1];
    let mut client =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(roots)
            .with_client_auth_cert(
                load_certs(&keys.party_file(p1, "tls.pem"))?,
                load_key(&keys.party_file(p1, "tls.key.pem"))?,
            )?;
    client.alpn_protocols = vec![b"h2".to_vec()];
    client.resumption = Resumption::disabled();
    Ok(client)
}

/// One handshake, finished on both ends (the server answers a byte once it has).
async fn handshake(
    listener: &TcpListener,
    acceptor: &TlsAcceptor,
    connector: &TlsConnector,
) -> Res<String> {
    let name = ServerName::try_from("127.0.0.1")?;
    let server = async {
        let (tcp, _) = listener.accept().await?;
        // As the node's sockets: no Nagle delay on the handshake's small flights.
        tcp.set_nodelay(true)?;
        let mut tls = acceptor.accept(tcp).await?;
        tls.write_all(&[1]).await?;
        tls.flush().await?;
        Ok::<_, std::io::Error>(tls)
    };
    let client = async {
        let tcp = TcpStream::connect(listener.local_addr()?).await?;
        tcp.set_nodelay(true)?;
        let mut tls = connector.connect(name, tcp).await?;
        let mut byte = [0u8; 1];
        tls.read_exact(&mut byte).await?;
        Ok::<_, std::io::Error>(tls)
    };
    let (_server, client) = tokio::try_join!(server, client)?;
    let group = client.get_ref().1.negotiated_key_exchange_group();
    Ok(format!("{:?}", group.ok_or("no key exchange")?.name()))
}

fn main() -> Res<()> {
    let per_row: usize = std::env::var("OCELLI_HANDSHAKES")
        .map_or(Ok(2000), |n| n.parse())?
        .max(1);
    let dir = tempfile::tempdir()?;
    let keys = keygen(&KeygenOptions::local(dir.path().join("keys")))?;
    // Accepts every group, so each row negotiates what its client offers first.
    let server = NodeTls::load(&config(&keys, 0, false))?.peer_server;
    let rows: Vec<(&str, TlsConnector)> = vec![
        (
            "X25519, ring's default provider",
            TlsConnector::from(Arc::new(ring_client(&keys)?)),
        ),
        (
            "X25519MLKEM768 alone (peer links)",
            TlsConnector::from(Arc::new(peer_client(&config(&keys, 1, true))?)),
        ),
        (
            "X25519MLKEM768 first, X25519 too (orb client)",
            TlsConnector::from(Arc::new(peer_client(&config(&keys, 1, false))?)),
        ),
    ];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let times = rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let acceptor = TlsAcceptor::from(server);
        let mut times: Vec<(String, Vec<Duration>)> = Vec::new();
        for (_, connector) in &rows {
            let group = handshake(&listener, &acceptor, connector).await?;
            times.push((group, Vec::with_capacity(per_row)));
        }
        for round in 0..ROUNDS {
            let n = per_row * (round + 1) / ROUNDS - per_row * round / ROUNDS;
            for (row, (_, connector)) in rows.iter().enumerate() {
                for _ in 0..n {
                    let start = Instant::now();
                    handshake(&listener, &acceptor, connector).await?;
                    times[row].1.push(start.elapsed());
                }
            }
        }
        Ok::<_, Box<dyn Error>>(times)
    })?;
    println!("{per_row} full handshakes per row, {ROUNDS} rounds, client and server on one thread");
    println!("| client | negotiated | median µs | mean µs | median vs first |");
    println!("|---|---|---:|---:|---:|");
    let mut first = None;
    for ((name, _), (group, mut t)) in rows.iter().zip(times) {
        t.sort_unstable();
        let median = t[t.len() / 2].as_secs_f64() * 1e6;
        let mean = t.iter().map(Duration::as_secs_f64).sum::<f64>() / t.len() as f64 * 1e6;
        let base = *first.get_or_insert(median);
        println!(
            "| {name} | {group} | {median:.0} | {mean:.0} | {:.2}× |",
            median / base
        );
    }
    Ok(())
}

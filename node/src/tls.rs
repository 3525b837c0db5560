//! TLS with rustls: the `ring` provider, with the hybrid post-quantum key exchange
//! X25519MLKEM768 from aws-lc-rs ([`provider`]).
//!
//! - Every TLS 1.3 handshake offers X25519MLKEM768 first. The peer port and the links a node
//!   dials accept only it unless `tls.require_hybrid_kx_peers` is off; the orb port accepts
//!   the classical groups too unless `tls.require_hybrid_kx_orbs` is on ([`KeyExchange`]).
//! - Orb gateways and results consumers reach a node's orb API over TLS with a client
//!   certificate, which must be byte-for-byte one configured under `tls.gateways` or
//!   `tls.results_consumers`; a caller without one completes the handshake but every call
//!   is refused as unauthenticated (so it learns why) and its connection is closed soon
//!   after, one with any other certificate is refused in the handshake.
//! - Nodes reach each other over mutual TLS. Beyond chaining to the
//!   deployment CA, a certificate must be byte-for-byte the one configured for
//!   that party id: a node refuses a peer presenting any other certificate,
//!   including another party's.
//! - Until a connection has authenticated, it holds a slot of its port's [`Admission`] (caps
//!   per port and per source address, and a deadline) and no read buffer ([`BufferedTcp`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::NodeConfig;
use crate::metrics::HandshakeCounter;

mod admission;
mod socket;

pub use self::admission::{Admission, Closer, Slot};
pub use self::socket::{client_certs, connection, BufferedTcp, ConnectionInfo};

/// TLS setup errors.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or parsed.
    #[error("{path}: {what}")]
    Pem {
        /// The file.
        path: String,
        /// What went wrong.
        what: String,
    },
    /// rustls refused the material.
    #[error("tls: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client verifier could not be built.
    #[error("tls client verifier: {0}")]
    Verifier(String),
}

pub use crate::tls_provider::{provider, KeyExchange};

/// ALPN protocol of the MPC links on the peer port (`crate::links`); gRPC there is `h2`.
pub const MPC_ALPN: &[u8] = b"ocelli-mpc/1";

/// `peer_client` (a peer service client config) offering the MPC link protocol instead.
pub fn mpc_client_config(peer_client: &ClientConfig) -> Arc<ClientConfig> {
    let mut c = peer_client.clone();
    c.alpn_protocols = vec![MPC_ALPN.to_vec()];
    Arc::new(c)
}

/// Reads all certificates of a PEM file.
///
/// # Errors
/// Unreadable file, bad PEM, no certificate.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let err = |what: String| TlsError::Pem {
        path: path.display().to_string(),
        what,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no certificate".to_owned()));
    }
    Ok(certs)
}

/// Reads a private key PEM file.
///
/// # Errors
/// Unreadable file or no key in it (the message never contains key bytes).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::Pem {
        path: path.display().to_string(),
        what: e.to_string(),
    })
}

fn roots(ca: &[CertificateDer<'static>]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in ca {
        roots.add(c.clone())?;
    }
    Ok(roots)
}

/// Everything TLS a node needs, built once from its config.
#[derive(Clone, Debug)]
pub struct NodeTls {
    /// Orb-facing server config (a configured gateway or results consumer certificate, or
    /// none: then every call is refused).
    pub orb_server: Arc<ServerConfig>,
    /// The configured orb-API clients.
    pub orb_clients: OrbClients,
    /// Peer-facing server config (client certificate of a configured peer required).
    pub peer_server: Arc<ServerConfig>,
    /// Client config to dial each peer, pinned to that peer's certificate.
    pub peer_clients: HashMap<sdk_orb::PartyId, Arc<ClientConfig>>,
    /// The configured certificate of each peer.
    pub peer_certs: PeerCerts,
}

/// The configured certificate of each peer party.
#[derive(Clone, Debug, Default)]
pub struct PeerCerts(Vec<(sdk_orb::PartyId, CertificateDer<'static>)>);

impl PeerCerts {
    /// The party whose configured certificate is `cert`, if any.
    pub fn party_of(&self, cert: &CertificateDer<'_>) -> Option<sdk_orb::PartyId> {
        self.0
            .iter()
            .find(|(_, c)| c.as_ref() == cert.as_ref())
            .map(|(p, _)| *p)
    }
}

/// What an orb-API client may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrbRole {
    /// Submits envelopes; reads the results of the requests it submitted.
    Gateway,
    /// Reads and streams every result; submits nothing.
    ResultsConsumer,
}

/// An authenticated orb-API caller: its role and identity (SHA-256 of its certificate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrbCaller {
    /// What it may do.
    pub role: OrbRole,
    /// SHA-256 of its certificate: what a request record keeps as its submitter.
    pub id: [u8; 32],
}

/// The configured orb-API client certificates.
#[derive(Clone, Debug, Default)]
pub struct OrbClients(Vec<(OrbRole, CertificateDer<'static>)>);

impl OrbClients {
    /// The caller presenting `cert`, if it is a configured one.
    pub fn caller_of(&self, cert: &CertificateDer<'_>) -> Option<OrbCaller> {
        use sha2::Digest;
        self.0
            .iter()
            .find(|(_, c)| c.as_ref() == cert.as_ref())
            .map(|(role, c)| OrbCaller {
                role: *role,
                id: sha2::Sha256::digest(c.as_ref()).into(),
            })
    }
}

fn first_cert(path: &Path) -> Result<CertificateDer<'static>, TlsError> {
    load_certs(path)?
        .into_iter()
        .next()
        .ok_or_else(|| TlsError::Pem {
            path: path.display().to_string(),
            what: "no certificate".to_owned(),
        })
}

impl NodeTls {
    /// Loads the files named in `cfg`.
    ///
    /// # Errors
    /// Unreadable or invalid PEM files, or rustls refusing them.
    pub fn load(cfg: &NodeConfig) -> Result<Self, TlsError> {
        let ca = load_certs(&cfg.tls.ca)?;
        let chain = load_certs(&cfg.tls.cert)?;
        let key = load_key(&cfg.tls.key)?;
        let mut peers = Vec::new();
        for p in &cfg.peers {
            let cert = load_certs(&p.cert)?
                .into_iter()
                .next()
                .ok_or_else(|| TlsError::Pem {
                    path: p.cert.display().to_string(),
                    what: "no certificate".to_owned(),
                })?;
            peers.push((p.party_id, cert));
        }
        let peer_certs = PeerCerts(peers);
        let roots = Arc::new(roots(&ca)?);

        let mut orb_clients = Vec::new();
        for p in &cfg.tls.gateways {
            orb_clients.push((OrbRole::Gateway, first_cert(p)?));
        }
        for p in &cfg.tls.results_consumers {
            orb_clients.push((OrbRole::ResultsConsumer, first_cert(p)?));
        }
        let orb_clients = OrbClients(orb_clients);
        let orb_provider = provider(KeyExchange::required(cfg.tls.require_hybrid_kx_orbs));
        let peer_provider = provider(KeyExchange::required(cfg.tls.require_hybrid_kx_peers));
        let orb_verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), orb_provider.clone())
                // No certificate: the handshake completes and every call answers UNAUTHENTICATED.
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Verifier(e.to_string()))?;
        let orb_verifier = Arc::new(PinnedOrbClientVerifier {
            inner: orb_verifier,
            allowed: orb_clients.clone(),
        });
        let mut orb = ServerConfig::builder_with_provider(orb_provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(orb_verifier)
            .with_single_cert(chain.clone(), key.clone_key())?;
        orb.alpn_protocols = vec![b"h2".to_vec()];

        let webpki =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), peer_provider.clone())
                .build()
                .map_err(|e| TlsError::Verifier(e.to_string()))?;
        let pinned = Arc::new(PinnedClientVerifier {
            inner: webpki,
            allowed: peer_certs.clone(),
        });
        let mut peer_server = ServerConfig::builder_with_provider(peer_provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(pinned)
            .with_single_cert(chain.clone(), key.clone_key())?;
        peer_server.alpn_protocols = vec![b"h2".to_vec(), MPC_ALPN.to_vec()];

        let mut peer_clients = HashMap::new();
        for (party, cert) in &peer_certs.0 {
            let inner =
                WebPkiServerVerifier::builder_with_provider(roots.clone(), peer_provider.clone())
                    .build()
                    .map_err(|e| TlsError::Verifier(e.to_string()))?;
            let verifier = Arc::new(PinnedServerVerifier {
                inner,
                expected: cert.clone(),
            });
            let mut c = ClientConfig::builder_with_provider(peer_provider.clone())
                .with_protocol_versions(&[&rustls::version::TLS13])?
                .dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_client_auth_cert(chain.clone(), key.clone_key())?;
            c.alpn_protocols = vec![b"h2".to_vec()];
            peer_clients.insert(*party, Arc::new(c));
        }
        Ok(Self {
            orb_server: Arc::new(orb),
            orb_clients,
            peer_server: Arc::new(peer_server),
            peer_clients,
            peer_certs,
        })
    }
}

/// A client config trusting the deployment CA (what an orb gateway or a results consumer
/// uses), presenting the certificate and key in `identity` (`(cert.pem, key.pem)`), or none:
/// then the node answers every call UNAUTHENTICATED. It prefers X25519MLKEM768 and falls back
/// to X25519 where the orb port allows it.
///
/// # Errors
/// Unreadable CA or identity files.
pub fn orb_client_config(
    ca_pem: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let roots = roots(&load_certs(ca_pem)?)?;
    let builder = ClientConfig::builder_with_provider(provider(KeyExchange::HybridPreferred))
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots);
    let mut c = match identity {
        Some((cert, key)) => builder.with_client_auth_cert(load_certs(cert)?, load_key(key)?)?,
        None => builder.with_no_client_auth(),
    };
    c.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(c))
}

/// Accepts no client certificate (calls are then refused as unauthenticated), or one that
/// chains to the CA and is exactly a configured orb-API client's.
#[derive(Debug)]
struct PinnedOrbClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: OrbClients,
}

impl ClientCertVerifier for PinnedOrbClientVerifier {
    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let ok = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if self.allowed.caller_of(end_entity).is_none() {
            tracing::warn!("refused an orb-API client certificate that is not configured");
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ));
        }
        Ok(ok)
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Accepts only client certificates that chain to the CA and are exactly one
/// of the configured peer certificates.
#[derive(Debug)]
struct PinnedClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: PeerCerts,
}

impl ClientCertVerifier for PinnedClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let ok = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if self.allowed.party_of(end_entity).is_none() {
            tracing::warn!(
                "refused a node-to-node client certificate that is not a configured peer's"
            );
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ));
        }
        Ok(ok)
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Accepts only the configured certificate of the party being dialled.
#[derive(Debug)]
struct PinnedServerVerifier {
    inner: Arc<WebPkiServerVerifier>,
    expected: CertificateDer<'static>,
}

impl ServerCertVerifier for PinnedServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ok = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        if end_entity.as_ref() != self.expected.as_ref() {
            tracing::warn!("refused a peer presenting a certificate other than the configured one");
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ));
        }
        Ok(ok)
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Takes the connections whose handshake chose the MPC link protocol ([`MPC_ALPN`]).
pub type MpcHandler = Arc<dyn Fn(TlsStream<BufferedTcp>) + Send + Sync>;

/// Accepts TCP connections, each holding a slot of `admission` until it authenticates, and runs
/// their TLS handshakes off the accept loop, counting each completed one in `handshakes` by its
/// key exchange group; yields the finished TLS streams until `shutdown` fires, but hands those
/// that chose the MPC link protocol to `mpc`. A connection that does not
/// authenticate in the time its slot allows is closed, in its handshake or after (on the orb
/// port a caller without a client certificate completes the handshake: its calls are refused).
pub fn incoming(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    admission: Arc<Admission>,
    handshakes: HandshakeCounter,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    mpc: Option<MpcHandler>,
) -> tokio_stream::wrappers::ReceiverStream<Result<TlsStream<BufferedTcp>, std::io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let acceptor = TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = shutdown.wait_for(|s| *s) => break,
            };
            let (tcp, addr) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let tcp = BufferedTcp::admitted(tcp, admission.admit(addr.ip()));
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            let mpc = mpc.clone();
            let handshakes = handshakes.clone();
            tokio::spawn(async move {
                let mut s = match acceptor.accept(tcp).await {
                    Ok(s) => s,
                    // Strangers' connections end here by the thousand: not worth a line each.
                    Err(e) => {
                        tracing::debug!(%addr, error = %e, "TLS handshake failed");
                        return;
                    }
                };
                handshakes.count(
                    s.get_ref()
                        .1
                        .negotiated_key_exchange_group()
                        .map(|g| g.name()),
                );
                // The verifiers admit a client certificate only if it is a configured one.
                if s.get_ref().1.peer_certificates().is_some() {
                    s.get_mut().0.authenticated();
                }
                if s.get_ref().1.alpn_protocol() == Some(MPC_ALPN) {
                    if let Some(take) = &mpc {
                        take(s);
                    }
                } else {
                    let _ = tx.send(Ok(s)).await;
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// HTTP/2 stream window for node-to-node traffic.
pub const PEER_STREAM_WINDOW: u32 = 16 << 20;
/// HTTP/2 connection window for node-to-node traffic.
pub const PEER_CONNECTION_WINDOW: u32 = 32 << 20;

/// `server_name` as the name a server's certificate must carry.
///
/// # Errors
/// Not a DNS name or an IP address.
pub fn server_name_of(server_name: &str) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(server_name.to_owned()).map_err(|e| TlsError::Pem {
        path: server_name.to_owned(),
        what: e.to_string(),
    })
}

/// A TCP connection to a peer at `addr` (no Nagle delay, read through [`BufferedTcp`]) and
/// its TLS handshake with `connector`, verifying the server as `name`.
///
/// # Errors
/// Connecting or the handshake failed.
pub async fn connect(
    addr: SocketAddr,
    connector: &TlsConnector,
    name: ServerName<'static>,
) -> std::io::Result<tokio_rustls::client::TlsStream<BufferedTcp>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let mut tls = connector.connect(name, BufferedTcp::new(tcp)).await?;
    // The server presented the pinned certificate: its traffic is worth a buffer.
    tls.get_mut().0.authenticated();
    Ok(tls)
}

/// A lazily connecting tonic channel to `addr` over TLS with `config`,
/// verifying the server as `server_name`.
///
/// # Errors
/// An invalid server name.
pub fn channel(
    addr: SocketAddr,
    server_name: &str,
    config: Arc<ClientConfig>,
    connect_timeout: Duration,
) -> Result<tonic::transport::Channel, TlsError> {
    let name = server_name_of(server_name)?;
    let connector = TlsConnector::from(config);
    let svc = tower::service_fn(move |_uri: http::Uri| {
        let connector = connector.clone();
        let name = name.clone();
        async move { Ok::<_, std::io::Error>(TokioIo::new(connect(addr, &connector, name).await?)) }
    });
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| TlsError::Verifier(e.to_string()))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        // Commits of large batches and recovery streams carry megabytes; HTTP/2's
        // default 64 KiB windows would stall them on flow-control round trips.
        .initial_stream_window_size(Some(PEER_STREAM_WINDOW))
        .initial_connection_window_size(Some(PEER_CONNECTION_WINDOW));
    Ok(endpoint.connect_with_connector_lazy(svc))
}

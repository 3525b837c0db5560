//! Clients: what an orb (or a test, or the load generator) uses to reach a
//! node over TLS, and result verification.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use prost::Message;
use shared_proto::v1::health_client::HealthClient;
use shared_proto::v1::orb_service_client::OrbServiceClient;
use shared_proto::v1::{NodeResult, SignedResult};
use tonic::transport::Channel;

use crate::keys::result_signing_message;
use crate::tls::TlsError;

/// An orb-side connection to one node.
#[derive(Clone, Debug)]
pub struct OrbClient {
    /// The orb API.
    pub orb: OrbServiceClient<Channel>,
    /// The health API.
    pub health: HealthClient<Channel>,
}

impl OrbClient {
    /// A lazily connecting client for the node at `addr`, trusting the CA in
    /// `ca_pem`, verifying the server name `server_name`, with no client
    /// certificate: every call is refused as unauthenticated (what a stranger gets).
    ///
    /// # Errors
    /// Unreadable CA or bad server name.
    pub fn new(addr: SocketAddr, server_name: &str, ca_pem: &Path) -> Result<Self, TlsError> {
        Self::connect(addr, server_name, ca_pem, None)
    }

    /// [`OrbClient::new`] presenting the client identity in directory `identity`
    /// (`tls.pem` and `tls.key.pem`, as `keygen` writes them for a gateway or the
    /// results consumer).
    ///
    /// # Errors
    /// Unreadable CA or identity, or bad server name.
    pub fn with_identity(
        addr: SocketAddr,
        server_name: &str,
        ca_pem: &Path,
        identity: &Path,
    ) -> Result<Self, TlsError> {
        let (cert, key) = (identity.join("tls.pem"), identity.join("tls.key.pem"));
        Self::connect(addr, server_name, ca_pem, Some((&cert, &key)))
    }

    fn connect(
        addr: SocketAddr,
        server_name: &str,
        ca_pem: &Path,
        identity: Option<(&Path, &Path)>,
    ) -> Result<Self, TlsError> {
        let cfg = crate::tls::orb_client_config(ca_pem, identity)?;
        let ch = crate::tls::channel(addr, server_name, cfg, Duration::from_secs(5))?;
        Ok(Self {
            orb: OrbServiceClient::new(ch.clone()).max_encoding_message_size(8 << 20),
            health: HealthClient::new(ch),
        })
    }
}

/// Checks a node's signature on a result and decodes it.
///
/// # Errors
/// A bad signature or undecodable result.
pub fn verify_result(
    signed: &SignedResult,
    key: &ed25519_dalek::VerifyingKey,
) -> Result<NodeResult, &'static str> {
    let party = sdk_orb::PartyId::try_from(signed.party_id).map_err(|_| "bad party id")?;
    let sig =
        ed25519_dalek::Signature::from_slice(&signed.signature).map_err(|_| "bad signature")?;
    key.verify_strict(&result_signing_message(party, &signed.result), &sig)
        .map_err(|_| "bad signature")?;
    NodeResult::decode(signed.result.as_slice()).map_err(|_| "undecodable result")
}

/// Accepts a result only as docs/design.md section 6 says a client must: three results
/// from parties 0, 1 and 2, each validly signed by that party's key
/// (`keys[party]`), with identical result bytes, for the request the client
/// sent (`request_id`): a validly signed result of another request (replayed
/// by a node or a man in the middle of a gateway) is refused.
///
/// # Errors
/// A missing or duplicate party, a bad signature, results that differ, or a
/// result for another request.
pub fn agree(
    results: &[SignedResult],
    keys: &[ed25519_dalek::VerifyingKey; 3],
    request_id: &[u8; 16],
) -> Result<NodeResult, &'static str> {
    if results.len() != 3 {
        return Err("need exactly three results");
    }
    let mut seen = [false; 3];
    let mut out = None;
    for r in results {
        let p = sdk_orb::PartyId::try_from(r.party_id)
            .map_err(|_| "bad party id")?
            .index();
        let key = &keys[p];
        if std::mem::replace(&mut seen[p], true) {
            return Err("two results from one party");
        }
        let decoded = verify_result(r, key)?;
        if r.result != results[0].result {
            return Err("the nodes' results differ");
        }
        if decoded.request_id != request_id {
            return Err("the result is for another request");
        }
        out = Some(decoded);
    }
    out.ok_or("no result")
}

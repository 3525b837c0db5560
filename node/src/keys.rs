//! Key material: `keygen` for a local three-node deployment, and loading of
//! the files it writes.
//!
//! Layout written by [`keygen`] under its output directory:
//!
//! | file | content | mode |
//! | --- | --- | --- |
//! | `ca.pem`, `ca.key.pem` | deployment CA certificate / key | 0644 / 0600 |
//! | `partyN/tls.pem`, `partyN/tls.key.pem` | node TLS certificate / key | 0644 / 0600 |
//! | `partyN/hpke.key`, `partyN/hpke.pub` | X25519 HPKE secret / public key (envelope version 1), hex | 0600 / 0644 |
//! | `partyN/hpke-hybrid.key`, `partyN/hpke-hybrid.pub` | X-Wing HPKE secret (its 32-byte seed) / public key (1,216 bytes) (envelope version 2), hex | 0600 / 0644 |
//! | `partyN/result-signing.key`, `partyN/result-verifying.pub` | Ed25519 result key, hex | 0600 / 0644 |
//! | `orb/orb-signing.key`, `orb/orb-verifying.pub` | an orb device key, hex | 0600 / 0644 |
//! | `orb-allow-list.txt` | allowed orb keys, one hex key per line | 0644 |
//! | `node-public-keys.bin` | the three X25519 public keys, 96 bytes, party order | 0644 |
//! | `node-public-keys-v2.bin` | the three X-Wing public keys, 3,648 bytes, party order | 0644 |
//! | `public-bundle.toml` | the same, plus the result verifying keys, hex | 0644 |
//! | `partyN.toml` | a node config for 127.0.0.1 | 0644 |

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rand_core::OsRng;
use sdk_orb::PartyId;
use zeroize::Zeroizing;

/// Errors while generating or loading keys.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A key file does not hold what it should (the message never contains key bytes).
    #[error("{path}: {what}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: &'static str,
    },
    /// Certificate generation failed.
    #[error("certificate generation: {0}")]
    Cert(#[from] rcgen::Error),
    /// The node config cannot be written.
    #[error("node config: {0}")]
    Config(#[from] crate::config::ConfigError),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> KeyError + '_ {
    move |source| KeyError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Options of [`keygen`].
#[derive(Clone, Debug)]
pub struct KeygenOptions {
    /// Output directory (created).
    pub out_dir: PathBuf,
    /// Subject alternative names of the node certificates.
    pub hosts: Vec<String>,
    /// First orb port; party N listens on `orb_port + N`, peers on
    /// `orb_port + 10 + N`, metrics on `orb_port + 20 + N`.
    pub base_port: u16,
    /// Replace existing files.
    pub force: bool,
}

impl KeygenOptions {
    /// Defaults for a local deployment in `out_dir`.
    pub fn local(out_dir: impl Into<PathBuf>) -> Self {
        Self {
            out_dir: out_dir.into(),
            hosts: vec!["localhost".to_owned(), "127.0.0.1".to_owned()],
            base_port: 50050,
            force: false,
        }
    }
}

/// Paths of what [`keygen`] wrote.
#[derive(Clone, Debug)]
pub struct KeygenOutput {
    /// The output directory.
    pub dir: PathBuf,
}

impl KeygenOutput {
    /// `ca.pem`.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }
    /// `partyN/<name>`.
    pub fn party_file(&self, party: PartyId, name: &str) -> PathBuf {
        self.dir.join(party_dir(party)).join(name)
    }
    /// `partyN.toml`.
    pub fn config(&self, party: PartyId) -> PathBuf {
        self.dir.join(format!("{}.toml", party_dir(party)))
    }
    /// `orb/orb-signing.key`.
    pub fn orb_signing_key(&self) -> PathBuf {
        self.dir.join("orb").join("orb-signing.key")
    }
    /// `node-public-keys.bin`.
    pub fn public_keys(&self) -> PathBuf {
        self.dir.join("node-public-keys.bin")
    }
    /// `node-public-keys-v2.bin`: the X-Wing keys orbs seal version 2 envelopes to.
    pub fn public_keys_v2(&self) -> PathBuf {
        self.dir.join("node-public-keys-v2.bin")
    }
    /// `gatewayN/`: certificate (`tls.pem`) and key (`tls.key.pem`) of orb gateway `n`.
    pub fn gateway(&self, n: u8) -> PathBuf {
        self.dir.join(format!("gateway{n}"))
    }
    /// `results-consumer/`: certificate and key of the results consumer.
    pub fn results_consumer(&self) -> PathBuf {
        self.dir.join(RESULTS_CONSUMER)
    }
}

/// `partyN`: what a party's key directory, config file and data directory are named after.
pub fn party_dir(party: PartyId) -> String {
    format!("party{}", party.get())
}

/// How many orb gateway identities `keygen` issues (`gateway0`, `gateway1`, ...).
pub const GATEWAYS: u8 = 2;

/// The directory of the results consumer's identity.
pub const RESULTS_CONSUMER: &str = "results-consumer";

/// Writes `data` to `path`; private files get mode 0600 from creation on.
fn write_file(path: &Path, data: &[u8], private: bool, force: bool) -> Result<(), KeyError> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    let mut opts = OpenOptions::new();
    opts.write(true);
    if force {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    let mode = if private { 0o600 } else { 0o644 };
    opts.mode(mode);
    let mut f = opts.open(path).map_err(io_err(path))?;
    // `mode` applies only to files the open creates: an existing file overwritten with
    // `--force` keeps its old mode (perhaps world-readable) unless set here, before the
    // secret is written into it.
    if force {
        f.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(io_err(path))?;
    }
    f.write_all(data).map_err(io_err(path))?;
    f.sync_all().map_err(io_err(path))
}

/// Writes a file only its owner may read (mode 0600), replacing any earlier one: a config
/// that carries a secret, such as a database URL with its password.
///
/// # Errors
/// [`KeyError`] if the file cannot be written.
pub(crate) fn write_private(path: &Path, data: &[u8]) -> Result<(), KeyError> {
    write_file(path, data, true, true)
}

fn hex_line(bytes: &[u8]) -> Zeroizing<String> {
    let mut s = Zeroizing::new(hex::encode(bytes));
    s.push('\n');
    s
}

/// Creates a CA, TLS certificates and identity keys for parties 0, 1, 2, an
/// orb key, the public bundle and three configs.
///
/// # Errors
/// A file exists (without `force`), cannot be written, or rcgen fails.
pub fn keygen(opts: &KeygenOptions) -> Result<KeygenOutput, KeyError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let out = KeygenOutput {
        dir: opts.out_dir.clone(),
    };
    let force = opts.force;

    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "ocelli deployment CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    write_file(&out.ca_cert(), ca_cert.pem().as_bytes(), false, force)?;
    let ca_key_pem = Zeroizing::new(ca_key.serialize_pem());
    write_file(
        &opts.out_dir.join("ca.key.pem"),
        ca_key_pem.as_bytes(),
        true,
        force,
    )?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut hpke_pubs = Vec::with_capacity(96);
    let mut hybrid_pubs = Vec::with_capacity(sdk_orb::keys::NodeHybridPublicKeys::BYTES);
    let mut bundle = String::from("# ocelli public key bundle (hex)\n");
    for party in PartyId::ALL {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(opts.hosts.clone())?;
        params
            .distinguished_name
            .push(DnType::CommonName, format!("ocelli party {}", party.get()));
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &issuer)?;
        write_file(
            &out.party_file(party, "tls.pem"),
            cert.pem().as_bytes(),
            false,
            force,
        )?;
        let key_pem = Zeroizing::new(key.serialize_pem());
        write_file(
            &out.party_file(party, "tls.key.pem"),
            key_pem.as_bytes(),
            true,
            force,
        )?;

        let hpke = sdk_orb::keys::NodeSecretKey::generate(&mut OsRng);
        let hpke_pub = hpke.public_key().to_bytes();
        write_file(
            &out.party_file(party, "hpke.key"),
            hex_line(&hpke.to_bytes()[..]).as_bytes(),
            true,
            force,
        )?;
        write_file(
            &out.party_file(party, "hpke.pub"),
            hex_line(&hpke_pub).as_bytes(),
            false,
            force,
        )?;
        hpke_pubs.extend_from_slice(&hpke_pub);
        let hybrid_pub = write_hybrid_key(&out.party_file(party, "hpke-hybrid"), force)?;
        hybrid_pubs.extend_from_slice(&hybrid_pub);

        let sign = ed25519_dalek::SigningKey::generate(&mut OsRng);
        write_file(
            &out.party_file(party, "result-signing.key"),
            hex_line(sign.as_bytes()).as_bytes(),
            true,
            force,
        )?;
        let verify = sign.verifying_key();
        write_file(
            &out.party_file(party, "result-verifying.pub"),
            hex_line(verify.as_bytes()).as_bytes(),
            false,
            force,
        )?;
        bundle.push_str(&format!(
            "[{}]\nhpke_public = \"{}\"\nhybrid_public = \"{}\"\nresult_verifying = \"{}\"\n",
            party_dir(party),
            hex::encode(hpke_pub),
            hex::encode(hybrid_pub),
            hex::encode(verify.as_bytes())
        ));
    }
    // Orb-API client identities: each gateway's certificate is pinned by the nodes and names
    // who submitted a request (only that gateway reads its results); the results consumer may
    // stream every result. Neither is a node certificate (client authentication only).
    let client_names = (0..GATEWAYS)
        .map(|i| format!("gateway{i}"))
        .chain([RESULTS_CONSUMER.to_owned()]);
    for name in client_names {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, format!("ocelli {name}"));
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &issuer)?;
        let dir = opts.out_dir.join(&name);
        write_file(&dir.join("tls.pem"), cert.pem().as_bytes(), false, force)?;
        let key_pem = Zeroizing::new(key.serialize_pem());
        write_file(&dir.join("tls.key.pem"), key_pem.as_bytes(), true, force)?;
    }

    write_file(&out.public_keys(), &hpke_pubs, false, force)?;
    write_file(&out.public_keys_v2(), &hybrid_pubs, false, force)?;
    write_file(
        &opts.out_dir.join("public-bundle.toml"),
        bundle.as_bytes(),
        false,
        force,
    )?;

    let orb = sdk_orb::keys::OrbSigningKey::generate(&mut OsRng);
    write_file(
        &out.orb_signing_key(),
        hex_line(&orb.to_bytes()[..]).as_bytes(),
        true,
        force,
    )?;
    let orb_pub = hex_line(orb.verifying_key().as_bytes());
    write_file(
        &opts.out_dir.join("orb").join("orb-verifying.pub"),
        orb_pub.as_bytes(),
        false,
        force,
    )?;
    write_file(
        &opts.out_dir.join("orb-allow-list.txt"),
        format!(
            "# allowed orb verifying keys, hex, one per line\n{}",
            &*orb_pub
        )
        .as_bytes(),
        false,
        force,
    )?;

    for party in PartyId::ALL {
        write_file(
            &out.config(party),
            sample_config(party, opts.base_port)?.as_bytes(),
            false,
            force,
        )?;
    }
    Ok(out)
}

/// Draws a node's X-Wing key and writes `<stem>.key` (the seed, hex, 0600) and `<stem>.pub`
/// (hex); returns the public key. `force` overwrites existing files.
///
/// # Errors
/// A file exists (without `force`) or cannot be written.
pub fn write_hybrid_key(
    stem: &Path,
    force: bool,
) -> Result<[u8; sdk_orb::keys::HYBRID_PUBLIC_KEY_BYTES], KeyError> {
    let key = sdk_orb::keys::NodeHybridSecretKey::generate(&mut OsRng);
    let public = key.public_key().to_bytes();
    write_file(
        &stem.with_extension("key"),
        hex_line(&key.to_seed()[..]).as_bytes(),
        true,
        force,
    )?;
    write_file(
        &stem.with_extension("pub"),
        hex_line(&public).as_bytes(),
        false,
        force,
    )?;
    Ok(public)
}

/// A node config for party `party` on 127.0.0.1, paths relative to the key directory.
pub fn sample_node_config(party: PartyId, base: u16) -> crate::config::NodeConfig {
    use crate::config::{KeysConfig, ListenConfig, NodeConfig, PeerConfig, TlsConfig};
    let port = |off: u16, p: PartyId| base.saturating_add(off).saturating_add(u16::from(p.get()));
    let local = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let dir = |p: PartyId, file: &str| Path::new(&party_dir(p)).join(file);
    NodeConfig {
        party_id: party,
        data_dir: Path::new("data").join(party_dir(party)),
        listen: ListenConfig {
            orb: local(port(0, party)),
            peer: local(port(10, party)),
            metrics: local(port(20, party)),
        },
        tls: TlsConfig {
            ca: "ca.pem".into(),
            cert: dir(party, "tls.pem"),
            key: dir(party, "tls.key.pem"),
            gateways: vec!["gateway0/tls.pem".into(), "gateway1/tls.pem".into()],
            results_consumers: vec!["results-consumer/tls.pem".into()],
            require_hybrid_kx_peers: true,
            require_hybrid_kx_orbs: false,
        },
        keys: KeysConfig {
            hpke_secret: dir(party, "hpke.key"),
            hpke_previous_secret: None,
            hpke_hybrid_secret: Some(dir(party, "hpke-hybrid.key")),
            result_signing: dir(party, "result-signing.key"),
            orb_allow_list: "orb-allow-list.txt".into(),
        },
        peers: crate::ids::others(party)
            .into_iter()
            .map(|peer| PeerConfig {
                party_id: peer,
                address: local(port(10, peer)),
                cert: dir(peer, "tls.pem"),
                server_name: None,
                result_key: Some(dir(peer, "result-verifying.pub")),
                previous_result_keys: Vec::new(),
            })
            .collect(),
        intake: Default::default(),
        envelope: Default::default(),
        batch: Default::default(),
        matching: Default::default(),
        store: Default::default(),
        connections: Default::default(),
        health: Default::default(),
        stats: Default::default(),
    }
}

/// [`sample_node_config`] as the TOML file `keygen` writes: every key, defaults included.
///
/// # Errors
/// None in practice: its paths are UTF-8.
pub fn sample_config(party: PartyId, base: u16) -> Result<String, crate::config::ConfigError> {
    Ok(format!(
        "# A node config written by `ocelli-node keygen`; every key and the OCELLI_* variables\n\
         # that override them: docs/operations.md.\n\n{}",
        sample_node_config(party, base).to_toml()?
    ))
}

/// Reads a hex file holding exactly 32 bytes (a secret: zeroized after use).
///
/// # Errors
/// Unreadable file or not 32 hex-encoded bytes.
pub fn read_key32(path: &Path) -> Result<Zeroizing<[u8; 32]>, KeyError> {
    let text = Zeroizing::new(fs::read_to_string(path).map_err(io_err(path))?);
    let mut out = Zeroizing::new([0u8; 32]);
    hex::decode_to_slice(text.trim(), &mut out[..]).map_err(|_| KeyError::Format {
        path: path.to_owned(),
        what: "expected 32 bytes as 64 hex digits",
    })?;
    Ok(out)
}

/// Reads an orb allow-list: one hex Ed25519 verifying key per line; `#`
/// starts a comment.
///
/// # Errors
/// Unreadable file, or a line that is not a valid key.
pub fn read_allow_list(path: &Path) -> Result<Vec<ed25519_dalek::VerifyingKey>, KeyError> {
    let text = fs::read_to_string(path).map_err(io_err(path))?;
    let mut keys = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut b = [0u8; 32];
        let bad = || KeyError::Format {
            path: path.to_owned(),
            what: "allow-list line is not a 32-byte hex Ed25519 key",
        };
        hex::decode_to_slice(line, &mut b).map_err(|_| bad())?;
        keys.push(ed25519_dalek::VerifyingKey::from_bytes(&b).map_err(|_| bad())?);
    }
    Ok(keys)
}

/// The Ed25519 key a node signs its results with.
pub struct ResultSigner {
    key: ed25519_dalek::SigningKey,
    party: sdk_orb::PartyId,
}

impl std::fmt::Debug for ResultSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultSigner")
            .field("party", &self.party)
            .finish_non_exhaustive()
    }
}

/// Domain separation prefix of result signatures.
pub const RESULT_SIGNING_CONTEXT: &[u8] = b"ocelli/v1/result";

/// The bytes a result signature covers.
pub fn result_signing_message(party: sdk_orb::PartyId, result: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(RESULT_SIGNING_CONTEXT.len() + 1 + result.len());
    m.extend_from_slice(RESULT_SIGNING_CONTEXT);
    m.push(party.get());
    m.extend_from_slice(result);
    m
}

/// Domain separation prefix of batch attestations.
pub const BATCH_SIGNING_CONTEXT: &[u8] = b"ocelli/v1/batch";

/// The bytes a batch attestation covers.
pub fn batch_signing_message(party: sdk_orb::PartyId, digest: &[u8; 32]) -> Vec<u8> {
    let mut m = Vec::with_capacity(BATCH_SIGNING_CONTEXT.len() + 33);
    m.extend_from_slice(BATCH_SIGNING_CONTEXT);
    m.push(party.get());
    m.extend_from_slice(digest);
    m
}

impl ResultSigner {
    /// Wraps a 32-byte Ed25519 seed.
    pub fn from_seed(seed: &[u8; 32], party: sdk_orb::PartyId) -> Self {
        Self {
            key: ed25519_dalek::SigningKey::from_bytes(seed),
            party,
        }
    }

    /// Signs encoded `NodeResult` bytes.
    pub fn sign(&self, result: &[u8]) -> [u8; 64] {
        use ed25519_dalek::Signer;
        self.key
            .sign(&result_signing_message(self.party, result))
            .to_bytes()
    }

    /// Signs a batch digest (a different domain from results: neither signature can stand
    /// for the other).
    pub fn sign_batch(&self, digest: &[u8; 32]) -> [u8; 64] {
        use ed25519_dalek::Signer;
        self.key
            .sign(&batch_signing_message(self.party, digest))
            .to_bytes()
    }

    /// This signer's party.
    pub fn party(&self) -> sdk_orb::PartyId {
        self.party
    }

    /// The verifying key.
    pub fn verifying_key(&self) -> ed25519_dalek::VerifyingKey {
        self.key.verifying_key()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn keygen_writes_private_files_0600() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let out = keygen(&KeygenOptions::local(dir.path()))?;
        for p in [
            dir.path().join("ca.key.pem"),
            out.party_file(PartyId::ALL[1], "tls.key.pem"),
            out.party_file(PartyId::ALL[2], "hpke.key"),
            out.party_file(PartyId::ALL[1], "hpke-hybrid.key"),
            out.party_file(PartyId::ALL[0], "result-signing.key"),
            out.orb_signing_key(),
        ] {
            let mode = fs::metadata(&p)?.permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", p.display());
        }
        assert_eq!(fs::read(out.public_keys())?.len(), 96);
        let hybrid: [u8; sdk_orb::keys::NodeHybridPublicKeys::BYTES] =
            fs::read(out.public_keys_v2())?
                .try_into()
                .map_err(|_| "node-public-keys-v2.bin length")?;
        let bundle = sdk_orb::keys::NodeHybridPublicKeys::from_bytes(&hybrid)?;
        let seed = read_key32(&out.party_file(PartyId::ALL[1], "hpke-hybrid.key"))?;
        assert_eq!(
            sdk_orb::keys::NodeHybridSecretKey::from_seed(&seed).public_key(),
            bundle.0[1]
        );
        assert_eq!(
            read_allow_list(&dir.path().join("orb-allow-list.txt"))?.len(),
            1
        );
        let _ = read_key32(&out.party_file(PartyId::ALL[0], "hpke.key"))?;
        let cfg = crate::config::NodeConfig::load(&out.config(PartyId::ALL[2]))?;
        assert_eq!(cfg.party_id, PartyId::ALL[2]);
        // A second run without --force refuses to overwrite.
        assert!(keygen(&KeygenOptions::local(dir.path())).is_err());
        Ok(())
    }
}

//! The PostgreSQL implementation of [`Store`], for production.
//!
//! The trait is synchronous, as the redb store is, and the service calls it
//! from blocking threads (`spawn_blocking`). Queries run on the service's own
//! tokio runtime, through the [`Handle`] the store is given, and each method
//! waits with [`Handle::block_on`]: one runtime, one sync/async seam. A
//! synchronous client (`postgres`, `r2d2_postgres`) was not chosen: it runs a
//! private runtime per connection. Connections come from a `deadpool-postgres`
//! pool, so readers proceed while a batch commits.
//!
//! Tables mirror the redb store, byte for byte, so [`Store::fingerprint`]
//! is equal across backends for equal contents. Every connection runs with
//! `synchronous_commit = on`: a returned write is committed and flushed.
//!
//! Connections are plaintext or TLS 1.3 with the server's certificate
//! verified against a configured CA and the URL's host name (libpq's
//! `verify-full`); there is no unverified TLS mode.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod};
use futures::{pin_mut, StreamExt};
use prost::Message;
use sha2::{Digest, Sha256};
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::types::ToSql;
use tokio_postgres::NoTls;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::period::{decode_opened, encode_opened, StatsPeriod};
use super::{
    Attestation, BatchWrite, Meta, RequestRecord, RequestSummary, ShareVisitor, ShareWrite, Store,
    StoreError, StoreSummary, StoredBatch,
};
use crate::ids::{RequestId, SerialId};
use crate::shares::StoredShares;
use crate::stats::OpenedHistograms;

/// Schema migrations, in order; version `i + 1` is `MIGRATIONS[i]`.
const MIGRATIONS: &[&str] = &[
    // 1: the tables of the redb store. Shares are random bytes: storing them
    // uncompressed saves the compression attempt.
    "CREATE TABLE requests (id bytea PRIMARY KEY, record bytea NOT NULL);
     CREATE TABLE pending_envelopes (id bytea PRIMARY KEY, envelope bytea NOT NULL);
     CREATE TABLE results (id bytea PRIMARY KEY, signed_result bytea NOT NULL);
     CREATE TABLE shares (serial bigint PRIMARY KEY, entry bytea NOT NULL);
     ALTER TABLE shares ALTER COLUMN entry SET STORAGE EXTERNAL;
     CREATE TABLE batches (batch_id bigint PRIMARY KEY, results_digest bytea NOT NULL,
                           commit bytea NOT NULL);
     CREATE TABLE meta (key text PRIMARY KEY, value bigint NOT NULL);",
    // 2: this node's latest batch attestation (one row; see `Store::attestation`).
    "CREATE TABLE attestation (id smallint PRIMARY KEY CHECK (id = 1), record bytea NOT NULL);",
    // 3: failed attempts per request (see `Store::failed_attempts`).
    "CREATE TABLE failed_attempts (id bytea PRIMARY KEY, count integer NOT NULL);",
    // 4: distance statistics: this party's running period and the opened histograms (JSON).
    "CREATE TABLE stats_period (id smallint PRIMARY KEY CHECK (id = 1), record bytea NOT NULL);
     CREATE TABLE opened_histograms (period bigint PRIMARY KEY, histograms bytea NOT NULL);",
    // 5: what a share snapshot needs to be checked against: the batch that last wrote each
    // entry (0 before this version) and a random identity of this store.
    "ALTER TABLE shares ADD COLUMN written_batch bigint NOT NULL DEFAULT 0;
     CREATE INDEX shares_written_batch ON shares (written_batch);
     CREATE TABLE store_identity (id smallint PRIMARY KEY CHECK (id = 1), token bytea NOT NULL);
     INSERT INTO store_identity VALUES (1, uuid_send(gen_random_uuid()));",
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

const LAST_APPLIED: &str = "last_applied_batch";
const NEXT_SERIAL: &str = "next_serial";

/// Rows per multi-row insert when copying shares.
pub const INSERT_CHUNK: usize = 1000;

/// Serial ids per query when fetching listed entries.
const FETCH_CHUNK: usize = 10_000;

fn be<E: std::fmt::Display>(e: E) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn to_i64(v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Backend("value exceeds bigint".to_owned()))
}

fn to_u64(v: i64, table: &'static str) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(table))
}

fn attempts(v: i32) -> Result<u32, StoreError> {
    u32::try_from(v).map_err(|_| StoreError::Corrupt("failed_attempts"))
}

/// Where a PostgreSQL store lives.
#[derive(Clone)]
pub struct PgOptions {
    /// `postgres://` URL or key=value connection string (may hold a password).
    pub url: String,
    /// Schema holding the tables (created if absent).
    pub schema: String,
    /// Connections in the pool.
    pub pool_size: usize,
    /// Plaintext or verified TLS.
    pub tls: PgTls,
}

impl std::fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password.
        f.debug_struct("PgOptions")
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

/// How the store's connections travel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PgTls {
    /// Plaintext (the configuration allows it for a loopback host or a
    /// unix socket, or where `tls = "disable"` is written).
    #[default]
    Disable,
    /// TLS 1.3; the server's certificate must chain to `ca` (PEM) and name
    /// the URL's host.
    Require {
        /// The CA certificate file.
        ca: PathBuf,
    },
}

/// TLS to the store that cannot be set up. Paths and hosts are named;
/// URLs never are (they may hold a password).
#[derive(Debug, thiserror::Error)]
pub enum PgTlsError {
    /// The CA file cannot be read.
    #[error("store CA file {path}: cannot read: {source}")]
    CaRead {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The CA file is not PEM.
    #[error("store CA file {path}: not PEM: {reason}")]
    CaPem {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The CA file holds no certificate.
    #[error("store CA file {path}: no certificate in it")]
    CaEmpty {
        /// The file.
        path: PathBuf,
    },
    /// A certificate of the CA file is not a usable trust anchor.
    #[error("store CA file {path}: unusable certificate: {reason}")]
    CaCertificate {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The URL does not parse.
    #[error("store.url does not parse: {0}")]
    Url(String),
    /// A TCP host that is not loopback, without TLS and without an explicit `tls = "disable"`.
    #[error(
        "store.url names host {host} without TLS: set store.tls = \"require\" and store.tls_ca, \
         or store.tls = \"disable\" to send the password and data in plaintext"
    )]
    PlaintextRemote {
        /// The host.
        host: String,
    },
    /// TLS asked for a unix socket (PostgreSQL serves none there; the socket is local).
    #[error("store.tls = \"require\" needs TCP hosts; store.url names a unix socket")]
    TlsOverUnixSocket,
    /// The URL's own `sslmode` disagrees with `store.tls`.
    #[error("store.url sets sslmode={url}, which contradicts store.tls = \"{tls}\"; set TLS with store.tls only")]
    SslModeConflict {
        /// The URL's mode.
        url: &'static str,
        /// The configured mode.
        tls: &'static str,
    },
    /// rustls refused the client configuration.
    #[error("store TLS: {0}")]
    Rustls(#[from] rustls::Error),
    /// The handshake failed: the server's certificate is not from the CA or
    /// does not name the host, or the server speaks no TLS 1.3.
    #[error("TLS handshake with the store's server failed: {0}")]
    Handshake(rustls::Error),
}

/// The trust anchors of a PEM CA file.
///
/// # Errors
/// Unreadable file, bad PEM, no certificate, an unusable certificate.
pub fn load_ca(path: &Path) -> Result<rustls::RootCertStore, PgTlsError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let pem = std::fs::read(path).map_err(|source| PgTlsError::CaRead {
        path: path.to_owned(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PgTlsError::CaPem {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(PgTlsError::CaEmpty {
            path: path.to_owned(),
        });
    }
    let mut roots = rustls::RootCertStore::empty();
    for c in certs {
        roots.add(c).map_err(|e| PgTlsError::CaCertificate {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    }
    Ok(roots)
}

fn parse_url(url: &str) -> Result<tokio_postgres::Config, PgTlsError> {
    // tokio-postgres's parse errors name the option, never its value.
    url.parse().map_err(|e: tokio_postgres::Error| {
        let cause = std::error::Error::source(&e).map(ToString::to_string);
        PgTlsError::Url(cause.unwrap_or_else(|| e.to_string()))
    })
}

/// Checks `url` against `tls`: TLS only to TCP hosts, and no `sslmode` in
/// the URL that says otherwise (`prefer`, the default, is overridden).
///
/// # Errors
/// [`PgTlsError::Url`], [`PgTlsError::TlsOverUnixSocket`], [`PgTlsError::SslModeConflict`].
pub fn check_url(url: &str, tls: &PgTls) -> Result<(), PgTlsError> {
    let cfg = parse_url(url)?;
    let (want, name) = match tls {
        PgTls::Disable => (SslMode::Disable, "disable"),
        PgTls::Require { .. } => (SslMode::Require, "require"),
    };
    let found = cfg.get_ssl_mode();
    if found != SslMode::Prefer && found != want {
        return Err(PgTlsError::SslModeConflict {
            url: match found {
                SslMode::Disable => "disable",
                _ => "require",
            },
            tls: name,
        });
    }
    if want == SslMode::Require && cfg.get_hosts().iter().any(|h| matches!(h, Host::Unix(_))) {
        return Err(PgTlsError::TlsOverUnixSocket);
    }
    Ok(())
}

/// Refuses plaintext to anything but loopback addresses, `localhost` and
/// unix sockets: the password and the shares would cross a network.
///
/// # Errors
/// [`PgTlsError::Url`], [`PgTlsError::PlaintextRemote`] naming the first such host.
pub fn check_plaintext_is_local(url: &str) -> Result<(), PgTlsError> {
    let cfg = parse_url(url)?;
    let remote = |h: &str| {
        h.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .map_or(!h.eq_ignore_ascii_case("localhost"), |ip| !ip.is_loopback())
    };
    for h in cfg.get_hosts() {
        if let Host::Tcp(h) = h {
            if remote(h) {
                return Err(PgTlsError::PlaintextRemote { host: h.clone() });
            }
        }
    }
    // `hostaddr` is where the connection goes when it is set.
    for a in cfg.get_hostaddrs() {
        if !a.is_loopback() {
            return Err(PgTlsError::PlaintextRemote {
                host: a.to_string(),
            });
        }
    }
    Ok(())
}

/// The TLS connector for `tls`: TLS 1.3 only, the node's provider (crate::tls_provider), offering
/// X25519MLKEM768 first and X25519 to a server without it.
fn tls_connector(ca: &Path) -> Result<MakeRustlsConnect, PgTlsError> {
    let config = rustls::ClientConfig::builder_with_provider(crate::tls_provider::provider(
        crate::tls_provider::KeyExchange::HybridPreferred,
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])?
    .with_root_certificates(load_ca(ca)?)
    .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// Whether `s` is a plain lower-case identifier (schema names are spliced into SQL).
pub fn valid_schema_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// A pool of connections to `url` whose sessions search `schema`. Connections open on first
/// use; one the server closed (a restart or failover) is replaced on the next checkout, so
/// the node recovers without a restart of its own.
fn pool(opts: &PgOptions, search_path: &str) -> Result<Pool, StoreError> {
    if !valid_schema_name(&opts.schema) {
        return Err(StoreError::Backend(
            "schema name must match [a-z_][a-z0-9_]*".to_owned(),
        ));
    }
    check_url(&opts.url, &opts.tls)?;
    let mut cfg = parse_url(&opts.url)?;
    // Set at startup, so every connection the pool opens has them: commits are flushed
    // before they return, and unqualified names are the schema's (a valid name needs no
    // quoting).
    let session = format!("-c synchronous_commit=on -c search_path={search_path}");
    let options = match cfg.get_options() {
        Some(own) => format!("{own} {session}"),
        None => session,
    };
    cfg.options(&options)
        .application_name(format!("ocelli/{}", opts.schema));
    let manager = ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    // The configured mode wins over the URL's default `prefer`, which would fall back to
    // plaintext when the server offers no TLS.
    let manager = match &opts.tls {
        PgTls::Disable => {
            cfg.ssl_mode(SslMode::Disable);
            Manager::from_config(cfg, NoTls, manager)
        }
        PgTls::Require { ca } => {
            cfg.ssl_mode(SslMode::Require);
            Manager::from_config(cfg, tls_connector(ca)?, manager)
        }
    };
    Pool::builder(manager)
        .max_size(opts.pool_size.max(1))
        .build()
        .map_err(be)
}

/// Waits for `fut` on `rt`. The service calls from blocking threads, where this is
/// `Handle::block_on`; a call from an async task of a multi-thread runtime (a test body, a
/// missed `spawn_blocking`) first hands that worker's other tasks off, so it blocks one task
/// rather than panicking.
fn wait_on<T>(rt: &Handle, fut: impl Future<Output = T>) -> T {
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| rt.block_on(fut))
        }
        _ => rt.block_on(fut),
    }
}

/// A node's store in a PostgreSQL schema.
pub struct PgStore {
    pool: Pool,
    schema: String,
    rt: Handle,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.schema)
            .field("connections", &self.pool.status().max_size)
            .finish_non_exhaustive()
    }
}

/// A failed connection attempt with its causes: tokio-postgres's own message
/// says only "error performing TLS handshake" or "db error". The causes name
/// neither the URL nor the password.
fn connect_err(e: PoolError) -> StoreError {
    use std::error::Error as _;
    let PoolError::Backend(e) = e else {
        return be(e);
    };
    // tokio-rustls wraps rustls's error in an io::Error.
    let rustls = e
        .source()
        .and_then(|c| c.downcast_ref::<std::io::Error>())
        .and_then(|io| io.get_ref())
        .and_then(|c| c.downcast_ref::<rustls::Error>());
    if let Some(r) = rustls {
        return PgTlsError::Handshake(r.clone()).into();
    }
    let mut m = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        m.push_str(": ");
        m.push_str(&c.to_string());
        cause = c.source();
    }
    StoreError::Backend(m)
}

async fn migrate(client: &mut Object, schema: &str) -> Result<(), StoreError> {
    let txn = client.transaction().await.map_err(be)?;
    // One migrator at a time per database.
    txn.execute("SELECT pg_advisory_xact_lock(7261001)", &[])
        .await
        .map_err(be)?;
    txn.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
         SET LOCAL search_path TO \"{schema}\";
         CREATE TABLE IF NOT EXISTS schema_migrations (
             version bigint PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());"
    ))
    .await
    .map_err(be)?;
    let found: i64 = txn
        .query_one(
            "SELECT COALESCE(max(version), 0) FROM schema_migrations",
            &[],
        )
        .await
        .map_err(be)?
        .get(0);
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found,
            known: SCHEMA_VERSION,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = i as i64 + 1;
        txn.batch_execute(sql).await.map_err(be)?;
        txn.execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(be)?;
        tracing::info!(schema, version, "store schema migrated");
    }
    txn.commit().await.map_err(be)
}

impl PgStore {
    /// Connects, creates or migrates the schema and opens the pool, whose connections run
    /// on `rt`. Call it, and every method, from a thread that may block (not a task of an
    /// async runtime: `spawn_blocking`, or a thread outside the runtime); a current-thread
    /// `rt` must be driven by another thread meanwhile.
    ///
    /// # Errors
    /// Unreachable server, TLS that cannot be set up or whose handshake fails
    /// (the server's certificate not from the CA or not naming the host), bad
    /// schema name, a schema newer than this binary.
    pub fn open(opts: &PgOptions, rt: Handle) -> Result<Self, StoreError> {
        let store = Self {
            pool: pool(opts, &opts.schema)?,
            schema: opts.schema.clone(),
            rt,
        };
        store.run(async {
            let mut c = store.conn().await?;
            migrate(&mut c, &store.schema).await?;
            // The whole pool now, held together so each is a connection of its own: a
            // server that refuses some fails the start, not a later batch.
            let more = (1..opts.pool_size).map(|_| store.conn());
            futures::future::try_join_all(more).await.map(drop)
        })?;
        Ok(store)
    }

    /// Waits for `fut` on the service's runtime (the one sync/async seam).
    fn run<T>(&self, fut: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        wait_on(&self.rt, fut)
    }

    /// A pooled connection.
    async fn conn(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(connect_err)
    }

    /// Writes shares batch-wise (multi-row upserts of [`INSERT_CHUNK`] rows,
    /// one transaction): copying into a new store. They are marked as written before any
    /// batch: no snapshot of a new store's identity can be older than they are.
    ///
    /// # Errors
    /// Backend failure (nothing is written then).
    pub fn put_shares(&self, rows: Vec<(SerialId, StoredShares)>) -> Result<(), StoreError> {
        self.run(async {
            let mut c = self.conn().await?;
            let txn = c.transaction().await.map_err(be)?;
            for chunk in rows.chunks(INSERT_CHUNK) {
                let serials = chunk
                    .iter()
                    .map(|(s, _)| to_i64(s.0))
                    .collect::<Result<Vec<_>, _>>()?;
                let entries: Vec<&[u8]> = chunk.iter().map(|(_, e)| e.as_bytes()).collect();
                upsert_shares(&txn, &serials, &entries, 0).await?;
            }
            txn.commit().await.map_err(be)
        })
    }

    /// Copies raw rows of every table but the shares (store migration): the
    /// request log, envelopes, results, batches and counters.
    ///
    /// # Errors
    /// Backend failure (nothing is written then).
    pub fn put_raw(&self, rows: RawRows) -> Result<(), StoreError> {
        self.run(async {
            let mut c = self.conn().await?;
            let txn = c.transaction().await.map_err(be)?;
            for (table, col, key) in [
                ("requests", "record", &rows.requests),
                ("pending_envelopes", "envelope", &rows.envelopes),
                ("results", "signed_result", &rows.results),
            ] {
                for chunk in key.chunks(INSERT_CHUNK) {
                    let ids: Vec<&[u8]> = chunk.iter().map(|(k, _)| k.as_slice()).collect();
                    let vals: Vec<&[u8]> = chunk.iter().map(|(_, v)| v.as_slice()).collect();
                    txn.execute(
                        &format!(
                            "INSERT INTO {table} (id, {col}) SELECT * FROM unnest($1::bytea[], $2::bytea[])
                             ON CONFLICT (id) DO UPDATE SET {col} = excluded.{col}"
                        ),
                        &[&ids, &vals],
                    )
                    .await
                    .map_err(be)?;
                }
            }
            for (id, b) in &rows.batches {
                txn.execute(
                    "INSERT INTO batches (batch_id, results_digest, commit) VALUES ($1, $2, $3)
                     ON CONFLICT (batch_id) DO UPDATE SET results_digest = excluded.results_digest,
                     commit = excluded.commit",
                    &[&to_i64(*id)?, &&b.results_digest[..], &b.commit],
                )
                .await
                .map_err(be)?;
            }
            for (k, v) in &rows.meta {
                set_meta(&txn, k, *v).await?;
            }
            if let Some(a) = &rows.attestation {
                set_attestation(&*txn, a).await?;
            }
            if let Some(p) = &rows.stats_period {
                set_stats_period(&txn, p).await?;
            }
            for h in &rows.opened {
                put_opened(&txn, h).await?;
            }
            txn.commit().await.map_err(be)
        })
    }
}

/// Every row but the shares, for copying a store (keys as stored).
#[derive(Debug, Default)]
pub struct RawRows {
    /// Request id, encoded [`RequestRecord`].
    pub requests: Vec<(Vec<u8>, Vec<u8>)>,
    /// Request id, envelope.
    pub envelopes: Vec<(Vec<u8>, Vec<u8>)>,
    /// Request id, encoded `SignedResult`.
    pub results: Vec<(Vec<u8>, Vec<u8>)>,
    /// Batch log.
    pub batches: Vec<(u64, StoredBatch)>,
    /// Counters present.
    pub meta: Vec<(String, u64)>,
    /// The node's latest batch attestation.
    pub attestation: Option<Attestation>,
    /// This party's running statistics period.
    pub stats_period: Option<StatsPeriod>,
    /// The histograms opened so far.
    pub opened: Vec<OpenedHistograms>,
}

/// Runs `sql`, which selects serial ids of `shares`, and returns them.
async fn query_serials(
    c: &Object,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<u64>, StoreError> {
    let rows = c.query(sql, params).await.map_err(be)?;
    rows.iter().map(|r| to_u64(r.get(0), "shares")).collect()
}

/// Runs `sql` (selecting serial and entry) and hands each row to `f` as it streams from the
/// server, so memory stays bounded.
async fn stream_shares(
    c: &Object,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    f: &mut ShareVisitor<'_>,
) -> Result<(), StoreError> {
    let stream = c.query_raw(sql, params.iter().copied()).await.map_err(be)?;
    pin_mut!(stream);
    while let Some(row) = stream.next().await {
        let row = row.map_err(be)?;
        let serial = to_u64(row.get(0), "shares")?;
        f(SerialId(serial), row.get::<_, &[u8]>(1))?;
    }
    Ok(())
}

/// Writes entries, marking them as written by batch `written` (see [`Store::shares_written_after`]).
async fn upsert_shares(
    txn: &tokio_postgres::Transaction<'_>,
    serials: &[i64],
    entries: &[&[u8]],
    written: i64,
) -> Result<(), StoreError> {
    txn.execute(
        "INSERT INTO shares (serial, entry, written_batch)
         SELECT s, e, $3 FROM unnest($1::bigint[], $2::bytea[]) AS t(s, e)
         ON CONFLICT (serial) DO UPDATE SET entry = excluded.entry,
         written_batch = excluded.written_batch",
        &[&serials, &entries, &written],
    )
    .await
    .map_err(be)?;
    Ok(())
}

async fn set_attestation<C: tokio_postgres::GenericClient>(
    c: &C,
    a: &Attestation,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO attestation (id, record) VALUES (1, $1)
         ON CONFLICT (id) DO UPDATE SET record = excluded.record",
        &[&&a.encode()[..]],
    )
    .await
    .map_err(be)?;
    Ok(())
}

async fn set_stats_period(
    txn: &tokio_postgres::Transaction<'_>,
    p: &StatsPeriod,
) -> Result<(), StoreError> {
    txn.execute(
        "INSERT INTO stats_period (id, record) VALUES (1, $1)
         ON CONFLICT (id) DO UPDATE SET record = excluded.record",
        &[&p.encode()],
    )
    .await
    .map_err(be)?;
    Ok(())
}

async fn put_opened(
    txn: &tokio_postgres::Transaction<'_>,
    h: &OpenedHistograms,
) -> Result<(), StoreError> {
    txn.execute(
        "INSERT INTO opened_histograms (period, histograms) VALUES ($1, $2)
         ON CONFLICT (period) DO UPDATE SET histograms = excluded.histograms",
        &[&to_i64(h.period)?, &encode_opened(h)?],
    )
    .await
    .map_err(be)?;
    Ok(())
}

async fn set_meta(
    txn: &tokio_postgres::Transaction<'_>,
    key: &str,
    value: u64,
) -> Result<(), StoreError> {
    txn.execute(
        "INSERT INTO meta (key, value) VALUES ($1, $2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        &[&key, &to_i64(value)?],
    )
    .await
    .map_err(be)?;
    Ok(())
}

fn decode_record(b: &[u8]) -> Result<RequestRecord, StoreError> {
    RequestRecord::decode(b).map_err(|_| StoreError::Corrupt("requests"))
}

impl Store for PgStore {
    fn insert_request(
        &self,
        id: &RequestId,
        record: &RequestRecord,
        envelope: &[u8],
    ) -> Result<bool, StoreError> {
        let id = id.0.to_vec();
        let record = record.encode_to_vec();
        let envelope = envelope.to_vec();
        self.run(async {
            let mut c = self.conn().await?;
            let txn = c.transaction().await.map_err(be)?;
            let n = txn
                .execute(
                    "INSERT INTO requests (id, record) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
                    &[&id, &record],
                )
                .await
                .map_err(be)?;
            if n == 0 {
                return Ok(false);
            }
            txn.execute(
                "INSERT INTO pending_envelopes (id, envelope) VALUES ($1, $2)
                 ON CONFLICT (id) DO UPDATE SET envelope = excluded.envelope",
                &[&id, &envelope],
            )
            .await
            .map_err(be)?;
            txn.commit().await.map_err(be)?;
            Ok(true)
        })
    }

    fn request(&self, id: &RequestId) -> Result<Option<RequestRecord>, StoreError> {
        let id = id.0.to_vec();
        self.run(async {
            let c = self.conn().await?;
            let row = c
                .query_opt("SELECT record FROM requests WHERE id = $1", &[&id])
                .await
                .map_err(be)?;
            row.map(|r| decode_record(r.get(0))).transpose()
        })
    }

    fn pending_requests(&self) -> Result<Vec<(RequestId, RequestRecord)>, StoreError> {
        self.run(async {
            let c = self.conn().await?;
            let rows = c
                .query(
                    "SELECT e.id, r.record FROM pending_envelopes e LEFT JOIN requests r
                     ON r.id = e.id ORDER BY e.id",
                    &[],
                )
                .await
                .map_err(be)?;
            let mut out = Vec::new();
            for row in rows {
                let id =
                    RequestId::from_slice(row.get(0)).ok_or(StoreError::Corrupt("envelopes"))?;
                let rec: Option<&[u8]> = row.get(1);
                let rec = decode_record(rec.ok_or(StoreError::Corrupt("requests"))?)?;
                if rec.state() == Some(super::RequestState::Pending) {
                    out.push((id, rec));
                }
            }
            Ok(out)
        })
    }

    fn envelope(&self, id: &RequestId) -> Result<Option<Vec<u8>>, StoreError> {
        let id = id.0.to_vec();
        self.run(async {
            let c = self.conn().await?;
            let row = c
                .query_opt(
                    "SELECT envelope FROM pending_envelopes WHERE id = $1",
                    &[&id],
                )
                .await
                .map_err(be)?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn apply_batch(&self, w: &BatchWrite) -> Result<(), StoreError> {
        // Later writes to the same key win, as when applied one by one: so
        // each key is written once and the writes can go as multi-row statements.
        let mut finals: BTreeMap<Vec<u8>, (Vec<u8>, Vec<u8>)> = BTreeMap::new();
        for f in &w.finals {
            finals.insert(
                f.id.0.to_vec(),
                (f.record.encode_to_vec(), f.signed_result.clone()),
            );
        }
        let mut shares: BTreeMap<i64, Option<Vec<u8>>> = BTreeMap::new();
        for (serial, s) in &w.shares {
            let v = match s {
                ShareWrite::Put(sh) => Some(sh.as_bytes().to_vec()),
                ShareWrite::Delete => None,
            };
            shares.insert(to_i64(serial.0)?, v);
        }
        let batch = match &w.batch {
            Some((id, commit, digest)) => Some((to_i64(*id)?, commit.clone(), digest.to_vec())),
            None => None,
        };
        let next_serial = w.next_serial;
        self.run(async {
            let mut c = self.conn().await?;
            let txn = c.transaction().await.map_err(be)?;
            if !finals.is_empty() {
                let ids: Vec<&[u8]> = finals.keys().map(Vec::as_slice).collect();
                let recs: Vec<&[u8]> = finals.values().map(|(r, _)| r.as_slice()).collect();
                let res: Vec<&[u8]> = finals.values().map(|(_, s)| s.as_slice()).collect();
                txn.execute(
                    "INSERT INTO requests (id, record) SELECT * FROM unnest($1::bytea[], $2::bytea[])
                     ON CONFLICT (id) DO UPDATE SET record = excluded.record",
                    &[&ids, &recs],
                )
                .await
                .map_err(be)?;
                txn.execute(
                    "DELETE FROM pending_envelopes WHERE id = ANY($1::bytea[])",
                    &[&ids],
                )
                .await
                .map_err(be)?;
                txn.execute(
                    "INSERT INTO results (id, signed_result) SELECT * FROM unnest($1::bytea[], $2::bytea[])
                     ON CONFLICT (id) DO UPDATE SET signed_result = excluded.signed_result",
                    &[&ids, &res],
                )
                .await
                .map_err(be)?;
            }
            let (puts, dels): (Vec<_>, Vec<_>) = shares.iter().partition(|(_, v)| v.is_some());
            if !puts.is_empty() {
                let serials: Vec<i64> = puts.iter().map(|(k, _)| **k).collect();
                let entries: Vec<&[u8]> =
                    puts.iter().filter_map(|(_, v)| v.as_deref()).collect();
                // A write outside a batch counts as the next batch's, so a snapshot taken at
                // the current one never holds it as current.
                let written = match &batch {
                    Some((id, _, _)) => *id,
                    None => {
                        let last: Option<i64> = txn
                            .query_opt("SELECT value FROM meta WHERE key = $1", &[&LAST_APPLIED])
                            .await
                            .map_err(be)?
                            .map(|r| r.get(0));
                        last.unwrap_or(0).saturating_add(1)
                    }
                };
                upsert_shares(&txn, &serials, &entries, written).await?;
            }
            if !dels.is_empty() {
                let serials: Vec<i64> = dels.iter().map(|(k, _)| **k).collect();
                txn.execute("DELETE FROM shares WHERE serial = ANY($1)", &[&serials])
                    .await
                    .map_err(be)?;
            }
            if let Some((id, commit, digest)) = &batch {
                txn.execute(
                    "INSERT INTO batches (batch_id, results_digest, commit) VALUES ($1, $2, $3)
                     ON CONFLICT (batch_id) DO UPDATE SET results_digest = excluded.results_digest,
                     commit = excluded.commit",
                    &[id, digest, commit],
                )
                .await
                .map_err(be)?;
                set_meta(&txn, LAST_APPLIED, to_u64(*id, "batches")?).await?;
            }
            set_meta(&txn, NEXT_SERIAL, next_serial).await?;
            if let Some(st) = &w.stats {
                set_stats_period(&txn, &st.period).await?;
                if let Some(h) = &st.opened {
                    put_opened(&txn, h).await?;
                }
            }
            txn.commit().await.map_err(be)
        })
    }

    fn result(&self, id: &RequestId) -> Result<Option<Vec<u8>>, StoreError> {
        let id = id.0.to_vec();
        self.run(async {
            let c = self.conn().await?;
            let row = c
                .query_opt("SELECT signed_result FROM results WHERE id = $1", &[&id])
                .await
                .map_err(be)?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn batch(&self, batch_id: u64) -> Result<Option<StoredBatch>, StoreError> {
        let Ok(id) = i64::try_from(batch_id) else {
            return Ok(None);
        };
        self.run(async {
            let c = self.conn().await?;
            let Some(row) = c
                .query_opt(
                    "SELECT results_digest, commit FROM batches WHERE batch_id = $1",
                    &[&id],
                )
                .await
                .map_err(be)?
            else {
                return Ok(None);
            };
            let d: &[u8] = row.get(0);
            let results_digest: [u8; 32] =
                d.try_into().map_err(|_| StoreError::Corrupt("batches"))?;
            Ok(Some(StoredBatch {
                commit: row.get(1),
                results_digest,
            }))
        })
    }

    fn meta(&self) -> Result<Meta, StoreError> {
        self.run(async {
            let c = self.conn().await?;
            meta_of(&**c).await
        })
    }

    fn attestation(&self) -> Result<Option<Attestation>, StoreError> {
        self.run(async {
            let c = self.conn().await?;
            let row = c
                .query_opt("SELECT record FROM attestation WHERE id = 1", &[])
                .await
                .map_err(be)?;
            row.map(|r| Attestation::decode(r.get(0))).transpose()
        })
    }

    fn record_attestation(&self, a: &Attestation) -> Result<(), StoreError> {
        let a = *a;
        self.run(async {
            let c = self.conn().await?;
            set_attestation(&**c, &a).await
        })
    }

    fn stats_period(&self) -> Result<Option<StatsPeriod>, StoreError> {
        self.run(async {
            let c = self.conn().await?;
            let row = c
                .query_opt("SELECT record FROM stats_period WHERE id = 1", &[])
                .await
                .map_err(be)?;
            row.map(|r| StatsPeriod::decode_stored(r.get(0)))
                .transpose()
        })
    }

    fn opened_histograms(
        &self,
        period: Option<u64>,
    ) -> Result<Option<OpenedHistograms>, StoreError> {
        let period = period.map(to_i64).transpose()?;
        self.run(async {
            let c = self.conn().await?;
            let row = match period {
                Some(p) => c
                    .query_opt(
                        "SELECT histograms FROM opened_histograms WHERE period = $1",
                        &[&p],
                    )
                    .await
                    .map_err(be)?,
                None => c
                    .query_opt(
                        "SELECT histograms FROM opened_histograms ORDER BY period DESC LIMIT 1",
                        &[],
                    )
                    .await
                    .map_err(be)?,
            };
            row.map(|r| decode_opened(r.get(0))).transpose()
        })
    }

    fn failed_attempts(&self, id: &RequestId) -> Result<u32, StoreError> {
        self.run(async {
            let c = self.conn().await?;
            let row = c
                .query_opt(
                    "SELECT count FROM failed_attempts WHERE id = $1",
                    &[&&id.0[..]],
                )
                .await
                .map_err(be)?;
            row.map_or(Ok(0), |r| attempts(r.get(0)))
        })
    }

    fn record_failed_attempt(&self, id: &RequestId) -> Result<u32, StoreError> {
        self.run(async {
            let c = self.conn().await?;
            let n: i32 = c
                .query_one(
                    "INSERT INTO failed_attempts (id, count) VALUES ($1, 1)
                     ON CONFLICT (id) DO UPDATE SET count = failed_attempts.count + 1
                     RETURNING count",
                    &[&&id.0[..]],
                )
                .await
                .map_err(be)?
                .get(0);
            attempts(n)
        })
    }

    fn share_count(&self) -> Result<u64, StoreError> {
        self.run(async {
            let c = self.conn().await?;
            let n: i64 = c
                .query_one("SELECT count(*) FROM shares", &[])
                .await
                .map_err(be)?
                .get(0);
            to_u64(n, "shares")
        })
    }

    fn for_each_share_bytes(&self, f: &mut ShareVisitor<'_>) -> Result<(), StoreError> {
        self.for_each_share_bytes_in(0..=u64::MAX, f)
    }

    fn share_serials(&self) -> Result<Option<Vec<u64>>, StoreError> {
        self.run(async {
            let c = self.conn().await?;
            query_serials(&c, "SELECT serial FROM shares ORDER BY serial", &[])
                .await
                .map(Some)
        })
    }

    fn for_each_share_bytes_in(
        &self,
        serials: std::ops::RangeInclusive<u64>,
        f: &mut ShareVisitor<'_>,
    ) -> Result<(), StoreError> {
        // Serial ids are stored as bigint: none lies above its top.
        let Ok(lo) = i64::try_from(*serials.start()) else {
            return Ok(());
        };
        let hi = i64::try_from(*serials.end()).unwrap_or(i64::MAX);
        // Rows stream from the server as `f` takes them, so memory stays bounded.
        self.run(async {
            let params: [&(dyn ToSql + Sync); 2] = [&lo, &hi];
            let c = self.conn().await?;
            stream_shares(
                &c,
                "SELECT serial, entry FROM shares WHERE serial BETWEEN $1 AND $2 ORDER BY serial",
                &params,
                f,
            )
            .await
        })
    }

    fn for_each_share_bytes_of(
        &self,
        serials: &[u64],
        f: &mut ShareVisitor<'_>,
    ) -> Result<(), StoreError> {
        let ids = serials
            .iter()
            .map(|&s| to_i64(s))
            .collect::<Result<Vec<_>, _>>()?;
        self.run(async {
            let c = self.conn().await?;
            // Ascending chunks keep each query's array and plan small and the order whole.
            for chunk in ids.chunks(FETCH_CHUNK) {
                let params: [&(dyn ToSql + Sync); 1] = [&chunk];
                stream_shares(
                    &c,
                    "SELECT serial, entry FROM shares WHERE serial = ANY($1) ORDER BY serial",
                    &params,
                    f,
                )
                .await?;
            }
            Ok(())
        })
    }

    fn identity(&self) -> Result<Option<[u8; 16]>, StoreError> {
        self.run(async {
            let c = self.conn().await?;
            let token: Vec<u8> = c
                .query_one("SELECT token FROM store_identity WHERE id = 1", &[])
                .await
                .map_err(be)?
                .get(0);
            token
                .try_into()
                .map(Some)
                .map_err(|_| StoreError::Corrupt("store_identity"))
        })
    }

    fn shares_written_after(&self, batch: u64) -> Result<Option<Vec<u64>>, StoreError> {
        let batch = to_i64(batch)?;
        self.run(async {
            let c = self.conn().await?;
            query_serials(
                &c,
                "SELECT serial FROM shares WHERE written_batch > $1 ORDER BY serial",
                &[&batch],
            )
            .await
            .map(Some)
        })
    }

    fn fingerprint(&self) -> Result<[u8; 32], StoreError> {
        self.run(async {
            let mut c = self.conn().await?;
            let txn = c
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await
                .map_err(be)?;
            let mut h = Sha256::new();
            let mut feed = |name: &str, k: &[u8], v: &[u8]| {
                h.update(name.as_bytes());
                h.update((k.len() as u64).to_le_bytes());
                h.update(k);
                h.update((v.len() as u64).to_le_bytes());
                h.update(v);
            };
            // Same order and encoding as the redb store.
            for (sql, name) in [
                ("SELECT id, record FROM requests ORDER BY id", "requests"),
                (
                    "SELECT id, envelope FROM pending_envelopes ORDER BY id",
                    "envelopes",
                ),
                (
                    "SELECT id, signed_result FROM results ORDER BY id",
                    "results",
                ),
            ] {
                let params: [&(dyn ToSql + Sync); 0] = [];
                let stream = txn.query_raw(sql, params).await.map_err(be)?;
                pin_mut!(stream);
                while let Some(row) = stream.next().await {
                    let row = row.map_err(be)?;
                    feed(name, row.get(0), row.get(1));
                }
            }
            let params: [&(dyn ToSql + Sync); 0] = [];
            let stream = txn
                .query_raw("SELECT serial, entry FROM shares ORDER BY serial", params)
                .await
                .map_err(be)?;
            pin_mut!(stream);
            while let Some(row) = stream.next().await {
                let row = row.map_err(be)?;
                let k = to_u64(row.get(0), "shares")?;
                feed("shares", &k.to_le_bytes(), row.get(1));
            }
            for row in txn
                .query(
                    "SELECT batch_id, results_digest, commit FROM batches ORDER BY batch_id",
                    &[],
                )
                .await
                .map_err(be)?
            {
                let k = to_u64(row.get(0), "batches")?;
                let mut v: Vec<u8> = row.get::<_, Vec<u8>>(1);
                v.extend_from_slice(row.get(2));
                feed("batches", &k.to_le_bytes(), &v);
            }
            for row in txn
                .query(
                    "SELECT key, value FROM meta ORDER BY key COLLATE \"C\"",
                    &[],
                )
                .await
                .map_err(be)?
            {
                let k: &str = row.get(0);
                let v = to_u64(row.get(1), "meta")?;
                feed("meta", k.as_bytes(), &v.to_le_bytes());
            }
            txn.commit().await.map_err(be)?;
            Ok(h.finalize().into())
        })
    }

    fn summary(&self) -> Result<StoreSummary, StoreError> {
        use shared_proto::v1::SignedResult;
        self.run(async {
            let mut c = self.conn().await?;
            let txn = c
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await
                .map_err(be)?;
            let mut s = StoreSummary::default();
            for row in txn
                .query(
                    "SELECT q.id, q.record, r.signed_result FROM requests q
                     LEFT JOIN results r ON r.id = q.id ORDER BY q.id",
                    &[],
                )
                .await
                .map_err(be)?
            {
                let id =
                    RequestId::from_slice(row.get(0)).ok_or(StoreError::Corrupt("requests"))?;
                let rec = decode_record(row.get(1))?;
                let result = match row.get::<_, Option<&[u8]>>(2) {
                    None => None,
                    Some(r) => Some(
                        SignedResult::decode(r)
                            .map_err(|_| StoreError::Corrupt("results"))?
                            .result,
                    ),
                };
                s.requests.insert(
                    id.0,
                    RequestSummary {
                        digest: rec.digest,
                        state: rec.state,
                        result,
                    },
                );
            }
            for row in txn
                .query("SELECT serial FROM shares ORDER BY serial", &[])
                .await
                .map_err(be)?
            {
                s.serials.push(to_u64(row.get(0), "shares")?);
            }
            let m = meta_of(&*txn).await?;
            txn.commit().await.map_err(be)?;
            s.last_applied_batch = m.last_applied_batch;
            s.next_serial = m.next_serial;
            Ok(s)
        })
    }

    fn size_bytes(&self) -> u64 {
        self.run(async {
            let c = self.conn().await?;
            let n: i64 = c
                .query_one(
                    "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint
                     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = $1 AND c.relkind = 'r'",
                    &[&self.schema],
                )
                .await
                .map_err(be)?
                .get(0);
            Ok(u64::try_from(n).unwrap_or(0))
        })
        .unwrap_or(0)
    }
}

async fn meta_of<C: tokio_postgres::GenericClient>(c: &C) -> Result<Meta, StoreError> {
    let mut m = Meta {
        last_applied_batch: 0,
        next_serial: 1,
    };
    for row in c
        .query("SELECT key, value FROM meta", &[])
        .await
        .map_err(be)?
    {
        let k: &str = row.get(0);
        let v = to_u64(row.get(1), "meta")?;
        match k {
            LAST_APPLIED => m.last_applied_batch = v,
            NEXT_SERIAL => m.next_serial = v,
            _ => {}
        }
    }
    Ok(m)
}

/// Drops a schema and everything in it (tests and `local-cluster` resets), through a
/// connection on `rt` (called as [`PgStore::open`] is).
///
/// # Errors
/// Unreachable server or bad schema name.
pub fn drop_schema(opts: &PgOptions, rt: &Handle) -> Result<(), StoreError> {
    let pool = pool(opts, "public")?;
    wait_on(rt, async {
        let c = pool.get().await.map_err(connect_err)?;
        c.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
            opts.schema
        ))
        .await
        .map_err(be)
    })
}

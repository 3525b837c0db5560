//! The store conformance suite: the same tests against the redb store and
//! the PostgreSQL store. PostgreSQL runs where `OCELLI_TEST_POSTGRES` names a
//! server (`.ci/postgres.sh` starts one); elsewhere those tests print that
//! they skip. The TLS tests need the server's CA in `OCELLI_TEST_PG_CA`
//! (`.ci/postgres.sh` exports it too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use ocelli_mpc::db::{Eye, Part};
use ocelli_node::ids::{RequestId, SerialId};
use ocelli_node::shares::{ShareDb, StoredShares, ENTRY_BYTES};
use ocelli_node::stats::{Comparison, Histogram, OpenedHistograms, Population};
use ocelli_node::store::load::{share_db, share_db_logged};
use ocelli_node::store::period::{StatsPeriod, StatsWrite};
use ocelli_node::store::postgres::{drop_schema, PgOptions, PgStore, PgTls, PgTlsError};
use ocelli_node::store::redb::RedbStore;
use ocelli_node::store::snapshot::{self, Snapshot, SnapshotError};
use ocelli_node::store::synthetic::{fill, share_db_one_by_one, FillError};
use ocelli_node::store::{
    Attestation, BatchWrite, FinalWrite, Meta, RequestRecord, RequestState, ShareWrite, Store,
    StoreError,
};
use rand::RngCore;

type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The runtime the PostgreSQL stores' connections run on, as the service's do; the tests
/// call the stores from their own threads, as the service does from blocking ones.
fn runtime() -> tokio::runtime::Handle {
    static RT: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
    });
    RT.handle().clone()
}

/// A backend under test: opens (and reopens) one store.
trait Backend {
    fn open(&self) -> Res<Arc<dyn Store>>;
}

struct Redb(tempfile::TempDir);

impl Backend for Redb {
    fn open(&self) -> Res<Arc<dyn Store>> {
        Ok(Arc::new(RedbStore::open(self.0.path())?))
    }
}

/// A fresh schema in the test database, dropped afterwards.
struct Pg {
    url: String,
    schema: String,
    tls: PgTls,
}

impl Pg {
    fn new() -> Option<Self> {
        let Ok(url) = std::env::var("OCELLI_TEST_POSTGRES") else {
            eprintln!("skipping the PostgreSQL store test: OCELLI_TEST_POSTGRES is unset (.ci/postgres.sh starts a server)");
            return None;
        };
        let schema = format!("t_{:016x}", rand::thread_rng().next_u64());
        Some(Self {
            url,
            schema,
            tls: PgTls::Disable,
        })
    }
    /// The same over TLS, verified against the server's CA.
    fn new_tls() -> Option<Self> {
        let Ok(ca) = std::env::var("OCELLI_TEST_PG_CA") else {
            eprintln!("skipping the PostgreSQL TLS test: OCELLI_TEST_PG_CA is unset (.ci/postgres.sh exports it)");
            return None;
        };
        let mut pg = Self::new()?;
        pg.tls = PgTls::Require { ca: ca.into() };
        Some(pg)
    }
    fn options(&self) -> PgOptions {
        PgOptions {
            url: self.url.clone(),
            schema: self.schema.clone(),
            pool_size: 3,
            tls: self.tls.clone(),
        }
    }
}

impl Backend for Pg {
    fn open(&self) -> Res<Arc<dyn Store>> {
        Ok(Arc::new(PgStore::open(&self.options(), runtime())?))
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let _ = drop_schema(
            &PgOptions {
                tls: PgTls::Disable,
                ..self.options()
            },
            &runtime(),
        );
    }
}

fn redb() -> Redb {
    Redb(tempfile::tempdir().expect("tempdir"))
}

fn rec(state: RequestState, digest: u8, batch_id: u64) -> RequestRecord {
    RequestRecord {
        state: state as u32,
        digest: vec![digest; 32],
        received_ms: 1_700_000_000_000,
        request_type: 1,
        serial_id: 0,
        or_policy: false,
        batch_id,
        // The submitting gateway's certificate digest must survive like every other field.
        submitter: vec![digest ^ 0x5a; 32],
        or_serial_ids: vec![u64::from(digest), 7],
    }
}

fn shares(fill: u8) -> StoredShares {
    StoredShares::try_from(&vec![fill; ENTRY_BYTES][..]).expect("entry size")
}

fn final_write(id: RequestId, batch: u64) -> FinalWrite {
    FinalWrite {
        id,
        record: rec(RequestState::Final, id.0[0], batch),
        signed_result: Vec::new(),
    }
}

/// A fixed sequence of writes; returns the request ids used.
fn script(s: &dyn Store) -> Res<Vec<RequestId>> {
    let ids: Vec<RequestId> = (1u8..=6).map(|i| RequestId([i; 16])).collect();
    for id in &ids {
        assert!(s.insert_request(id, &rec(RequestState::Pending, id.0[0], 0), &[id.0[0]; 40])?);
    }
    s.apply_batch(&BatchWrite {
        batch: Some((1, b"commit-1".to_vec(), [1; 32])),
        finals: vec![final_write(ids[0], 1), final_write(ids[1], 1)],
        shares: vec![
            (SerialId(1), ShareWrite::Put(shares(1))),
            (SerialId(2), ShareWrite::Put(shares(2))),
            (SerialId(3), ShareWrite::Put(shares(3))),
        ],
        next_serial: 4,
        stats: None,
    })?;
    // A later write to the same serial wins within one batch.
    s.apply_batch(&BatchWrite {
        batch: Some((2, b"commit-2".to_vec(), [2; 32])),
        finals: vec![final_write(ids[2], 2)],
        shares: vec![
            (SerialId(2), ShareWrite::Delete),
            (SerialId(4), ShareWrite::Put(shares(4))),
            (SerialId(4), ShareWrite::Delete),
            (SerialId(5), ShareWrite::Delete),
            (SerialId(5), ShareWrite::Put(shares(5))),
        ],
        next_serial: 6,
        stats: None,
    })?;
    // A timeout sweep: no batch entry.
    s.apply_batch(&BatchWrite {
        batch: None,
        finals: vec![final_write(ids[3], 0)],
        shares: vec![],
        next_serial: 6,
        stats: None,
    })?;
    Ok(ids)
}

fn replay_protection_and_reads(b: &dyn Backend) -> Res {
    let s = b.open()?;
    assert_eq!(
        s.meta()?,
        Meta {
            last_applied_batch: 0,
            next_serial: 1
        }
    );
    let empty = s.fingerprint()?;
    let id = RequestId([9; 16]);
    assert!(s.insert_request(&id, &rec(RequestState::Pending, 7, 0), b"env")?);
    assert_ne!(s.fingerprint()?, empty);
    let fp = s.fingerprint()?;
    assert!(!s.insert_request(&id, &rec(RequestState::Pending, 8, 0), b"other")?);
    assert_eq!(fp, s.fingerprint()?, "a replay writes nothing");
    assert_eq!(s.envelope(&id)?.as_deref(), Some(&b"env"[..]));
    assert_eq!(s.request(&id)?.map(|r| r.digest), Some(vec![7; 32]));
    assert_eq!(s.request(&RequestId([1; 16]))?, None);
    assert_eq!(s.result(&id)?, None);
    assert!(s.batch(1)?.is_none());
    assert_eq!(s.pending_requests()?.len(), 1);
    Ok(())
}

fn batches_apply_and_survive_reopen(b: &dyn Backend) -> Res {
    let s = b.open()?;
    let ids = script(s.as_ref())?;
    let check = |s: &dyn Store| -> Res {
        assert_eq!(
            s.meta()?,
            Meta {
                last_applied_batch: 2,
                next_serial: 6
            }
        );
        let pending: Vec<_> = s
            .pending_requests()?
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(pending, vec![ids[4], ids[5]], "pending in id order");
        assert_eq!(s.envelope(&ids[0])?, None);
        assert_eq!(s.envelope(&ids[4])?, Some(vec![5; 40]));
        assert_eq!(s.result(&ids[0])?, Some(Vec::new()));
        assert_eq!(
            s.request(&ids[3])?.and_then(|r| r.state()),
            Some(RequestState::Final)
        );
        let b2 = s.batch(2)?.expect("batch 2");
        assert_eq!(
            (b2.commit.as_slice(), b2.results_digest),
            (&b"commit-2"[..], [2; 32])
        );
        assert_eq!(s.share_count()?, 3);
        let mut seen = Vec::new();
        s.for_each_share(&mut |id, sh| seen.push((id.0, sh.as_bytes()[0])))?;
        assert_eq!(seen, vec![(1, 1), (3, 3), (5, 5)]);
        let sum = s.summary()?;
        assert_eq!(sum.serials, vec![1, 3, 5]);
        assert_eq!(sum.requests.len(), 6);
        assert_eq!((sum.last_applied_batch, sum.next_serial), (2, 6));
        assert!(s.size_bytes() > 0);
        Ok(())
    };
    check(s.as_ref())?;
    let fp = s.fingerprint()?;
    drop(s);
    let s = b.open()?;
    check(s.as_ref())?;
    assert_eq!(fp, s.fingerprint()?);
    Ok(())
}

/// The node's latest batch attestation: none at first, replaced by the next, durable across a
/// reopen, and not part of the fingerprint (the nodes' own records differ in time).
fn attestation_is_replaced_and_survives_reopen(b: &dyn Backend) -> Res {
    let s = b.open()?;
    assert_eq!(s.attestation()?, None);
    let fp = s.fingerprint()?;
    let first = Attestation {
        batch_id: 3,
        attempt: 1,
        digest: [7; 32],
    };
    let second = Attestation {
        batch_id: 3,
        attempt: 2,
        digest: [8; 32],
    };
    s.record_attestation(&first)?;
    assert_eq!(s.attestation()?, Some(first));
    s.record_attestation(&second)?;
    drop(s);
    let s = b.open()?;
    assert_eq!(s.attestation()?, Some(second));
    assert_eq!(s.fingerprint()?, fp);
    Ok(())
}

/// Failed attempts per request: none at first, counted one by one and per request, durable
/// across a reopen, and not part of the fingerprint (only party 0 counts them).
fn failed_attempts_count_up_and_survive_reopen(b: &dyn Backend) -> Res {
    let s = b.open()?;
    let (poison, other) = (RequestId([0xaa; 16]), RequestId([0xbb; 16]));
    let fp = s.fingerprint()?;
    assert_eq!(s.failed_attempts(&poison)?, 0);
    assert_eq!(s.record_failed_attempt(&poison)?, 1);
    assert_eq!(s.record_failed_attempt(&poison)?, 2);
    assert_eq!(s.record_failed_attempt(&other)?, 1);
    drop(s);
    let s = b.open()?;
    assert_eq!(s.failed_attempts(&poison)?, 2);
    assert_eq!(s.failed_attempts(&other)?, 1);
    assert_eq!(s.record_failed_attempt(&poison)?, 3);
    assert_eq!(s.fingerprint()?, fp);
    Ok(())
}

fn opened(period: u64, last_batch: u64) -> OpenedHistograms {
    OpenedHistograms {
        period,
        first_batch: 1,
        last_batch,
        opened_at_unix_s: 1_700_000_000 + last_batch,
        edges: vec![0.0, 0.25, 0.345],
        threshold: 0.345,
        epsilon: 1.0,
        delta: 1e-6,
        noise_variance: 12.5,
        impostor_pairs: 40,
        genuine_pairs: 3,
        reauthentication_pairs: 2,
        histograms: vec![Histogram {
            population: Population::Impostor,
            comparison: Comparison::Joint,
            counts: vec![-1, 0, 3, 7, 2, 0, 11, 9, 8],
        }],
    }
}

/// The statistics period goes with the batch that carries it, a batch without one leaves it,
/// opened histograms are kept per period (the latest by default), all across a reopen.
fn stats_period_goes_with_its_batch_and_survives_reopen(b: &dyn Backend) -> Res {
    let s = b.open()?;
    assert_eq!(s.stats_period()?, None);
    assert_eq!(s.opened_histograms(None)?, None);
    let mut running = StatsPeriod::begin(0, 1, 1_700_000_000, 6);
    running.batches = 1;
    running.impostor_pairs = 40;
    running.used_rows = vec![2, 5, 9];
    running.counts = vec![1, u32::MAX, 0, 7, 3, 2];
    s.apply_batch(&BatchWrite {
        batch: Some((1, b"commit-1".to_vec(), [1; 32])),
        next_serial: 1,
        stats: Some(StatsWrite {
            period: running.clone(),
            opened: None,
        }),
        ..BatchWrite::default()
    })?;
    assert_eq!(s.stats_period()?.as_ref(), Some(&running));
    s.apply_batch(&BatchWrite {
        batch: Some((2, b"commit-2".to_vec(), [2; 32])),
        next_serial: 1,
        ..BatchWrite::default()
    })?;
    assert_eq!(s.stats_period()?.as_ref(), Some(&running));
    let next = StatsPeriod::begin(1, 3, 1_700_000_003, 6);
    for (period, batch) in [(0, 3), (1, 4)] {
        s.apply_batch(&BatchWrite {
            batch: Some((batch, format!("commit-{batch}").into_bytes(), [3; 32])),
            next_serial: 1,
            stats: Some(StatsWrite {
                period: next.clone(),
                opened: Some(opened(period, batch)),
            }),
            ..BatchWrite::default()
        })?;
    }
    drop(s);
    let s = b.open()?;
    assert_eq!(s.stats_period()?, Some(next));
    assert_eq!(s.opened_histograms(None)?, Some(opened(1, 4)));
    assert_eq!(s.opened_histograms(Some(0))?, Some(opened(0, 3)));
    assert_eq!(s.opened_histograms(Some(2))?, None);
    Ok(())
}

/// Many entries come back in serial order (the start-up load streams them).
fn load_streams_in_serial_order(b: &dyn Backend) -> Res {
    let s = b.open()?;
    let n = 5_000u64;
    // Written in descending order over several batches.
    let mut serial = n;
    while serial > 0 {
        let mut w = BatchWrite {
            next_serial: n + 1,
            ..BatchWrite::default()
        };
        for _ in 0..700 {
            if serial == 0 {
                break;
            }
            w.shares
                .push((SerialId(serial), ShareWrite::Put(shares(serial as u8))));
            serial -= 1;
        }
        s.apply_batch(&w)?;
    }
    assert_eq!(s.share_count()?, n);
    let mut next = 1;
    s.for_each_share(&mut |id, sh| {
        assert_eq!(id.0, next);
        assert_eq!(sh.as_bytes()[0], id.0 as u8);
        next += 1;
    })?;
    assert_eq!(next, n + 1);
    Ok(())
}

fn random_shares(rng: &mut impl RngCore) -> StoredShares {
    StoredShares::build(|b| rng.fill_bytes(b))
}

/// Bit for bit: serial ids, every row of every share vector, the index and the change count
/// (compared without printing shares).
fn assert_same_db(a: &ShareDb, b: &ShareDb) {
    assert_eq!(a.rows().generation(), b.rows().generation());
    assert_same_rows(a, b);
}

/// [`assert_same_db`] but for the change count (one database changed in place, one loaded).
fn assert_same_rows(a: &ShareDb, b: &ShareDb) {
    let (ra, rb) = (a.rows(), b.rows());
    assert_eq!(ra.serial_ids(), rb.serial_ids());
    for eye in Eye::BOTH {
        for part in [Part::Code, Part::Mask] {
            let same = ra.vectors(eye, part, 0..ra.len()) == rb.vectors(eye, part, 0..rb.len());
            assert!(same, "{eye:?} {part:?} rows differ");
        }
    }
    for &serial in ra.serial_ids() {
        assert_eq!(a.row_of(SerialId(serial)), b.row_of(SerialId(serial)));
    }
}

/// The start-up load (rows allocated once, each entry decoded in place from the store's
/// buffer) gives the database the entry-by-entry load gives, after enrolments out of order,
/// replacements and deletions.
fn load_equals_one_by_one(b: &dyn Backend) -> Res {
    let s = b.open()?;
    let mut rng = rand::thread_rng();
    let mut w = BatchWrite {
        next_serial: 201,
        ..BatchWrite::default()
    };
    for serial in (1..=200).rev() {
        w.shares
            .push((SerialId(serial), ShareWrite::Put(random_shares(&mut rng))));
    }
    s.apply_batch(&w)?;
    let mut w = BatchWrite {
        next_serial: 261,
        ..BatchWrite::default()
    };
    for serial in (201..=260).chain([5, 50]) {
        w.shares
            .push((SerialId(serial), ShareWrite::Put(random_shares(&mut rng))));
    }
    for serial in [7, 100, 201] {
        w.shares.push((SerialId(serial), ShareWrite::Delete));
    }
    s.apply_batch(&w)?;
    drop(s);
    let s = b.open()?;
    let heard = std::sync::atomic::AtomicU64::new(0);
    let loaded = share_db(s.as_ref(), &|n| {
        heard.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
    })?;
    assert_eq!(loaded.len(), 257);
    assert_eq!(heard.into_inner(), 257);
    assert_same_db(&loaded, &share_db_one_by_one(s.as_ref())?);
    Ok(())
}

/// Synthetic people go into an empty store only, with serial ids from 1 and the counter after
/// them.
fn fill_enrols_into_an_empty_store_only(b: &dyn Backend) -> Res {
    let s = b.open()?;
    let mut rng = rand::thread_rng();
    let mut heard = Vec::new();
    fill(s.as_ref(), 2_345, &mut rng, &mut |n| heard.push(n))?;
    assert_eq!(heard, [1_000, 2_000, 2_345]);
    assert_eq!(s.share_count()?, 2_345);
    assert_eq!(s.meta()?.next_serial, 2_346);
    assert_eq!(
        share_db(s.as_ref(), &|_| ())?.rows().serial_ids()[2_344],
        2_345
    );
    let fp = s.fingerprint()?;
    assert!(matches!(
        fill(s.as_ref(), 1, &mut rng, &mut |_| ()),
        Err(FillError::NotEmpty)
    ));
    assert_eq!(s.fingerprint()?, fp);
    Ok(())
}

/// Equal contents give equal fingerprints and summaries on both backends.
fn same_script_same_fingerprint(a: &dyn Backend, b: &dyn Backend) -> Res {
    let (a, b) = (a.open()?, b.open()?);
    assert_eq!(a.fingerprint()?, b.fingerprint()?);
    script(a.as_ref())?;
    script(b.as_ref())?;
    assert_eq!(a.fingerprint()?, b.fingerprint()?);
    assert_eq!(a.summary()?, b.summary()?);
    Ok(())
}

#[test]
fn redb_replay_protection_and_reads() -> Res {
    replay_protection_and_reads(&redb())
}

#[test]
fn redb_batches_apply_and_survive_reopen() -> Res {
    batches_apply_and_survive_reopen(&redb())
}

/// Serial ids handed out in order form one range, which the redb store reports without reading
/// an entry, so the load reads ranges on several threads; a removed entry leaves a gap and the
/// load reads in one pass. Both give the entry-by-entry database.
#[test]
fn redb_dense_serials_load_in_ranges() -> Res {
    let b = redb();
    let s = b.open()?;
    assert_eq!(s.share_serials()?, Some(Vec::new()));
    let mut rng = rand::thread_rng();
    let mut w = BatchWrite {
        next_serial: 301,
        ..BatchWrite::default()
    };
    for serial in 1..=300 {
        w.shares
            .push((SerialId(serial), ShareWrite::Put(random_shares(&mut rng))));
    }
    s.apply_batch(&w)?;
    assert_eq!(s.share_serials()?, Some((1..=300).collect()));
    assert_same_db(
        &share_db(s.as_ref(), &|_| ())?,
        &share_db_one_by_one(s.as_ref())?,
    );
    let mut w = BatchWrite {
        next_serial: 301,
        ..BatchWrite::default()
    };
    w.shares.push((SerialId(150), ShareWrite::Delete));
    s.apply_batch(&w)?;
    assert_eq!(s.share_serials()?, None);
    let loaded = share_db(s.as_ref(), &|_| ())?;
    assert_eq!(loaded.len(), 299);
    assert_same_db(&loaded, &share_db_one_by_one(s.as_ref())?);
    Ok(())
}

#[test]
fn redb_load_streams_in_serial_order() -> Res {
    load_streams_in_serial_order(&redb())
}

#[test]
fn redb_load_equals_one_by_one() -> Res {
    load_equals_one_by_one(&redb())
}

#[test]
fn postgres_load_equals_one_by_one() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    load_equals_one_by_one(&pg)
}

#[test]
fn redb_fill_enrols_into_an_empty_store_only() -> Res {
    fill_enrols_into_an_empty_store_only(&redb())
}

#[test]
fn postgres_fill_enrols_into_an_empty_store_only() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    fill_enrols_into_an_empty_store_only(&pg)
}

#[test]
fn redb_attestation_is_replaced_and_survives_reopen() -> Res {
    attestation_is_replaced_and_survives_reopen(&redb())
}

#[test]
fn postgres_attestation_is_replaced_and_survives_reopen() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    attestation_is_replaced_and_survives_reopen(&pg)
}

#[test]
fn redb_failed_attempts_count_up_and_survive_reopen() -> Res {
    failed_attempts_count_up_and_survive_reopen(&redb())
}

#[test]
fn postgres_failed_attempts_count_up_and_survive_reopen() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    failed_attempts_count_up_and_survive_reopen(&pg)
}

#[test]
fn redb_stats_period_goes_with_its_batch_and_survives_reopen() -> Res {
    stats_period_goes_with_its_batch_and_survives_reopen(&redb())
}

#[test]
fn postgres_stats_period_goes_with_its_batch_and_survives_reopen() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    stats_period_goes_with_its_batch_and_survives_reopen(&pg)
}

#[test]
fn postgres_replay_protection_and_reads() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    replay_protection_and_reads(&pg)
}

#[test]
fn postgres_batches_apply_and_survive_reopen() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    batches_apply_and_survive_reopen(&pg)
}

#[test]
fn postgres_load_streams_in_serial_order() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    load_streams_in_serial_order(&pg)
}

#[test]
fn postgres_and_redb_fingerprints_agree() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    same_script_same_fingerprint(&redb(), &pg)
}

#[test]
fn postgres_refuses_a_newer_schema() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    let s = pg.open()?;
    drop(s);
    // Pretend a newer binary migrated this schema.
    let mut c = postgres_client(&pg.url)?;
    c(&format!(
        "INSERT INTO \"{}\".schema_migrations (version) VALUES (999)",
        pg.schema
    ))?;
    match PgStore::open(&pg.options(), runtime()) {
        Err(StoreError::SchemaTooNew { found: 999, known }) => assert!(known < 999),
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    Ok(())
}

#[test]
fn postgres_reconnects_after_the_server_drops_connections() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    let s = pg.open()?;
    let id = RequestId([3; 16]);
    assert!(s.insert_request(&id, &rec(RequestState::Pending, 3, 0), b"env")?);
    let mut c = postgres_client(&pg.url)?;
    c(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'ocelli/{}'",
        pg.schema
    ))?;
    std::thread::sleep(std::time::Duration::from_millis(300));
    // Every pooled connection was dropped; each call finds one and reconnects.
    for _ in 0..6 {
        assert_eq!(s.envelope(&id)?.as_deref(), Some(&b"env"[..]));
    }
    Ok(())
}

#[test]
fn postgres_over_tls_round_trip() -> Res {
    let Some(pg) = Pg::new_tls() else {
        return Ok(());
    };
    batches_apply_and_survive_reopen(&pg)?;
    let s = pg.open()?;
    let id = RequestId([0xa5; 16]);
    assert!(s.insert_request(&id, &rec(RequestState::Pending, 5, 0), b"tls")?);
    assert_eq!(s.envelope(&id)?.as_deref(), Some(&b"tls"[..]));
    // The server's view: every pooled connection of this store is TLS 1.3.
    let (tls13, other) = postgres_query_pair(
        &pg.url,
        &format!(
            "SELECT count(*) FILTER (WHERE s.ssl AND s.version = 'TLSv1.3'),
                    count(*) FILTER (WHERE NOT s.ssl OR s.version <> 'TLSv1.3')
             FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
             WHERE a.application_name = 'ocelli/{}'",
            pg.schema
        ),
    )?;
    // The pool's three connections; closed ones of the earlier opens may linger.
    assert!(tls13 >= 3 && other == 0, "TLS 1.3: {tls13}, other: {other}");
    Ok(())
}

/// A CA PEM file of a fresh CA that signed nothing the server presents.
fn other_ca(dir: &std::path::Path) -> Res<std::path::PathBuf> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let path = dir.join("other-ca.pem");
    std::fs::write(&path, params.self_signed(&key)?.pem())?;
    Ok(path)
}

#[test]
fn postgres_tls_refuses_a_server_certificate_from_another_ca() -> Res {
    let Some(mut pg) = Pg::new_tls() else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    pg.tls = PgTls::Require {
        ca: other_ca(dir.path())?,
    };
    match PgStore::open(&pg.options(), runtime()) {
        Err(e @ StoreError::Tls(PgTlsError::Handshake(_))) => assert_eq!(
            e.to_string(),
            "TLS handshake with the store's server failed: invalid peer certificate: UnknownIssuer"
        ),
        other => panic!("expected a refused handshake, got {other:?}"),
    }
    Ok(())
}

#[test]
fn postgres_tls_refuses_a_server_certificate_for_another_host() -> Res {
    let Some(mut pg) = Pg::new_tls() else {
        return Ok(());
    };
    // The same server, reached as a name its certificate does not carry.
    let (creds, rest) = pg.url.split_once('@').ok_or("no @ in the URL")?;
    let (_, port_db) = rest.split_once(':').ok_or("no port in the URL")?;
    pg.url = format!("{creds}@db.invalid:{port_db}?hostaddr=127.0.0.1");
    match PgStore::open(&pg.options(), runtime()) {
        Err(e @ StoreError::Tls(PgTlsError::Handshake(_))) => {
            let m = e.to_string();
            assert!(
                m.contains("certificate not valid for name \"db.invalid\""),
                "unexpected error: {m}"
            );
            assert!(!m.contains("ocelli-ci"), "the password leaked: {m}");
        }
        other => panic!("expected a refused handshake, got {other:?}"),
    }
    Ok(())
}

#[test]
fn postgres_tls_refuses_a_missing_ca_file() -> Res {
    let Some(mut pg) = Pg::new_tls() else {
        return Ok(());
    };
    pg.tls = PgTls::Require {
        ca: "/nonexistent/ca.pem".into(),
    };
    let e = PgStore::open(&pg.options(), runtime()).expect_err("no CA file");
    assert!(matches!(e, StoreError::Tls(_)), "{e:?}");
    assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    Ok(())
}

/// Two counts from one query on a plain connection (outside the store).
fn postgres_query_pair(url: &str, sql: &str) -> Res<(i64, i64)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (client, conn) = rt.block_on(tokio_postgres::connect(url, tokio_postgres::NoTls))?;
    rt.spawn(conn);
    let row = rt.block_on(client.query_one(sql, &[]))?;
    Ok((row.get(0), row.get(1)))
}

/// Runs SQL on a plain connection (outside the store).
fn postgres_client(url: &str) -> Res<impl FnMut(&str) -> Res> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (client, conn) = rt.block_on(tokio_postgres::connect(url, tokio_postgres::NoTls))?;
    rt.spawn(conn);
    Ok(move |sql: &str| -> Res {
        rt.block_on(client.batch_execute(sql))?;
        Ok(())
    })
}

#[test]
fn postgres_migrate_store_copies_and_verifies() -> Res {
    use ocelli_node::store::migrate::{redb_to_postgres, MigrateError};
    let Some(pg) = Pg::new() else { return Ok(()) };
    let src = redb();
    let attested = Attestation {
        batch_id: 3,
        attempt: 4,
        digest: [9; 32],
    };
    let fp = {
        let s = src.open()?;
        script(s.as_ref())?;
        s.record_attestation(&attested)?;
        s.fingerprint()?
    };
    let report = redb_to_postgres(src.0.path(), &pg.options(), runtime())?;
    assert_eq!((report.requests, report.shares, report.batches), (6, 3, 2));
    assert_eq!(report.fingerprint, fp);
    assert_eq!(pg.open()?.fingerprint()?, fp);
    assert_eq!(
        pg.open()?.attestation()?,
        Some(attested),
        "copied with the store"
    );
    assert!(matches!(
        redb_to_postgres(src.0.path(), &pg.options(), runtime()),
        Err(MigrateError::NotEmpty)
    ));
    Ok(())
}

/// Start-up load rate, for docs/benchmarks.md (`OCELLI_LOAD_PEOPLE`, default
/// 20,000): enrols people in batches of 1,000, then times the serial-order load.
///
/// ```text
/// cargo test --release -p ocelli-node --test store -- --ignored --nocapture load_rate
/// ```
#[test]
#[ignore = "a measurement"]
fn load_rate() -> Res {
    let people: u64 = std::env::var("OCELLI_LOAD_PEOPLE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let pg = Pg::new();
    let mut backends: Vec<(&str, &dyn Backend)> = Vec::new();
    let r = redb();
    backends.push(("redb", &r));
    if let Some(pg) = &pg {
        backends.push(("postgres", pg));
    }
    let mut rng = rand::thread_rng();
    for (name, b) in backends {
        let s = b.open()?;
        let t = std::time::Instant::now();
        let mut serial = 1;
        while serial <= people {
            let mut w = BatchWrite::default();
            for _ in 0..1_000 {
                if serial > people {
                    break;
                }
                let mut e = vec![0u8; ENTRY_BYTES];
                rng.fill_bytes(&mut e);
                let sh = StoredShares::try_from(&e[..])?;
                w.shares.push((SerialId(serial), ShareWrite::Put(sh)));
                serial += 1;
            }
            w.next_serial = serial;
            s.apply_batch(&w)?;
        }
        let write = t.elapsed().as_secs_f64();
        drop(s);
        let s = b.open()?;
        let t = std::time::Instant::now();
        let mut n = 0u64;
        s.for_each_share(&mut |_, _| n += 1)?;
        let load = t.elapsed().as_secs_f64();
        assert_eq!(n, people);
        println!(
            "{name}: {people} people ({} MiB): enrolment writes {:.0} people/s, start-up load {:.0} people/s ({:.1} MiB/s)",
            (people * ENTRY_BYTES as u64) >> 20,
            people as f64 / write,
            people as f64 / load,
            (people * ENTRY_BYTES as u64) as f64 / 1048576.0 / load
        );
    }
    Ok(())
}

/// A batch write with a batch log entry, as the batch loop makes.
fn logged_batch(id: u64, commit: &[u8], next_serial: u64) -> BatchWrite {
    BatchWrite {
        batch: Some((id, commit.to_vec(), [0; 32])),
        next_serial,
        ..BatchWrite::default()
    }
}

/// The store's full load with the batch it holds recorded, as a start-up makes it.
fn full_load(s: &dyn Store) -> Res<ShareDb> {
    let mut db = share_db(s, &|_| ())?;
    db.set_applied_batch(s.meta()?.last_applied_batch);
    Ok(db)
}

/// 200 people enrolled out of order by batch 1.
fn enrolled_by_batch_one(s: &dyn Store) -> Res {
    let mut rng = rand::thread_rng();
    let mut w = logged_batch(1, b"commit 1", 201);
    for serial in (1..=200).rev() {
        w.shares
            .push((SerialId(serial), ShareWrite::Put(random_shares(&mut rng))));
    }
    Ok(s.apply_batch(&w)?)
}

/// A store with [`enrolled_by_batch_one`]'s people, its database loaded, and where a snapshot
/// of it goes (the directory lives as long as the returned guard).
fn at_batch_one(
    pg: &Pg,
) -> Res<(
    Arc<dyn Store>,
    ShareDb,
    tempfile::TempDir,
    std::path::PathBuf,
)> {
    let s = pg.open()?;
    enrolled_by_batch_one(s.as_ref())?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("shares.snapshot");
    let db = full_load(s.as_ref())?;
    Ok((s, db, dir, path))
}

/// Batch 2 enrols 60 more, replaces two and deletes three (one of them new); a write outside
/// a batch then replaces one more.
fn changed_after_batch_one(s: &dyn Store, db: Option<&mut ShareDb>) -> Res {
    let mut rng = rand::thread_rng();
    let mut w = logged_batch(2, b"commit 2", 261);
    for serial in (201..=260).chain([5, 50]) {
        w.shares
            .push((SerialId(serial), ShareWrite::Put(random_shares(&mut rng))));
    }
    for serial in [7, 100, 201] {
        w.shares.push((SerialId(serial), ShareWrite::Delete));
    }
    s.apply_batch(&w)?;
    let outside = BatchWrite {
        shares: vec![(SerialId(60), ShareWrite::Put(random_shares(&mut rng)))],
        next_serial: 261,
        ..BatchWrite::default()
    };
    s.apply_batch(&outside)?;
    if let Some(db) = db {
        for (serial, write) in w.shares.into_iter().chain(outside.shares) {
            match write {
                ShareWrite::Put(e) => db.put(serial, e),
                ShareWrite::Delete => db.remove(serial),
            }
        }
        db.set_applied_batch(2);
    }
    Ok(())
}

/// A snapshot taken at batch 1 plus the entries written since loads the database the store
/// alone gives: enrolments, replacements (in a batch and outside one) and deletions after it.
#[test]
fn postgres_snapshot_and_the_entries_since_load_as_the_store() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    let (s, at_one, _dir, path) = at_batch_one(&pg)?;
    let w = snapshot::write(&path, s.as_ref(), || &at_one)?;
    assert_eq!((w.entries, w.batch), (200, 1));
    assert_eq!(w.bytes, std::fs::metadata(&path)?.len());
    changed_after_batch_one(s.as_ref(), None)?;
    let snap = Snapshot::open(&path, s.as_ref())?.expect("the snapshot fits");
    let (db, loaded) = snap.load(s.as_ref(), &|_| ())?;
    // 202..=260, 5, 50 and 60 were written after batch 1.
    assert_eq!((loaded.from_snapshot, loaded.from_store), (195, 62));
    assert_same_db(&db, &full_load(s.as_ref())?);
    let (logged, report) = share_db_logged(s.as_ref(), Some(&path))?;
    assert_eq!(report.snapshot, Some(loaded));
    assert_eq!(logged.applied_batch(), 2);
    assert_same_db(&logged, &db);
    Ok(())
}

/// Batches applied while a snapshot is taken (between two holds of the read lock) leave it
/// stamped with the batch it began at; the load fetches what they wrote.
#[test]
fn postgres_snapshot_taken_while_batches_apply() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    let (s, at_one, _dir, path) = at_batch_one(&pg)?;
    let db = std::sync::RwLock::new(at_one);
    let holds = std::sync::atomic::AtomicU32::new(0);
    let w = snapshot::write(&path, s.as_ref(), || {
        if holds.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            changed_after_batch_one(s.as_ref(), Some(&mut db.write().unwrap())).unwrap();
        }
        db.read().unwrap()
    })?;
    assert!(
        holds.into_inner() > 2,
        "the rows were read in several holds"
    );
    assert_eq!(w.batch, 1);
    let snap = Snapshot::open(&path, s.as_ref())?.expect("the snapshot fits");
    let (loaded, _) = snap.load(s.as_ref(), &|_| ())?;
    assert_same_db(&loaded, &full_load(s.as_ref())?);
    assert_same_rows(&loaded, &db.into_inner().unwrap());
    Ok(())
}

/// A snapshot of another store, of a history that differs at its batch, a damaged or cut
/// one is refused with its reason, and the logged load reads the store instead.
#[test]
fn postgres_snapshot_that_does_not_fit_is_not_used() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    let (s, at_one, _dir, path) = at_batch_one(&pg)?;
    snapshot::write(&path, s.as_ref(), || &at_one)?;
    let good = std::fs::read(&path)?;
    let refused = |s: &dyn Store| -> Res<String> {
        let why = match Snapshot::open(&path, s)
            .and_then(|snap| snap.expect("a file is there").load(s, &|_| ()).map(|_| ()))
        {
            Ok(()) => panic!("an unfit snapshot was used"),
            Err(e) => e.to_string(),
        };
        let (db, report) = share_db_logged(s, Some(&path))?;
        assert_eq!(report.snapshot, None);
        assert_same_db(&db, &full_load(s)?);
        Ok(why)
    };

    let other = Pg::new().expect("a server");
    let o = other.open()?;
    enrolled_by_batch_one(o.as_ref())?;
    assert!(refused(o.as_ref())?.contains("another store"));

    // An entry's bytes changed on disk.
    let mut bad = good.clone();
    bad[snapshot::HEADER + 3 * snapshot::RECORD + 100] ^= 1;
    std::fs::write(&path, &bad)?;
    assert!(refused(s.as_ref())?.contains("fails its check"));
    std::fs::write(&path, &good[..good.len() - 1])?;
    assert!(refused(s.as_ref())?.contains("length"));
    std::fs::write(&path, b"not a snapshot")?;
    assert!(refused(s.as_ref())?.contains("header"));

    std::fs::write(&path, &good)?;
    assert!(Snapshot::open(&path, s.as_ref())?.is_some());
    // 100 enrolled since, of 300: fetching them one list at a time would be the slower load.
    let mut rng = rand::thread_rng();
    let mut w = logged_batch(2, b"commit 2", 301);
    for serial in 201..=300 {
        w.shares
            .push((SerialId(serial), ShareWrite::Put(random_shares(&mut rng))));
    }
    s.apply_batch(&w)?;
    assert!(refused(s.as_ref())?.contains("a quarter"));
    // The batch log holds another commit at the snapshot's batch (a store restored and run
    // on differently).
    s.apply_batch(&logged_batch(1, b"another commit 1", 201))?;
    assert!(refused(s.as_ref())?.contains("batch log differs"));
    // Rows that claim a batch the log lacks are never stamped.
    let mut ahead = full_load(s.as_ref())?;
    ahead.set_applied_batch(9);
    assert!(snapshot::write(&path, s.as_ref(), || &ahead).is_err());
    Ok(())
}

/// The redb store is a local file already: it keeps no snapshot, and a file at the path is
/// not read.
#[test]
fn redb_keeps_no_snapshot() -> Res {
    let b = redb();
    let s = b.open()?;
    enrolled_by_batch_one(s.as_ref())?;
    let path = b.0.path().join("shares.snapshot");
    let db = full_load(s.as_ref())?;
    assert!(matches!(
        snapshot::write(&path, s.as_ref(), || &db),
        Err(SnapshotError::Unsupported)
    ));
    std::fs::write(&path, b"anything")?;
    let (loaded, report) = share_db_logged(s.as_ref(), Some(&path))?;
    assert_eq!(report.snapshot, None);
    assert_same_db(&loaded, &db);
    Ok(())
}

/// A deletion is scrubbed from the snapshot: the entry's bytes are gone from the file, and the
/// load still gives the store's database.
#[test]
fn postgres_deleted_entries_are_scrubbed_from_the_snapshot() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    let (s, at_one, _dir, path) = at_batch_one(&pg)?;
    snapshot::write(&path, s.as_ref(), || &at_one)?;
    let entry = |serial: u64| {
        let mut e = vec![0u8; ENTRY_BYTES];
        at_one.entry_le_bytes(at_one.row_of(SerialId(serial)).unwrap(), &mut e);
        e
    };
    let (gone, kept) = (entry(10), entry(11));
    let holds = |e: &[u8]| -> Res<bool> {
        Ok(std::fs::read(&path)?
            .windows(e.len())
            .step_by(8)
            .any(|w| w == e))
    };
    assert!(holds(&gone)? && holds(&kept)?);
    let mut w = logged_batch(2, b"commit 2", 201);
    w.shares.push((SerialId(10), ShareWrite::Delete));
    s.apply_batch(&w)?;
    assert_eq!(snapshot::scrub(&path, &[10, 9_999])?, 1);
    assert!(!holds(&gone)? && holds(&kept)?);
    let (db, report) = share_db_logged(s.as_ref(), Some(&path))?;
    assert_eq!(report.snapshot.map(|l| l.from_snapshot), Some(199));
    assert_same_db(&db, &full_load(s.as_ref())?);
    Ok(())
}

/// A snapshot abandoned part way (the node stopping) leaves no file behind, and neither does
/// one whose store fails.
#[test]
fn postgres_abandoned_snapshot_leaves_no_file() -> Res {
    let Some(pg) = Pg::new() else { return Ok(()) };
    let (s, at_one, dir, path) = at_batch_one(&pg)?;
    let asked = std::sync::atomic::AtomicU32::new(0);
    let abandoned = snapshot::write_pending(&path, s.as_ref(), || &at_one, &|| {
        asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 2
    });
    assert!(matches!(abandoned, Err(SnapshotError::Cancelled { .. })));
    let mut ahead = full_load(s.as_ref())?;
    ahead.set_applied_batch(9);
    assert!(snapshot::write(&path, s.as_ref(), || &ahead).is_err());
    assert_eq!(std::fs::read_dir(dir.path())?.count(), 0, "a file was left");
    Ok(())
}

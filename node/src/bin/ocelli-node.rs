//! `ocelli-node`: `keygen`, `serve`, `demo`, `local-cluster`, `submit`,
//! `bench`, `migrate-store`, `allow-recovery`, `recover`. Only parses arguments and config
//! and sets up logging; everything else lives in the library.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ocelli_node::config::NodeConfig;
use ocelli_node::keys::{keygen, write_hybrid_key, KeygenOptions};
use ocelli_node::node::NodeState;
use ocelli_node::server::{self, Listeners};
use sdk_orb::PartyId;

#[derive(Debug, Parser)]
#[command(name = "ocelli-node", version, about = "The ocelli verifier node")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a CA, node certificates and keys, an orb key, the public key
    /// bundle and three node configs for a local deployment.
    Keygen {
        /// Output directory.
        #[arg(long, default_value = "ocelli-keys")]
        out: PathBuf,
        /// Subject alternative names of the node certificates.
        #[arg(long = "host", default_values_t = ["localhost".to_owned(), "127.0.0.1".to_owned()])]
        hosts: Vec<String>,
        /// First port of the generated configs.
        #[arg(long, default_value_t = 50050)]
        base_port: u16,
        /// Overwrite existing files.
        #[arg(long)]
        force: bool,
    },
    /// Create one node's X-Wing HPKE key (envelope version 2) for a key directory from before
    /// version 2: writes OUT.key (the seed, hex, mode 0600) and OUT.pub (hex).
    HybridKeygen {
        /// Path without extension, e.g. `keys/party0/hpke-hybrid`.
        #[arg(long)]
        out: PathBuf,
        /// Overwrite existing files.
        #[arg(long)]
        force: bool,
    },
    /// Three nodes on this machine (embedded stores, real TLS): enrol
    /// synthetic people, then submit new people, re-captures and mirrored
    /// re-captures, and print what the matching decided.
    Demo {
        /// People to enrol.
        #[arg(long, default_value_t = 2000)]
        people: usize,
        /// Requests afterwards, half new people and half re-captures.
        #[arg(long, default_value_t = 200)]
        probes: usize,
        /// Deployment directory to use and keep (default: a temporary one).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Seed of the synthetic irises.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Leave the distance statistics off (to measure what they cost).
        #[arg(long)]
        no_stats: bool,
        /// Print the closing table as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Three nodes on this machine in the foreground until Ctrl-C; keys,
    /// configs and stores in DIR (created if absent, reused after).
    LocalCluster {
        /// Deployment directory.
        #[arg(long)]
        dir: PathBuf,
        /// Keep the three stores on this PostgreSQL server, one schema per node
        /// (`party0`..`party2`), instead of redb files; applies when DIR is created.
        #[arg(long, value_name = "URL")]
        postgres: Option<String>,
    },
    /// Copy a node's store (stopped) from redb into an empty PostgreSQL schema
    /// and verify the copy (fingerprint and summary equal).
    MigrateStore {
        /// Source: `redb:DATA_DIR` (the node's `data_dir`).
        #[arg(long)]
        from: String,
        /// Destination: a `postgres://` URL.
        #[arg(long)]
        to: String,
        /// Destination schema (the node's `store.schema`).
        #[arg(long, default_value = "ocelli")]
        schema: String,
        /// The server's CA certificate (PEM): TLS 1.3, certificate and host name verified
        /// (the node's `store.tls_ca`). Without it only a loopback host or unix socket is
        /// reached, unless `--no-tls` is given.
        #[arg(long, conflicts_with = "no_tls")]
        tls_ca: Option<PathBuf>,
        /// Plaintext to any host (the node's `store.tls = "disable"`).
        #[arg(long)]
        no_tls: bool,
    },
    /// An orb simulator: seal two open-iris templates into an envelope, submit
    /// it to the three nodes of a local cluster, verify the three signed
    /// results agree, and print one JSON object.
    Submit {
        /// Deployment directory of the running `local-cluster`.
        #[arg(long)]
        dir: PathBuf,
        /// Left-eye template (open-iris JSON).
        #[arg(long)]
        left: PathBuf,
        /// Right-eye template (open-iris JSON).
        #[arg(long)]
        right: PathBuf,
        /// Request type: uniqueness, check, deletion, reauth or reset.
        #[arg(long = "type", value_parser = parse_request_type, default_value = "uniqueness")]
        request_type: sdk_orb::RequestType,
        /// Target serial id (deletion, reauth, reset).
        #[arg(long)]
        serial_id: Option<u64>,
        /// A match of either eye suffices.
        #[arg(long)]
        or_policy: bool,
        /// An enrolled serial id to compare with under the OR rule (uniqueness requests and
        /// checks; repeat, at most 64).
        #[arg(long = "or-serial-id")]
        or_serial_ids: Vec<u64>,
    },
    /// Measure the matching pipeline: dot products, comparisons, the whole
    /// pipeline, a plaintext matcher and the multiply-add peak, in one run.
    Bench {
        /// Enrolled people in the run [default: 2048 on the CPU, 100000 on the GPU].
        #[arg(long)]
        db: Option<usize>,
        /// Queries (people) per batch [default: 4 on the CPU, 32 on the GPU].
        #[arg(long)]
        queries: Option<usize>,
        /// The dot-product engine. `gpu` runs the three parties on one GPU, each with its
        /// own engine and resident database (a build with the `gpu` feature).
        #[arg(long, default_value = "cpu")]
        engine: ocelli_node::config::EngineKind,
        /// The CPU kernel: avx512-vnni, avx2 or scalar [default: the fastest this CPU has].
        #[arg(long, value_parser = parse_kernel)]
        kernel: Option<ocelli_cpu::Kernel>,
        /// CUDA devices for `--engine gpu`, comma-separated; each party's database is sharded
        /// across them.
        #[arg(long, value_delimiter = ',', default_value = "0")]
        devices: Vec<usize>,
        /// Enrolled people in the GPU whole-pipeline run, whose comparison phase runs on
        /// the host's CPU threads.
        #[arg(long, default_value_t = 20_000)]
        pipeline_db: usize,
        /// Instead of timing, check what the engines and the comparison phase compute:
        /// sampled products, their match bits and whole-pipeline decisions reconstructed
        /// from the three parties' shares against the plaintext reference (synthetic
        /// people). Exits non-zero on any difference.
        #[arg(long)]
        self_check: bool,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Allow another node to recover its lost store from this one: writes an allowance into
    /// this node's data directory, read by the running node at every recovery call. Run it on
    /// both helpers before `recover` on the lost node. Replaces an earlier allowance; deleting
    /// the file revokes it.
    AllowRecovery {
        /// This node's TOML config file.
        #[arg(long)]
        config: PathBuf,
        /// The party that lost its store: 0, 1 or 2.
        #[arg(long, value_parser = parse_party)]
        party: PartyId,
        /// How long the allowance lasts (at most a day).
        #[arg(long)]
        minutes: u64,
        /// Recovery sessions it allows (a recovery takes one; a failed one another).
        #[arg(long, default_value_t = 1)]
        sessions: u32,
    },
    /// Recover this node's lost store from the two other nodes (which must be running, each
    /// with an allowance from `allow-recovery`): its shares (each helper sends a masked
    /// Lagrange term; only this node learns its share), the enrolled serial ids and the
    /// counters. The store must be empty; run with the node stopped, then start it with `serve`.
    Recover {
        /// The node's TOML config file.
        #[arg(long)]
        config: PathBuf,
    },
    /// Start-up at scale (a build with the `test-support` feature): `fill` writes synthetic
    /// people into an empty store, `load` opens it as `serve` does and times the load.
    #[cfg(feature = "test-support")]
    BenchStartup {
        #[command(subcommand)]
        step: StartupStep,
    },
    /// Print the distance statistics a period opened, from this node's store (the three nodes
    /// store the same): the histograms and the false match and non-match rates.
    Stats {
        /// The node's TOML config file.
        #[arg(long)]
        config: PathBuf,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// This period rather than the latest.
        #[arg(long)]
        period: Option<u64>,
    },
    /// Run a node.
    Serve {
        /// TOML config file (OCELLI_* environment variables override it).
        #[arg(long)]
        config: PathBuf,
        /// Log as JSON lines (`OCELLI_LOG_JSON` takes 1/0, true/false, yes/no, on/off).
        #[arg(
            long,
            env = "OCELLI_LOG_JSON",
            action = clap::ArgAction::SetTrue,
            value_parser = clap::builder::BoolishValueParser::new()
        )]
        json_logs: bool,
    },
}

/// Where `bench-startup` finds the store.
#[cfg(feature = "test-support")]
#[derive(Debug, clap::Args)]
struct StoreArgs {
    /// A redb store in this data directory.
    #[arg(
        long,
        required_unless_present = "postgres",
        conflicts_with = "postgres"
    )]
    dir: Option<PathBuf>,
    /// A PostgreSQL store on this server (plaintext: loopback or a unix socket only).
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// The PostgreSQL schema.
    #[arg(long, default_value = "ocelli")]
    schema: String,
}

#[cfg(feature = "test-support")]
#[derive(Debug, Subcommand)]
enum StartupStep {
    /// Enrol synthetic people (random share bytes, serial ids 1..=N, batches of 1,000) into
    /// an empty store; refuses a store that holds anything.
    Fill {
        #[command(flatten)]
        store: StoreArgs,
        /// People to enrol.
        #[arg(long)]
        people: u64,
        /// Seed of the share bytes.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Open the store and load the share database as `serve` does; print one JSON object:
    /// the load time and rate, the time from process start to loaded, and the load time
    /// projected to 18 million people at the measured rate.
    Load {
        #[command(flatten)]
        store: StoreArgs,
        /// Load as before the preallocated path: each entry copied out, decoded and inserted
        /// on its own (the reference, for comparison).
        #[arg(long, conflicts_with = "snapshot")]
        one_by_one: bool,
        /// Load through the share snapshot at this path, as `serve` does with
        /// `store.snapshot`; written first (from a load of the store) where the file is absent.
        #[arg(long, value_name = "FILE")]
        snapshot: Option<PathBuf>,
    },
}

#[cfg(feature = "test-support")]
fn bench_startup(step: StartupStep, started: std::time::Instant) -> ExitCode {
    use ocelli_node::store::postgres::{check_plaintext_is_local, PgOptions, PgStore, PgTls};
    use ocelli_node::store::{redb::RedbStore, Store};
    use rand_chacha::rand_core::SeedableRng;
    use std::sync::Arc;

    const PROJECTED_PEOPLE: f64 = 18e6;
    init_logging(false);
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let open = |a: &StoreArgs| -> Result<Arc<dyn Store>, Box<dyn std::error::Error>> {
        Ok(match (&a.dir, &a.postgres) {
            (Some(dir), _) => Arc::new(RedbStore::open(dir)?),
            (None, Some(url)) => {
                check_plaintext_is_local(url)?;
                let opts = PgOptions {
                    url: url.clone(),
                    schema: a.schema.clone(),
                    // A connection per core, as the load reads a range on each.
                    pool_size: std::thread::available_parallelism().map_or(1, |n| n.get()),
                    tls: PgTls::Disable,
                };
                Arc::new(PgStore::open(&opts, rt.handle().clone())?)
            }
            (None, None) => return Err("--dir or --postgres".into()),
        })
    };
    let result: Result<(), Box<dyn std::error::Error>> = match step {
        StartupStep::Fill {
            store,
            people,
            seed,
        } => (|| {
            let s = open(&store)?;
            let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
            let t = std::time::Instant::now();
            let mut last = std::time::Instant::now();
            ocelli_node::store::synthetic::fill(s.as_ref(), people, &mut rng, &mut |n| {
                if last.elapsed().as_secs() >= 5 || n == people {
                    last = std::time::Instant::now();
                    eprintln!(
                        "fill: {n}/{people} people, {:.0} people/s",
                        n as f64 / t.elapsed().as_secs_f64()
                    );
                }
            })?;
            println!(
                "{}",
                serde_json::json!({
                    "people": people,
                    "fill_s": t.elapsed().as_secs_f64(),
                    "store_bytes": s.size_bytes(),
                })
            );
            Ok(())
        })(),
        StartupStep::Load {
            store,
            one_by_one,
            snapshot,
        } => (|| {
            let mut from_snapshot = None;
            let t = std::time::Instant::now();
            let s = open(&store)?;
            let open_s = t.elapsed().as_secs_f64();
            let (db, took) = if one_by_one {
                let t = std::time::Instant::now();
                let db = ocelli_node::store::synthetic::share_db_one_by_one(s.as_ref())?;
                (db, t.elapsed())
            } else {
                let path = snapshot.as_deref();
                if let (Some(path), false) = (path, path.is_some_and(std::path::Path::exists)) {
                    let (db, _) = ocelli_node::store::load::share_db_logged(s.as_ref(), None)?;
                    let w = ocelli_node::store::snapshot::write(path, s.as_ref(), || &db)?;
                    eprintln!(
                        "snapshot: {} entries at batch {}, {:.1} s",
                        w.entries, w.batch, w.seconds
                    );
                }
                let (db, report) = ocelli_node::store::load::share_db_logged(s.as_ref(), path)?;
                from_snapshot = report.snapshot.map(|l| l.from_snapshot);
                (db, report.took)
            };
            let to_loaded_s = started.elapsed().as_secs_f64();
            let load_s = took.as_secs_f64();
            let rate = db.len() as f64 / load_s.max(1e-9);
            println!(
                "{}",
                serde_json::json!({
                    "people": db.len(),
                    "from_snapshot": from_snapshot,
                    "open_s": open_s,
                    "load_s": load_s,
                    "process_start_to_loaded_s": to_loaded_s,
                    "people_per_s": rate.round(),
                    "mib_per_s": (rate * ocelli_node::shares::ENTRY_BYTES as f64 / 1048576.0).round(),
                    "projected_18m_load_s": (PROJECTED_PEOPLE / rate.max(1e-9)).round(),
                })
            );
            Ok(())
        })(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-startup failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse_request_type(name: &str) -> Result<sdk_orb::RequestType, String> {
    sdk_orb::RequestType::from_name(name).ok_or_else(|| {
        format!(
            "unknown request type {name:?}: one of {}",
            sdk_orb::RequestType::NAMES.join(", ")
        )
    })
}

fn parse_party(id: &str) -> Result<PartyId, String> {
    id.parse::<u8>()
        .ok()
        .and_then(|id| PartyId::try_from(id).ok())
        .ok_or_else(|| format!("{id:?} is not a party id: 0, 1 or 2"))
}

fn parse_kernel(name: &str) -> Result<ocelli_cpu::Kernel, ocelli_cpu::CpuError> {
    ocelli_cpu::Kernel::by_name(name)
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("cannot start the runtime: {e}");
            ExitCode::FAILURE
        })
}

/// Runs `f` on a fresh runtime; prints an error and fails if it fails.
fn run_async<F>(f: F) -> ExitCode
where
    F: std::future::Future<Output = Result<(), Box<dyn std::error::Error + Send + Sync>>>,
{
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match rt.block_on(f) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("OCELLI_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour codes only on a terminal: not in a log file or the journal.
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if json {
        b.json().init();
    } else {
        b.init();
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                _ = t.recv() => tracing::info!("SIGTERM received"),
                _ = i.recv() => tracing::info!("SIGINT received"),
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn main() -> ExitCode {
    #[cfg(feature = "test-support")]
    let started = std::time::Instant::now();
    ocelli_os::tune_malloc();
    // Every connection, MPC link and store file takes a descriptor; a soft limit of 1,024 left
    // below a far higher hard one would run out first.
    let open_files = ocelli_os::raise_open_files_limit();
    let cli = Cli::parse();
    match cli.command {
        Command::Keygen {
            out,
            hosts,
            base_port,
            force,
        } => {
            let opts = KeygenOptions {
                out_dir: out.clone(),
                hosts,
                base_port,
                force,
            };
            match keygen(&opts) {
                Ok(_) => {
                    println!(
                        "wrote keys, certificates and party0.toml..party2.toml to {}",
                        out.display()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("keygen failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::HybridKeygen { out, force } => match write_hybrid_key(&out, force) {
            Ok(_) => {
                println!(
                    "wrote {} and {}; set keys.hpke_hybrid_secret to the first",
                    out.with_extension("key").display(),
                    out.with_extension("pub").display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("hybrid-keygen failed: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Demo {
            people,
            probes,
            dir,
            seed,
            no_stats,
            json,
        } => {
            init_quiet_logging();
            run_async(async move {
                let opts = ocelli_node::demo::DemoOptions {
                    people,
                    probes,
                    dir,
                    seed,
                    progress: !json,
                    stats: !no_stats,
                    ..Default::default()
                };
                eprintln!(
                    "ocelli demo: three nodes on 127.0.0.1 (embedded stores, mutual TLS), \
                     {people} people to enrol, then {probes} requests (new people, re-captures and \
                     mirrored re-captures)"
                );
                if opts.stats {
                    eprintln!(
                        "distance statistics: one period over the whole demo \
                         (stats.period_batches out of reach while it runs); the nodes then \
                         restart with a period of one batch and one closing request's batch \
                         opens it, with epsilon {} (synthetic people; a deployment's default is \
                         1, whose noise buries a demo's few hundred pairs)",
                        ocelli_node::demo::DEMO_EPSILON
                    );
                }
                let report = ocelli_node::demo::run(&opts).await?;
                if json {
                    println!("{}", serde_json::to_string(&report)?);
                } else {
                    println!("{report}");
                }
                if let Some(h) = &report.stats {
                    let svg = match &opts.dir {
                        Some(d) => d.join("distance-histograms.svg"),
                        None => PathBuf::from("ocelli-demo-histograms.svg"),
                    };
                    std::fs::write(&svg, ocelli_node::stats::report::svg(h))?;
                    if !json {
                        print!("{}", ocelli_node::stats::show::text(h));
                    }
                    eprintln!("histograms drawn in {}", svg.display());
                } else if opts.stats {
                    return Err("the demo's statistics period did not open".into());
                }
                Ok(())
            })
        }
        Command::LocalCluster { dir, postgres } => {
            init_logging(false);
            run_async(async move {
                let tweak = |t: &mut toml::Table| {
                    if let Some(url) = &postgres {
                        let party = t
                            .get("party_id")
                            .cloned()
                            .and_then(|id| id.try_into::<PartyId>().ok())
                            .unwrap_or(PartyId::ALL[0]);
                        let mut store = toml::Table::new();
                        store.insert("url".into(), url.clone().into());
                        store.insert("schema".into(), ocelli_node::keys::party_dir(party).into());
                        t.insert("store".into(), store.into());
                    }
                };
                let (deployment, listeners) =
                    ocelli_node::cluster::Deployment::open_or_create(&dir, &tweak).await?;
                let cluster =
                    ocelli_node::cluster::LocalCluster::start(&deployment, listeners).await?;
                for cfg in &deployment.configs {
                    eprintln!("{}: orb API on {}", cfg.party_id, cfg.listen.orb);
                }
                eprintln!(
                    "three nodes running from {}; Ctrl-C stops them",
                    dir.display()
                );
                shutdown_signal().await;
                cluster.shutdown().await
            })
        }
        Command::MigrateStore {
            from,
            to,
            schema,
            tls_ca,
            no_tls,
        } => {
            use ocelli_node::store::postgres::{check_plaintext_is_local, PgOptions, PgTls};
            init_logging(false);
            let Some(path) = from.strip_prefix("redb:") else {
                eprintln!("error: --from must be redb:DATA_DIR");
                return ExitCode::FAILURE;
            };
            if tls_ca.is_none() && !no_tls {
                if let Err(e) = check_plaintext_is_local(&to) {
                    eprintln!("error: {e} (here: --tls-ca or --no-tls)");
                    return ExitCode::FAILURE;
                }
            }
            let opts = PgOptions {
                url: to,
                schema,
                pool_size: 2,
                tls: tls_ca.map_or(PgTls::Disable, |ca| PgTls::Require { ca }),
            };
            let rt = match runtime() {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            let from = std::path::Path::new(path);
            match ocelli_node::store::migrate::redb_to_postgres(from, &opts, rt.handle().clone()) {
                Ok(r) => {
                    println!(
                        "copied {} requests, {} enrolled entries, {} batches in {:.1} s; \
                         verified: fingerprint {} and summary equal",
                        r.requests,
                        r.shares,
                        r.batches,
                        r.seconds,
                        hex::encode(r.fingerprint)
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("migrate-store failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Submit {
            dir,
            left,
            right,
            request_type,
            serial_id,
            or_policy,
            mut or_serial_ids,
        } => {
            or_serial_ids.sort_unstable();
            or_serial_ids.dedup();
            let request = SubmitArgs {
                request_type,
                serial_id,
                or_policy,
                or_serial_ids,
            };
            run_async(submit(dir, left, right, request))
        }
        Command::Bench {
            db,
            queries,
            engine,
            kernel,
            devices,
            pipeline_db,
            self_check,
            json,
        } => {
            let progress = |what: &str| {
                if !json {
                    eprintln!("measuring: {what}");
                }
            };
            if self_check {
                return bench_self_check(engine, kernel, &devices, json, progress);
            }
            let printed: Result<(), Box<dyn std::error::Error>> = match engine {
                ocelli_node::config::EngineKind::Cpu => {
                    let config = ocelli_bench::BenchConfig {
                        db_entries: db.unwrap_or(2048),
                        queries: queries.unwrap_or(4),
                        kernel: kernel.unwrap_or_else(ocelli_cpu::Kernel::detect),
                        tune: !ocelli_cpu::tune::skipped_by_env(),
                    };
                    print_report(&ocelli_bench::run(config, progress), json).map_err(Into::into)
                }
                ocelli_node::config::EngineKind::Gpu => {
                    let config = ocelli_bench::device::DeviceBenchConfig {
                        db_entries: db.unwrap_or(100_000),
                        pipeline_entries: pipeline_db,
                        queries: queries.unwrap_or(32),
                        compare_comparisons: 1 << 22,
                        max_pass_comparisons: 1 << 24,
                    };
                    gpu_bench(config, &devices, progress)
                        .and_then(|report| print_report(&report, json).map_err(Into::into))
                }
            };
            match printed {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::AllowRecovery {
            config,
            party,
            minutes,
            sessions,
        } => match allow_recovery(&config, party, minutes, sessions) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("allow-recovery failed: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Recover { config } => run_async(recover(config)),
        Command::Stats {
            config,
            json,
            period,
        } => run_async(stats(config, json, period)),
        #[cfg(feature = "test-support")]
        Command::BenchStartup { step } => bench_startup(step, started),
        Command::Serve { config, json_logs } => {
            init_logging(json_logs);
            match open_files {
                Ok(l) => tracing::info!(before = l.before, now = l.now, "open-files limit"),
                Err(e) => tracing::warn!(error = %e, "could not raise the open-files limit"),
            }
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the runtime");
                    return ExitCode::FAILURE;
                }
            };
            match rt.block_on(serve(config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "node failed");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Warnings and errors only: the demo's own output is the progress and table.
fn init_quiet_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("OCELLI_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// What `submit` asks besides the two templates.
struct SubmitArgs {
    request_type: sdk_orb::RequestType,
    serial_id: Option<u64>,
    or_policy: bool,
    or_serial_ids: Vec<u64>,
}

async fn submit(
    dir: PathBuf,
    left: PathBuf,
    right: PathBuf,
    args: SubmitArgs,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let SubmitArgs {
        request_type,
        serial_id,
        or_policy,
        or_serial_ids,
    } = args;
    let policy = sdk_orb::TemplatePolicy::default();
    let load = |path: &PathBuf| -> Result<sdk_orb::IrisTemplate, TemplateFileError> {
        let bytes = std::fs::read(path).map_err(|source| TemplateFileError::Io {
            path: path.clone(),
            source,
        })?;
        sdk_orb::IrisTemplate::from_open_iris_json(&bytes, &policy).map_err(|source| {
            TemplateFileError::Template {
                path: path.clone(),
                source,
            }
        })
    };
    let (left, right) = (load(&left)?, load(&right)?);
    let deployment = ocelli_node::cluster::Deployment::open(&dir)?;
    let orb = deployment.orb()?;
    let meta = sdk_orb::RequestMeta {
        request_id: sdk_orb::RequestId::random(&mut rand_core::OsRng),
        request_type,
        timestamp_ms: ocelli_node::clock::now_ms(),
        serial_id: serial_id.unwrap_or(0),
        or_policy,
    };
    let envelope = orb.envelope(&mut rand_core::OsRng, &meta, &left, &right)?;
    orb.submit_naming(&envelope, &or_serial_ids).await?;
    let result = orb
        .result(&meta.request_id, std::time::Duration::from_secs(600))
        .await?;
    let status = shared_proto::v1::ResultStatus::try_from(result.status)
        .unwrap_or(shared_proto::v1::ResultStatus::Unspecified);
    let enrolled =
        (status == shared_proto::v1::ResultStatus::UniqueEnrolled).then_some(result.serial_id);
    let out = serde_json::json!({
        "request_id": meta.request_id.to_string(),
        "decision": ocelli_node::agreement::status_label(result.status),
        "matched_serial_ids": result.matched_serial_ids,
        "mirror_attack": result.mirror_attack,
        "enrolled_serial_id": enrolled,
        "serial_id": (result.serial_id != 0).then_some(result.serial_id),
        "detail": result.detail,
        "batch_id": result.batch_id,
    });
    println!("{out}");
    Ok(())
}

fn allow_recovery(
    path: &std::path::Path,
    party: PartyId,
    minutes: u64,
    sessions: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = NodeConfig::load(path)?;
    let valid_for = std::time::Duration::from_secs(minutes.saturating_mul(60));
    let a = ocelli_node::recovery::allow_recovery(&cfg, party, valid_for, sessions)?;
    let out = serde_json::json!({
        "party": cfg.party_id,
        "allowed_party": a.party,
        "expires_unix_ms": a.expires_ms,
        "sessions": a.sessions,
        "file": ocelli_node::recovery::allowance::allowance_path(&cfg),
    });
    println!("{out}");
    Ok(())
}

async fn recover(path: PathBuf) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let cfg = NodeConfig::load(&path)?;
    let store = {
        let cfg = cfg.clone();
        tokio::task::spawn_blocking(move || ocelli_node::node::open_store(&cfg)).await??
    };
    let r = ocelli_node::recovery::recover(&cfg, store).await?;
    let out = serde_json::json!({
        "party": cfg.party_id,
        "entries": r.entries,
        "last_applied_batch": r.last_applied_batch,
        "next_serial_id": r.next_serial,
        "bytes_per_helper": r.bytes_per_helper,
        "seconds": r.seconds,
    });
    println!("{out}");
    Ok(())
}

async fn stats(
    path: PathBuf,
    json: bool,
    period: Option<u64>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use ocelli_node::stats::show;
    let cfg = NodeConfig::load(&path)?;
    let opened = tokio::task::spawn_blocking(move || {
        ocelli_node::node::open_store(&cfg)?.opened_histograms(period)
    })
    .await??;
    let Some(h) = opened else {
        return Err(show::none_opened(period).into());
    };
    if json {
        println!("{}", show::json(&h));
    } else {
        print!("{}", show::text(&h));
    }
    Ok(())
}

async fn serve(path: PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = NodeConfig::load(&path)?;
    let listeners = Listeners::bind(&cfg.listen).await?;
    let evaluator = ocelli_node::matching::evaluator_for(&cfg)?;
    let state = tokio::task::spawn_blocking(move || NodeState::open(cfg, evaluator)).await??;
    server::run(state, listeners, shutdown_signal()).await?;
    Ok(())
}

/// A template file `submit` cannot use.
#[derive(Debug, thiserror::Error)]
enum TemplateFileError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Template {
        path: PathBuf,
        source: sdk_orb::TemplateError,
    },
}

fn print_report<R: serde::Serialize + std::fmt::Display>(
    report: &R,
    json: bool,
) -> Result<(), serde_json::Error> {
    if json {
        println!("{}", serde_json::to_string(report)?);
    } else {
        println!("{report}");
    }
    Ok(())
}

/// `bench --self-check`: the report, and failure unless it passed.
fn bench_self_check(
    engine: ocelli_node::config::EngineKind,
    kernel: Option<ocelli_cpu::Kernel>,
    devices: &[usize],
    json: bool,
    progress: impl FnMut(&str),
) -> ExitCode {
    use ocelli_bench::self_check::{self_check, SelfCheckConfig};
    let report = match engine {
        ocelli_node::config::EngineKind::Cpu => {
            let kernel = kernel.unwrap_or_else(ocelli_cpu::Kernel::detect);
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            ocelli_node::matching::cpu(Some(kernel), threads)
                .map_err(ocelli_bench::BenchError::from)
                .and_then(|cpu| {
                    self_check(
                        SelfCheckConfig::default(),
                        [&cpu, &cpu, &cpu],
                        &ocelli_bench::device::OnHost,
                        progress,
                    )
                })
                .map_err(Into::into)
        }
        ocelli_node::config::EngineKind::Gpu => gpu_self_check(devices, progress),
    };
    match report {
        Ok(report) => {
            if let Err(e) = print_report(&report, json) {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "gpu")]
fn gpu_self_check(
    devices: &[usize],
    progress: impl FnMut(&str),
) -> Result<ocelli_bench::self_check::SelfCheckReport, Box<dyn std::error::Error>> {
    Ok(ocelli_bench::self_check::self_check_gpu(devices, progress)?)
}

#[cfg(not(feature = "gpu"))]
fn gpu_self_check(
    _devices: &[usize],
    _progress: impl FnMut(&str),
) -> Result<ocelli_bench::self_check::SelfCheckReport, Box<dyn std::error::Error>> {
    Err(ocelli_node::matching::BuildError::GpuNotBuilt.into())
}

#[cfg(feature = "gpu")]
fn gpu_bench(
    config: ocelli_bench::device::DeviceBenchConfig,
    devices: &[usize],
    progress: impl FnMut(&str),
) -> Result<ocelli_bench::device::DeviceBenchReport, Box<dyn std::error::Error>> {
    Ok(ocelli_bench::device::run_gpu(config, devices, progress)?)
}

#[cfg(not(feature = "gpu"))]
fn gpu_bench(
    _config: ocelli_bench::device::DeviceBenchConfig,
    _devices: &[usize],
    _progress: impl FnMut(&str),
) -> Result<ocelli_bench::device::DeviceBenchReport, Box<dyn std::error::Error>> {
    Err(ocelli_node::matching::BuildError::GpuNotBuilt.into())
}

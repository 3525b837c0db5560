//! `ocelli-node bench --engine gpu`: the three parties in one process, sharing one
//! accelerator, each with its own engine and resident database, over the in-memory network.
//!
//! Rates are wall-clock and per party-accelerator: what one party does per second while the
//! three share the device, times three. The measuring is engine-agnostic (tests run it on CPU
//! engines and on the host-run kernels); only the engines, the comparison-phase kernels and
//! the GEMM probe are the GPU's.

use std::time::Instant;

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use sdk_orb::plaintext::{threshold_coefficient, DEFAULT_THRESHOLD};
use sdk_orb::rotation::ROTATION_COUNT;
use sdk_orb::shamir::PartyShares;
use sdk_orb::{CODE_COEFS, MASK_COEFS};

use crate::timing::{PassSeconds, PassTimers, TimedCircuit, TimedEngine};
use crate::BenchError;
use ocelli_device::{Arg, DeviceCircuit, KernelDevice};
use ocelli_mpc::backend::Backend;
use ocelli_mpc::circuit::Circuit;
use ocelli_mpc::compare::or_blocks;
use ocelli_mpc::db::MatchDb;
use ocelli_mpc::db::{Eye, Part};
use ocelli_mpc::local::{additive_u16, replays, run_one, run_three_wrapped, Link};
use ocelli_mpc::network::NetworkError;
use ocelli_mpc::pipeline::{evaluate, MatchResult, PipelineConfig, PipelineRequest};
use ocelli_mpc::scratch::ScratchPool;
use ocelli_mpc::session::Session;
use ocelli_mpc::synthetic::random_shares;
use sdk_orb::PartyId;

/// Sizes of a run.
#[derive(Clone, Copy, Debug)]
pub struct DeviceBenchConfig {
    /// Enrolled people in the dot-product phase (two irises each, one database shared by the
    /// three parties' engines, each with its own resident copy).
    pub db_entries: usize,
    /// Enrolled people in the whole-pipeline run (at most `db_entries`).
    pub pipeline_entries: usize,
    /// Queries (people, two irises each, 31 rotations).
    pub queries: usize,
    /// Comparisons in the comparison-phase run.
    pub compare_comparisons: usize,
    /// Comparisons per pipeline pass.
    pub max_pass_comparisons: usize,
}

/// The figures; rates in comparisons (one query rotation against one enrolled iris, code and
/// mask) per second per party-accelerator.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct DeviceBenchReport {
    /// The engine (device name).
    pub engine: String,
    /// Enrolled people in the dot-product phase.
    pub db_entries: usize,
    /// Enrolled people in the whole-pipeline run.
    pub pipeline_entries: usize,
    /// Queries.
    pub queries: usize,
    /// Seconds to make one party's database resident.
    pub load_seconds: f64,
    /// Dot-product phase: comparisons (a 12,800 and a 6,400 element product each), the
    /// batch's queries prepared once ([`Backend::prepare_queries`]) and every product
    /// brought to the host, as the pipeline's passes do.
    pub dot_per_party_device: f64,
    /// The same in 12,800-element products (1.5 per comparison).
    pub dot_12800_per_party_device: f64,
    /// Where the comparison phase ran.
    pub comparison_on: String,
    /// Comparison phase (split, lift, MSB, OR over rotations).
    pub compare_per_party_device: f64,
    /// Wall-clock seconds of the comparison-phase run.
    pub compare_seconds: f64,
    /// Of those, per party, the kernel device's calls, where it ran on one.
    pub compare_device_seconds: Option<DeviceTimes>,
    /// The comparison phase, each party alone on the device against the recording of a
    /// three-party run, the slowest of the three roles.
    pub compare_replay_per_party_device: f64,
    /// The fraction of the shared comparison-phase run the device was busy (event-timed
    /// calls, merged), where measured.
    pub compare_device_busy: Option<f64>,
    /// The whole pipeline of a batch, three parties sharing the device.
    pub pipeline_per_party_device: f64,
    /// The fraction of the shared pipeline run the device was busy, where measured.
    pub pipeline_device_busy: Option<f64>,
    /// The whole pipeline, each party alone on the device against the recording of a
    /// three-party run, the slowest of the three roles: what one party-device does once its
    /// peers' messages are at hand.
    pub pipeline_replay_per_party_device: f64,
    /// Where each role's replayed pipeline run spent its time (party 0, 1, 2).
    pub pipeline_replay_passes: [PassSeconds; 3],
    /// Int8 operations per second the GEMMs sustain on device-resident operands.
    pub gemm_ops_per_second: f64,
    /// The device's data-sheet dense int8 peak, where known.
    pub int8_peak: Option<f64>,
    /// `gemm_ops_per_second / int8_peak`.
    pub gemm_peak_fraction: Option<f64>,
    /// The dot-product phase's int8 operations (3 GEMMs per product) over the peak.
    pub dot_peak_fraction: Option<f64>,
    /// Bytes each party sends per comparison.
    pub bytes_per_comparison: f64,
    /// Link each party needs for 10 requests per second against 10 million people, Gbit/s.
    pub link_gbit_10rps_10m: f64,
}

impl std::fmt::Display for DeviceBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = |x: f64| format!("{:.3} G/s", x / 1e9);
        let pct = |x: Option<f64>| x.map_or("n/a".to_owned(), |x| format!("{:.0} %", x * 100.0));
        writeln!(
            f,
            "{}: {} enrolled ({} in the pipeline run), {} queries; per party-device, three \
             parties sharing it",
            self.engine, self.db_entries, self.pipeline_entries, self.queries
        )?;
        writeln!(
            f,
            "  database resident   {:>12.2} s per party",
            self.load_seconds
        )?;
        writeln!(
            f,
            "  dot-product phase   {:>12} comparisons ({} 12,800-element products)",
            g(self.dot_per_party_device),
            g(self.dot_12800_per_party_device)
        )?;
        writeln!(
            f,
            "  comparison phase    {:>12} (on {}; device busy {})",
            g(self.compare_per_party_device),
            self.comparison_on,
            pct(self.compare_device_busy)
        )?;
        if let Some(t) = self.compare_device_seconds {
            writeln!(
                f,
                "    of its {:.3} s per party: allocations {:.3} s, uploads {:.3} s, launches \
                 {:.3} s, downloads with the wait for the device {:.3} s",
                self.compare_seconds, t.alloc, t.upload, t.launch, t.download
            )?;
        }
        writeln!(
            f,
            "    each party alone  {:>12} (the slowest role, replayed)",
            g(self.compare_replay_per_party_device)
        )?;
        writeln!(
            f,
            "  whole pipeline      {:>12} (device busy {})",
            g(self.pipeline_per_party_device),
            pct(self.pipeline_device_busy)
        )?;
        writeln!(
            f,
            "    each party alone  {:>12} (the slowest role, replayed)",
            g(self.pipeline_replay_per_party_device)
        )?;
        for (i, p) in self.pipeline_replay_passes.iter().enumerate() {
            writeln!(
                f,
                "    party {i}: {:.3} s: dot {:.3}, layout {:.3}, compare {:.3}, open {:.3}, \
                 other {:.3}",
                p.wall, p.dot, p.layout, p.compare, p.open, p.other
            )?;
        }
        writeln!(
            f,
            "  int8 GEMMs          {:>9.0} T op/s, {} of the data-sheet peak; dot phase at {}",
            self.gemm_ops_per_second / 1e12,
            pct(self.gemm_peak_fraction),
            pct(self.dot_peak_fraction)
        )?;
        write!(
            f,
            "  sent per comparison {:>9.1} bytes per party: {:.0} Gbit/s per party for 10 \
             requests/s against 10 M people",
            self.bytes_per_comparison, self.link_gbit_10rps_10m
        )
    }
}

/// A device-busy measure over a stretch of wall time: the GPU's
/// `ocelli_gpu::BusyClock` (feature `gpu`), event-timed.
pub trait BusyMeter: Sync {
    /// Starts a stretch.
    fn start(&self);
    /// Ends it: the busy fraction of `wall_seconds`, where measured.
    fn stop(&self, wall_seconds: f64) -> Option<f64>;
}

#[cfg(feature = "gpu")]
impl BusyMeter for ocelli_gpu::BusyClock {
    fn start(&self) {
        // A clock that cannot start reports no figure at its stop.
        let _ = ocelli_gpu::BusyClock::start(self);
    }

    fn stop(&self, wall_seconds: f64) -> Option<f64> {
        ocelli_gpu::BusyClock::stop(self, wall_seconds)
    }
}

/// Int8 operations per comparison: three GEMMs over 12,800 + 6,400 elements, two per MAC.
const INT8_OPS_PER_COMPARISON: f64 = (3 * 2 * (CODE_COEFS + MASK_COEFS)) as f64;

/// Where the three parties run their comparison phase.
pub trait ComparisonPlace: Sync {
    /// For the report.
    fn label(&self) -> String;

    /// The session's party's match bits and their OR over rotations.
    ///
    /// # Errors
    /// Transport failures.
    fn compare(
        &self,
        session: &mut Session<'_, Link>,
        cd: &[u16],
        md: &[u16],
        a: u32,
    ) -> Result<(), NetworkError>;

    /// Where the kernel device's calls spent time since [`ComparisonPlace::reset_times`],
    /// per party; `None` off a kernel device.
    fn device_times(&self) -> Option<DeviceTimes> {
        None
    }

    /// Starts [`ComparisonPlace::device_times`] afresh.
    fn reset_times(&self) {}

    /// The session's party's pipeline for one batch.
    ///
    /// # Errors
    /// Transport failures.
    fn evaluate<B: Backend>(
        &self,
        session: &mut Session<'_, Link>,
        engine: &B,
        party: PartyData<'_>,
        requests: &[PipelineRequest<'_>],
        config: &PipelineConfig,
        timers: &PassTimers,
    ) -> Result<Vec<MatchResult>, NetworkError>;

    /// The session's party's match bits of `(cd, md)`, opened (one plane).
    ///
    /// # Errors
    /// Transport failures.
    fn open_match_bits(
        &self,
        session: &mut Session<'_, Link>,
        cd: &[u16],
        md: &[u16],
        a: u32,
    ) -> Result<Vec<u64>, NetworkError>;
}

/// What a party brings to a batch besides its engine: its shares of the database, and the
/// pool its batches' buffers come from and return to.
#[derive(Clone, Copy, Debug)]
pub struct PartyData<'a> {
    /// The party's shares of the enrolled people.
    pub db: &'a MatchDb,
    /// Kept across the party's batches, as a node keeps it.
    pub scratch: &'a ScratchPool,
}

/// [`evaluate`] on `circuit` and `engine`, their calls timed into `timers`.
fn evaluate_timed<C: Circuit, B: Backend>(
    circuit: &mut C,
    engine: &B,
    party: PartyData<'_>,
    requests: &[PipelineRequest<'_>],
    config: &PipelineConfig,
    timers: &PassTimers,
) -> Result<Vec<MatchResult>, NetworkError> {
    let engine = TimedEngine::new(engine, timers);
    evaluate(
        &mut TimedCircuit::new(circuit, timers),
        &engine,
        party.db,
        requests,
        config,
        party.scratch,
    )
}

fn opened_match_bits<C: Circuit>(
    circuit: &mut C,
    cd: &[u16],
    md: &[u16],
    a: u32,
) -> Result<Vec<u64>, NetworkError> {
    let bits = circuit.match_bits(cd, md, a)?;
    circuit.open(&bits)
}

fn compare_and_or<C: Circuit>(
    circuit: &mut C,
    cd: &[u16],
    md: &[u16],
    a: u32,
) -> Result<(), NetworkError> {
    let bits = circuit.match_bits(cd, md, a)?;
    or_blocks(circuit, &bits, ROTATION_COUNT).map(drop)
}

/// The comparison phase on the host's CPU threads.
#[derive(Debug)]
pub struct OnHost;

impl ComparisonPlace for OnHost {
    fn label(&self) -> String {
        "host CPU threads".into()
    }

    fn compare(
        &self,
        session: &mut Session<'_, Link>,
        cd: &[u16],
        md: &[u16],
        a: u32,
    ) -> Result<(), NetworkError> {
        compare_and_or(session, cd, md, a)
    }

    fn evaluate<B: Backend>(
        &self,
        session: &mut Session<'_, Link>,
        engine: &B,
        party: PartyData<'_>,
        requests: &[PipelineRequest<'_>],
        config: &PipelineConfig,
        timers: &PassTimers,
    ) -> Result<Vec<MatchResult>, NetworkError> {
        evaluate_timed(session, engine, party, requests, config, timers)
    }

    fn open_match_bits(
        &self,
        session: &mut Session<'_, Link>,
        cd: &[u16],
        md: &[u16],
        a: u32,
    ) -> Result<Vec<u64>, NetworkError> {
        opened_match_bits(session, cd, md, a)
    }
}

/// Seconds a party's kernel device spent in each kind of call, averaged over the parties.
/// Launches only enqueue; a download waits for every launch before it, so the device's
/// own work shows there.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct DeviceTimes {
    /// Allocations (zeroed).
    pub alloc: f64,
    /// Copies to the device.
    pub upload: f64,
    /// Kernel launches (enqueueing).
    pub launch: f64,
    /// Copies to the host, with the wait for the launches before them.
    pub download: f64,
}

/// A kernel device that times its calls ([`DeviceTimes`]).
#[derive(Debug)]
pub struct Timed<D: KernelDevice> {
    inner: std::sync::Arc<D>,
    /// Nanoseconds, indexed by [`ALLOC`], [`UPLOAD`], [`LAUNCH`] and [`DOWNLOAD`].
    nanos: [std::sync::atomic::AtomicU64; 4],
}

const ALLOC: usize = 0;
const UPLOAD: usize = 1;
const LAUNCH: usize = 2;
const DOWNLOAD: usize = 3;

impl<D: KernelDevice> Timed<D> {
    /// Times the calls made to `inner` through this.
    pub fn new(inner: std::sync::Arc<D>) -> Self {
        Timed {
            inner,
            nanos: Default::default(),
        }
    }

    fn timed<R>(&self, what: usize, f: impl FnOnce() -> R) -> R {
        let started = Instant::now();
        let r = f();
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.nanos[what].fetch_add(nanos, std::sync::atomic::Ordering::Relaxed);
        r
    }

    fn seconds(&self, what: usize) -> f64 {
        self.nanos[what].load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e9
    }

    fn reset(&self) {
        for n in &self.nanos {
            n.store(0, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl<D: KernelDevice> KernelDevice for Timed<D> {
    type Buf = D::Buf;

    fn alloc_zeroed(&self, bytes: usize) -> D::Buf {
        self.timed(ALLOC, || self.inner.alloc_zeroed(bytes))
    }

    fn upload(&self, bytes: &[u8]) -> D::Buf {
        self.timed(UPLOAD, || self.inner.upload(bytes))
    }

    fn launch(&self, kernel: &'static str, grid: (u32, u32), block: u32, args: &[Arg<'_, D::Buf>]) {
        self.timed(LAUNCH, || self.inner.launch(kernel, grid, block, args));
    }

    fn download(&self, buf: &D::Buf, offset: usize, out: &mut [u8]) {
        self.timed(DOWNLOAD, || self.inner.download(buf, offset, out));
    }
}

/// The comparison phase on kernel devices, one per party, each call timed.
#[derive(Debug)]
pub struct OnDevices<D: KernelDevice> {
    devices: [std::sync::Arc<Timed<D>>; 3],
    label: String,
}

impl<D: KernelDevice> OnDevices<D> {
    /// Party `i` on `devices[i]`; `label` names the place in the report.
    pub fn new(devices: [std::sync::Arc<D>; 3], label: String) -> Self {
        OnDevices {
            devices: devices.map(|d| std::sync::Arc::new(Timed::new(d))),
            label,
        }
    }
}

impl<D: KernelDevice> OnDevices<D> {
    fn device_of(&self, session: &Session<'_, Link>) -> std::sync::Arc<Timed<D>> {
        self.devices[session.party().index()].clone()
    }
}

impl<D: KernelDevice> ComparisonPlace for OnDevices<D> {
    fn label(&self) -> String {
        self.label.clone()
    }

    fn device_times(&self) -> Option<DeviceTimes> {
        let mean = |what: usize| self.devices.iter().map(|d| d.seconds(what)).sum::<f64>() / 3.0;
        Some(DeviceTimes {
            alloc: mean(ALLOC),
            upload: mean(UPLOAD),
            launch: mean(LAUNCH),
            download: mean(DOWNLOAD),
        })
    }

    fn reset_times(&self) {
        for d in &self.devices {
            d.reset();
        }
    }

    fn compare(
        &self,
        session: &mut Session<'_, Link>,
        cd: &[u16],
        md: &[u16],
        a: u32,
    ) -> Result<(), NetworkError> {
        compare_and_or(
            &mut DeviceCircuit::new(session, self.device_of(session)),
            cd,
            md,
            a,
        )
    }

    fn evaluate<B: Backend>(
        &self,
        session: &mut Session<'_, Link>,
        engine: &B,
        party: PartyData<'_>,
        requests: &[PipelineRequest<'_>],
        config: &PipelineConfig,
        timers: &PassTimers,
    ) -> Result<Vec<MatchResult>, NetworkError> {
        let mut circuit = DeviceCircuit::new(session, self.device_of(session));
        evaluate_timed(&mut circuit, engine, party, requests, config, timers)
    }

    fn open_match_bits(
        &self,
        session: &mut Session<'_, Link>,
        cd: &[u16],
        md: &[u16],
        a: u32,
    ) -> Result<Vec<u64>, NetworkError> {
        let mut circuit = DeviceCircuit::new(session, self.device_of(session));
        opened_match_bits(&mut circuit, cd, md, a)
    }
}

/// Runs `f` as the three parties over recording links, then each party alone against the
/// recording ([`ocelli_mpc::local::Replay`]: the peers' messages at hand, its own checked against
/// what it sent, bit for bit); the parts of each role's replayed run, timed by `f`.
///
/// # Errors
/// A run failed, or a replayed party sent what it had not sent in the recorded run.
fn replayed(
    seed: u64,
    f: impl Fn(&mut Session<'_, Link>, &PassTimers) -> Result<(), NetworkError> + Sync,
) -> Result<[PassSeconds; 3], BenchError> {
    let failed = |e: NetworkError| BenchError::Bench(e.to_string());
    let recorded = run_three_wrapped(seed, Link::recording, |s| f(s, &PassTimers::default()));
    let mut views = Vec::with_capacity(3);
    for (r, _, link) in recorded {
        r.map_err(failed)?;
        views.push(link.into_view());
    }
    let views: [_; 3] = views.try_into().expect("three parties");
    let mut out = [PassSeconds::default(); 3];
    for (i, replay) in replays(views).into_iter().enumerate() {
        let timers = PassTimers::default();
        let started = Instant::now();
        let (r, _, link) = run_one(seed, PartyId::ALL[i], Link::Replay(replay), |s| {
            f(s, &timers)
        });
        let wall = started.elapsed().as_secs_f64();
        r.map_err(failed)?;
        if !matches!(&link, Link::Replay(r) if r.finished()) {
            return Err(BenchError::Bench(format!(
                "party {i} replayed stopped before the recording's end"
            )));
        }
        out[i] = timers.seconds(wall);
    }
    Ok(out)
}

/// The slowest role's wall time.
fn slowest(roles: &[PassSeconds; 3]) -> f64 {
    roles.iter().map(|r| r.wall).fold(0.0, f64::max)
}

/// Runs the phases on `engines` (one per party, sharing a device), the comparison phase at
/// `place`; `peak` is the device's data-sheet int8 peak and `gemm_ops` the GEMM probe's
/// figure, where known.
pub fn run<B: Backend, P: ComparisonPlace>(
    config: DeviceBenchConfig,
    engines: [&B; 3],
    place: &P,
    (gemm_ops, peak): (f64, Option<f64>),
    busy: Option<&dyn BusyMeter>,
    mut progress: impl FnMut(&str),
) -> Result<DeviceBenchReport, BenchError> {
    let mut rng = ChaCha20Rng::seed_from_u64(2027);
    let n = config.db_entries.max(1);
    let q = config.queries.max(1);
    let rows = q * ROTATION_COUNT;

    progress("random shares");
    // Random shares cost the engines exactly what real ones do.
    let mut db = crate::advised_db();
    for d in 0..n {
        db.push(d as u64 + 1, &random_shares(&mut rng));
    }
    let queries: Vec<Box<PartyShares>> = (0..q).map(|_| random_shares(&mut rng)).collect();
    let mut query_rows = |part: Part| -> Vec<u16> {
        (0..rows * part.coefs())
            .map(|_| rng.next_u32() as u16)
            .collect()
    };
    let (q_code, q_mask) = (query_rows(Part::Code), query_rows(Part::Mask));

    progress("database resident on each party's engine");
    let started = Instant::now();
    for e in engines {
        e.prepare(&db)?;
    }
    let load_seconds = started.elapsed().as_secs_f64() / 3.0;

    progress("dot-product phase");
    // Bounded output: rows x chunk u16 per call.
    let chunk = (config.max_pass_comparisons / rows).clamp(1, n);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for e in engines {
            let (db, q_code, q_mask) = (&db, &q_code, &q_mask);
            scope.spawn(move || {
                // Once per batch, as the pipeline does: the passes reuse the prepared queries.
                let prepare = |rows: &[u16], part: Part| {
                    let mut copy = ScratchPool::default().zeroed(rows.len());
                    copy.copy_from_slice(rows);
                    e.prepare_queries(copy, part.coefs())
                };
                let (code, mask) = (prepare(q_code, Part::Code), prepare(q_mask, Part::Mask));
                let mut out = vec![0u16; rows * chunk];
                for start in (0..n).step_by(chunk) {
                    let end = (start + chunk).min(n);
                    let out = &mut out[..rows * (end - start)];
                    for eye in Eye::BOTH {
                        e.dot_db_prepared(&code, db, eye, Part::Code, start..end, out);
                        e.dot_db_prepared(&mask, db, eye, Part::Mask, start..end, out);
                    }
                }
            });
        }
    });
    let dot_seconds = started.elapsed().as_secs_f64();
    let dot_comparisons = (2 * rows * n) as f64;
    let dot_rate = 3.0 * dot_comparisons / dot_seconds;

    progress("comparison phase");
    let a = threshold_coefficient(DEFAULT_THRESHOLD);
    // Whole bit-sliced words for each of the 31 rotations.
    let block = 64 * ROTATION_COUNT;
    let comparisons = config.compare_comparisons.div_ceil(block).max(1) * block;
    let md: Vec<u16> = (0..comparisons)
        .map(|_| (rng.next_u32() % 12_801) as u16)
        .collect();
    let cd: Vec<u16> = md.iter().map(|&m| m / 2).collect();
    let (cd_shares, md_shares) = (additive_u16(&mut rng, &cd), additive_u16(&mut rng, &md));
    let compare = |s: &mut Session<'_, Link>, _: &PassTimers| {
        let i = s.party().index();
        place.compare(s, &cd_shares[i], &md_shares[i], a)
    };
    place.reset_times();
    busy.inspect(|b| b.start());
    let started = Instant::now();
    run_three_wrapped(1, Link::Live, |s| compare(s, &PassTimers::default()))
        .into_iter()
        .try_for_each(|(r, _, _)| r)
        .map_err(|e| BenchError::Bench(e.to_string()))?;
    let compare_seconds = started.elapsed().as_secs_f64();
    let compare_device_busy = busy.and_then(|b| b.stop(compare_seconds));
    let compare_rate = 3.0 * comparisons as f64 / compare_seconds;
    let compare_device_seconds = place.device_times();
    progress("comparison phase, each party alone against a recording");
    let compare_replay = replayed(1, compare)?;
    let compare_replay_rate = comparisons as f64 / slowest(&compare_replay);
    drop((cd_shares, md_shares));

    progress("whole pipeline");
    let p = config.pipeline_entries.clamp(1, n);
    while db.len() > p {
        db.remove(db.len() - 1);
    }
    let mut pipeline_config = PipelineConfig::with_threshold(DEFAULT_THRESHOLD);
    pipeline_config.max_pass_comparisons = config.max_pass_comparisons;
    pipeline_config.chunk_entries = usize::MAX;
    // Each party's pool, kept across its runs as a node keeps it across batches.
    let scratch: [ScratchPool; 3] = Default::default();
    let pipeline = |s: &mut Session<'_, Link>, timers: &PassTimers| {
        let i = s.party().index();
        let requests: Vec<PipelineRequest<'_>> = queries
            .iter()
            .map(|person| PipelineRequest::against_database(person))
            .collect();
        place
            .evaluate(
                s,
                engines[i],
                PartyData {
                    db: &db,
                    scratch: &scratch[i],
                },
                &requests,
                &pipeline_config,
                timers,
            )
            .map(drop)
    };
    busy.inspect(|b| b.start());
    let started = Instant::now();
    let shared = run_three_wrapped(2, Link::Live, |s| pipeline(s, &PassTimers::default()));
    let pipeline_seconds = started.elapsed().as_secs_f64();
    let pipeline_device_busy = busy.and_then(|b| b.stop(pipeline_seconds));
    let bytes_sent = shared[0].1.bytes_sent;
    shared
        .into_iter()
        .try_for_each(|(r, _, _)| r)
        .map_err(|e| BenchError::Bench(e.to_string()))?;
    let pipeline_comparisons = (2 * rows * p) as f64;
    let pipeline_rate = 3.0 * pipeline_comparisons / pipeline_seconds;
    progress("whole pipeline, each party alone against a recording");
    let pipeline_replay = replayed(2, pipeline)?;
    let pipeline_replay_rate = pipeline_comparisons / slowest(&pipeline_replay);
    let bytes = bytes_sent as f64 / pipeline_comparisons;
    // 10 requests/s x 10 M people x 2 irises x 31 rotations.
    let link = 10.0 * 10e6 * 2.0 * ROTATION_COUNT as f64 * bytes * 8.0 / 1e9;

    Ok(DeviceBenchReport {
        engine: engines[0].name(),
        comparison_on: place.label(),
        db_entries: n,
        pipeline_entries: p,
        queries: q,
        load_seconds,
        dot_per_party_device: dot_rate,
        dot_12800_per_party_device: dot_rate * (CODE_COEFS + MASK_COEFS) as f64 / CODE_COEFS as f64,
        compare_per_party_device: compare_rate,
        compare_seconds,
        compare_device_seconds,
        compare_replay_per_party_device: compare_replay_rate,
        compare_device_busy,
        pipeline_device_busy,
        pipeline_per_party_device: pipeline_rate,
        pipeline_replay_per_party_device: pipeline_replay_rate,
        pipeline_replay_passes: pipeline_replay,
        gemm_ops_per_second: gemm_ops,
        int8_peak: peak,
        gemm_peak_fraction: peak.map(|p| gemm_ops / p),
        dot_peak_fraction: peak.map(|p| dot_rate * INT8_OPS_PER_COMPARISON / p),
        bytes_per_comparison: bytes,
        link_gbit_10rps_10m: link,
    })
}

/// The GPU run: three engines (one per party) sharding their databases over `devices`, the
/// GEMM probe, the data-sheet peak of the first device.
///
/// # Errors
/// No usable GPU (the message says why), or a phase failed.
#[cfg(feature = "gpu")]
pub fn run_gpu(
    config: DeviceBenchConfig,
    devices: &[usize],
    mut progress: impl FnMut(&str),
) -> Result<DeviceBenchReport, BenchError> {
    use ocelli_gpu::{int8_dense_peak, BusyClock, GpuEngine};
    let engine = |_| GpuEngine::with_devices(devices);
    let engines = [engine(0)?, engine(1)?, engine(2)?];
    let clock = BusyClock::new(devices.first().copied().unwrap_or(0))?;
    for e in &engines {
        e.time_busy(&clock);
    }
    progress("int8 GEMM probe");
    let gemm_ops = engines[0].gemm_ops_per_second(16_384, 4_096, CODE_COEFS, 10)?;
    let peak = int8_dense_peak(&engines[0].device_name()?);
    let place = OnDevices::new(
        [
            engines[0].kernels(),
            engines[1].kernels(),
            engines[2].kernels(),
        ],
        format!("the GPU, {}", engines[0].device_name()?),
    );
    run(
        config,
        [&engines[0], &engines[1], &engines[2]],
        &place,
        (gemm_ops, peak),
        Some(&*clock),
        progress,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ocelli_cpu::CpuEngine;

    /// The measuring itself, on CPU engines at toy sizes: every phase runs and the figures
    /// are consistent.
    #[test]
    fn the_device_bench_runs_on_any_engine() {
        let cpu = CpuEngine::new();
        let config = DeviceBenchConfig {
            db_entries: 9,
            pipeline_entries: 5,
            queries: 2,
            compare_comparisons: 1_000,
            max_pass_comparisons: 200,
        };
        let report = run(
            config,
            [&cpu, &cpu, &cpu],
            &OnHost,
            (1e12, Some(2e12)),
            None,
            |_| {},
        )
        .expect("bench on CPU engines");
        assert_eq!(report.pipeline_entries, 5);
        assert!(report.dot_per_party_device > 0.0 && report.pipeline_per_party_device > 0.0);
        assert_eq!(report.gemm_peak_fraction, Some(0.5));
        assert!(report.bytes_per_comparison > 1.0, "{report}");
        // Each role replayed alone, its parts timed.
        assert!(report.compare_replay_per_party_device > 0.0, "{report}");
        assert!(report.pipeline_replay_per_party_device > 0.0, "{report}");
        for role in report.pipeline_replay_passes {
            assert!(
                role.wall > 0.0 && role.dot > 0.0 && role.compare > 0.0,
                "{role:?}"
            );
            assert!(role.open > 0.0 && role.layout > 0.0, "{role:?}");
        }

        // The comparison phase on the host-run kernels sends exactly what the host path does.
        #[cfg(feature = "host-kernels")]
        {
            let dev = std::sync::Arc::new(ocelli_device::host::HostDevice::default());
            let place = OnDevices::new([dev.clone(), dev.clone(), dev], "host-run kernels".into());
            let on_kernels = run(
                config,
                [&cpu, &cpu, &cpu],
                &place,
                (1e12, None),
                None,
                |_| {},
            )
            .expect("bench on the host-run kernels");
            assert_eq!(on_kernels.bytes_per_comparison, report.bytes_per_comparison);
            assert!(on_kernels.to_string().contains("on host-run kernels"));
            let times = on_kernels
                .compare_device_seconds
                .expect("timed on a kernel device");
            assert!(times.launch > 0.0 && times.download > 0.0, "{times:?}");
            assert!(times.launch + times.download <= on_kernels.compare_seconds);
        }
    }
}

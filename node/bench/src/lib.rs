//! What `ocelli-node bench` measures, in one process and one run so the figures compare as
//! ratios: the dot-product phase, the comparison phase and the whole pipeline (three parties
//! on threads over the in-memory network; rates from the process's CPU time, per party-core),
//! a plaintext popcount matcher, and the machine's u16 multiply-add peak.
//!
//! A comparison is one (query rotation, enrolled iris) pair, code and mask.
#![deny(missing_docs, clippy::unwrap_used)]

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use sdk_orb::plaintext::{threshold_coefficient, DEFAULT_THRESHOLD};
use sdk_orb::rotation::ROTATION_COUNT;
use sdk_orb::shamir::PartyShares;
use sdk_orb::{IrisTemplate, CODE_COEFS, MASK_COEFS};

pub mod device;
pub mod plaintext;
pub mod self_check;
pub mod timing;

/// An empty share database whose allocations are advised to use huge pages, as a node's is
/// (`ocelli_node::shares::ShareDb`): the backends stream it, and without the advice its rows
/// cost TLB misses a node does not pay.
pub fn advised_db() -> MatchDb {
    MatchDb::new().with_storage_advice(ocelli_os::advise_huge_pages::<u16>)
}

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The CPU engine cannot be built.
    #[error(transparent)]
    Cpu(#[from] ocelli_cpu::CpuError),
    /// A backend cannot hold the database.
    #[error(transparent)]
    Backend(#[from] ocelli_mpc::BackendError),
    /// A run failed (a phase's transport, or a replayed party sent what it had not sent in
    /// the recorded run).
    #[error("benchmark run: {0}")]
    Bench(String),
    /// The GPU backend failed.
    #[cfg(feature = "gpu")]
    #[error("GPU engine: {0}")]
    Gpu(#[from] ocelli_gpu::GpuError),
}

use ocelli_cpu::{mac_peak, CpuEngine, Kernel, MacPeak, Tuning};
use ocelli_mpc::backend::Backend;
use ocelli_mpc::compare::{match_bits, or_blocks};
use ocelli_mpc::db::{Eye, MatchDb, Part};
use ocelli_mpc::local::{additive_u16, run_three_unrecorded};
use ocelli_mpc::pipeline::{evaluate, PairRules, PipelineConfig, PipelineRequest, Target};
use ocelli_mpc::randomness::Keystream;
use ocelli_mpc::scratch::ScratchPool;
use ocelli_mpc::synthetic;
use ocelli_os::{cpu_seconds, resident_bytes};

/// Sizes of a bench run.
#[derive(Clone, Copy, Debug)]
pub struct BenchConfig {
    /// Enrolled people (two irises each).
    pub db_entries: usize,
    /// Queries per batch (people, two irises each, 31 rotations).
    pub queries: usize,
    /// The dot-product kernel measured.
    pub kernel: Kernel,
    /// Tune the kernel's tile shape and chunk first ([`ocelli_cpu::tune`]), as a node does at
    /// start; off, the defaults.
    pub tune: bool,
}

impl Default for BenchConfig {
    fn default() -> BenchConfig {
        BenchConfig {
            db_entries: 2048,
            kernel: Kernel::detect(),
            queries: 4,
            tune: true,
        }
    }
}

/// One candidate of the tuning.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TuningCandidate {
    /// Query rows of the tile.
    pub p: usize,
    /// Database rows of the tile.
    pub d: usize,
    /// Coefficients per chunk.
    pub chunk: usize,
    /// Best seconds of one core for the tuner's workload.
    pub seconds: f64,
}

/// The figures, rates in comparisons per second.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchReport {
    /// Dot-product kernel.
    pub kernel: String,
    /// Enrolled people in the run.
    pub db_entries: usize,
    /// Queries in the run.
    pub queries: usize,
    /// Dot-product phase, one party on one core (the best of three runs).
    pub dot_per_party_core: f64,
    /// The dot-product phase as the pipeline runs it: each query's 31 rotations prepared
    /// once ([`Backend::prepare_rotations`]) against a share database, one party on one
    /// core (the best of three runs).
    pub dot_rotations_per_party_core: f64,
    /// Multiply-adds per comparison the kernel runs in `dot_rotations_per_party_core`
    /// (19,200 without the correlation of rotations; panel padding included).
    pub dot_rotations_macs_per_comparison: f64,
    /// Fraction of `mac_peak` those multiply-adds reach.
    pub dot_rotations_mac_fraction: Option<f64>,
    /// Coefficients per chunk of the engine's loop nest.
    pub dot_chunk: usize,
    /// Query rows of the engine's tile (its `P`).
    pub dot_tile_p: usize,
    /// Database rows of the engine's tile (its `D`).
    pub dot_tile_d: usize,
    /// Whether the tile and chunk were tuned on this core (false: the defaults).
    pub dot_tuned: bool,
    /// Wall seconds the tuning took, where it ran.
    pub tuning_seconds: Option<f64>,
    /// Every candidate the tuning timed: its shape, chunk and best seconds of one core for
    /// the tuner's workload.
    pub tuning_candidates: Vec<TuningCandidate>,
    /// Comparison phase (split, lift, MSB, OR over rotations), per party-core (the best of
    /// three runs).
    pub compare_per_party_core: f64,
    /// The whole pipeline of a batch, per party-core (the best of three runs).
    pub pipeline_per_party_core: f64,
    /// Plaintext popcount matcher on one core.
    pub plaintext_per_core: f64,
    /// The popcount matcher's instruction set, chosen at run time.
    pub plaintext_kernel: &'static str,
    /// Every popcount variant this core runs, on the same batch, per core.
    pub plaintext_variants: Vec<PlaintextVariant>,
    /// The plain C popcount matcher (`-O3 -march=native`) on the same batch and core; `None`
    /// where the binary was built without it or for a core with instructions this one lacks.
    pub plaintext_c_per_core: Option<f64>,
    /// `plaintext_per_core` over `plaintext_c_per_core`.
    pub plaintext_over_c: Option<f64>,
    /// Who made the comparison phase's ChaCha12 blocks: the instruction set of `kernel`
    /// ([`ocelli_mpc::randomness::Keystream`]).
    pub keystream: &'static str,
    /// u16 multiply-adds per second one core sustains with the kernel's instruction; `None`
    /// where the probe read more than the core can issue at `clock_hz` (a measurement error).
    pub mac_peak: Option<f64>,
    /// Fraction of `mac_peak` the dot-product phase reaches.
    pub mac_peak_fraction: Option<f64>,
    /// u16 multiply-adds per second one core sustains with each product added into an
    /// accumulator ([`ocelli_cpu::peak::accumulate_peak`]): below `mac_peak` with AVX2,
    /// which needs a second instruction for it, equal to it otherwise.
    pub mac_accumulate_peak: Option<f64>,
    /// Fraction of `mac_accumulate_peak` the dot-product phase reaches.
    pub mac_accumulate_fraction: Option<f64>,
    /// Fraction of `mac_accumulate_peak` the rotations' multiply-adds reach.
    pub dot_rotations_accumulate_fraction: Option<f64>,
    /// The core clock estimated around the peak probe, cycles per second.
    pub clock_hz: f64,
    /// How many times faster the plaintext matcher is than the secure pipeline.
    pub plaintext_over_pipeline: f64,
    /// Resident bytes per enrolled person of one party's share database, measured on
    /// [`MEMORY_PEOPLE`] people (`None` where the OS does not say).
    pub resident_bytes_per_enrolled: Option<f64>,
    /// Bytes each party sends per comparison in the pipeline.
    pub bytes_per_comparison: f64,
    /// The same batch with mirror-attack detection: time over the time without it (the
    /// mirrored query doubles the database comparisons and adds the per-request OR).
    pub mirror_time_factor: f64,
    /// Protocol rounds of the batch without and with mirror-attack detection.
    pub rounds: (u64, u64),
}

/// One popcount variant's rate in [`BenchReport::plaintext_variants`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct PlaintextVariant {
    /// [`plaintext::Popcount::name`].
    pub kernel: &'static str,
    /// Comparisons per second on one core.
    pub per_core: f64,
    /// Over the C matcher's rate.
    pub over_c: Option<f64>,
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = |x: f64| format!("{:.2} M/s", x / 1e6);
        writeln!(
            f,
            "kernel {}, {} enrolled, {} queries (comparisons: query rotation x enrolled iris)",
            self.kernel, self.db_entries, self.queries
        )?;
        writeln!(
            f,
            "  dot-product phase   {:>12} per party-core ({}x{} tile{}, chunks of {})",
            m(self.dot_per_party_core),
            self.dot_tile_p,
            self.dot_tile_d,
            if self.dot_tuned { ", tuned" } else { "" },
            self.dot_chunk
        )?;
        writeln!(
            f,
            "  dot, rotations      {:>12} per party-core ({:.0} multiply-adds per comparison{})",
            m(self.dot_rotations_per_party_core),
            self.dot_rotations_macs_per_comparison,
            self.dot_rotations_mac_fraction
                .map_or(String::new(), |x| format!(
                    ", {:.0} % of the peak",
                    x * 100.0
                ))
        )?;
        writeln!(
            f,
            "  comparison phase    {:>12} per party-core (ChaCha12 blocks: {})",
            m(self.compare_per_party_core),
            self.keystream
        )?;
        writeln!(
            f,
            "  whole pipeline      {:>12} per party-core",
            m(self.pipeline_per_party_core)
        )?;
        writeln!(
            f,
            "  plaintext popcount  {:>12} per core ({}, chosen at run time)",
            m(self.plaintext_per_core),
            self.plaintext_kernel
        )?;
        for v in &self.plaintext_variants {
            writeln!(
                f,
                "    {:<17} {:>12}{}",
                v.kernel,
                m(v.per_core),
                v.over_c
                    .map_or(String::new(), |x| format!(", {x:.2} x the C matcher"))
            )?;
        }
        match self.plaintext_c_per_core {
            Some(c) => writeln!(
                f,
                "  C popcount matcher  {:>12} per core (-O3 -march=native); run-time choice at {:.2} x it",
                m(c),
                self.plaintext_over_c.unwrap_or(f64::NAN)
            )?,
            None => writeln!(
                f,
                "  C popcount matcher  not run: built without the c-matcher feature or for another core"
            )?,
        }
        match (self.mac_peak, self.mac_peak_fraction) {
            (Some(peak), Some(fraction)) => writeln!(
                f,
                "  multiply-add peak   {:>9.1} G/s at {:.2} GHz; dot phase at {:.0} % of it",
                peak / 1e9,
                self.clock_hz / 1e9,
                fraction * 100.0
            )?,
            _ => writeln!(
                f,
                "  multiply-add peak   not reported: the probe read more than the core issues at {:.2} GHz",
                self.clock_hz / 1e9
            )?,
        }
        if let (Some(peak), Some(accumulate)) = (self.mac_peak, self.mac_accumulate_peak) {
            if accumulate < peak * 0.99 {
                writeln!(
                    f,
                    "  with accumulation   {:>9.1} G/s ({:.0} % of the peak: the most any dot-product loop of this kernel reaches)",
                    accumulate / 1e9,
                    accumulate / peak * 100.0
                )?;
                if let (Some(dot), Some(rotations)) = (
                    self.mac_accumulate_fraction,
                    self.dot_rotations_accumulate_fraction,
                ) {
                    writeln!(
                        f,
                        "                      dot phase at {:.0} % of it, rotations at {:.0} %",
                        dot * 100.0,
                        rotations * 100.0
                    )?;
                }
            }
        }
        writeln!(
            f,
            "  plaintext / secure  {:>9.1} x",
            self.plaintext_over_pipeline
        )?;
        if let Some(bytes) = self.resident_bytes_per_enrolled {
            writeln!(
                f,
                "  resident memory     {:>9.1} KB per enrolled person per party ({} people)",
                bytes / 1e3,
                MEMORY_PEOPLE
            )?;
        }
        writeln!(
            f,
            "  sent per comparison {:>9.1} bytes per party",
            self.bytes_per_comparison
        )?;
        write!(
            f,
            "  mirror detection    {:>9.2} x the batch time; rounds {} -> {}",
            self.mirror_time_factor, self.rounds.0, self.rounds.1
        )
    }
}

fn measure<R>(f: impl FnOnce() -> R) -> (R, f64) {
    let start = cpu_seconds();
    let r = f();
    (r, (cpu_seconds() - start).max(1e-9))
}

/// [`measure`] three times: the last result and the least time. The machine may be shared,
/// and the peak the figures are held against is itself a best of five.
fn best_of_three<R>(mut f: impl FnMut() -> R) -> (R, f64) {
    let (mut r, mut least) = measure(&mut f);
    for _ in 1..3 {
        let (again, seconds) = measure(&mut f);
        r = again;
        least = least.min(seconds);
    }
    (r, least)
}

/// The C matcher's rate on `packed` (the best of three), after checking it counts what the
/// Rust matcher counts.
#[cfg(feature = "c-matcher")]
fn c_matcher_rate(packed: &plaintext::Packed, a: u32) -> Option<f64> {
    let (count, seconds) = best_of_three(|| plaintext::c::count(packed, a));
    let rust = plaintext::count_packed(plaintext::Popcount::Portable, packed, a);
    assert_eq!(count?, rust, "the C and Rust plaintext matchers disagree");
    Some(packed.comparisons() as f64 / seconds)
}

#[cfg(not(feature = "c-matcher"))]
fn c_matcher_rate(_: &plaintext::Packed, _: u32) -> Option<f64> {
    None
}

fn random_u16(rng: &mut ChaCha20Rng, n: usize) -> Vec<u16> {
    (0..n).map(|_| rng.next_u32() as u16).collect()
}

/// People in the share database whose resident size `bench` reports.
pub const MEMORY_PEOPLE: usize = 20_000;

/// Resident bytes per enrolled person: one party's [`MatchDb`] of `people` people, measured
/// as the growth of the process's resident set while it is built. Memory the process freed
/// earlier but kept could take part of the database unseen: measure before other work.
pub fn resident_bytes_per_enrolled(people: usize) -> Option<f64> {
    let mut rng = ChaCha20Rng::seed_from_u64(20_000);
    let person = synthetic::random_shares(&mut rng);
    let before = resident_bytes()?;
    let mut db = advised_db();
    for serial in 1..=people as u64 {
        db.push(serial, &person);
    }
    let after = resident_bytes()?;
    std::hint::black_box(&db);
    Some(after.saturating_sub(before) as f64 / people as f64)
}

/// Runs every measurement; `progress` hears what is running.
pub fn run(config: BenchConfig, mut progress: impl FnMut(&str)) -> BenchReport {
    let kernel = config.kernel;
    // The draws of the comparison phase limited to the kernel's instruction set, as on a
    // machine that has no wider one.
    let keystream = match kernel {
        Kernel::Avx512Vnni(_) => Keystream::widest(),
        Kernel::Avx2(_) if Keystream::Avx2.runs() => Keystream::Avx2,
        Kernel::Avx2(_) | Kernel::Scalar => Keystream::Generator,
    };
    Keystream::choose(keystream);
    let mut rng = ChaCha20Rng::seed_from_u64(2026);
    let n = config.db_entries.max(1);
    let q = config.queries.max(1);
    let rows = q * ROTATION_COUNT;

    // First, while the heap holds no freed memory a growing database could reuse unseen.
    progress("resident memory of the share database");
    let resident = resident_bytes_per_enrolled(MEMORY_PEOPLE);

    progress("multiply-add peak");
    let peak = mac_peak(kernel);
    let accumulate = ocelli_cpu::peak::accumulate_peak(kernel, peak);
    let clock = peak.map_or_else(ocelli_cpu::peak::clock_hz, |p| p.clock_hz);

    let tuned = config.tune.then(|| {
        progress("tuning the tile shape and chunk");
        ocelli_cpu::tune::tune(kernel, ocelli_cpu::tune::BUDGET).expect("one tuning thread starts")
    });
    let tuning = tuned
        .as_ref()
        .map_or_else(|| Tuning::default_for(kernel), |t| t.choice);

    progress("dot-product phase");
    let engine = tuning.engine(1).expect("one bench thread starts");
    let engine_chunk = engine.chunk();
    let queries_code = random_u16(&mut rng, rows * CODE_COEFS);
    let queries_mask = random_u16(&mut rng, rows * MASK_COEFS);
    let db_code = random_u16(&mut rng, n * CODE_COEFS);
    let db_mask = random_u16(&mut rng, n * MASK_COEFS);
    let mut out = vec![0u16; rows * n];
    let (_, dot_seconds) = best_of_three(|| {
        engine.dot(&queries_code, &db_code, CODE_COEFS, &mut out);
        engine.dot(&queries_mask, &db_mask, MASK_COEFS, &mut out);
    });
    let dot_rate = (rows * n) as f64 / dot_seconds;
    let dot_macs = dot_rate * (CODE_COEFS + MASK_COEFS) as f64;
    // The fraction of a peak (`mac_peak`, or the accumulating one) some multiply-adds reach.
    let of = |peak: Option<MacPeak>, macs_per_second: f64| {
        peak.map(|p| macs_per_second / p.macs_per_second)
    };
    drop((queries_code, queries_mask, db_code, db_mask, out));

    progress("dot-product phase, rotation groups");
    let mut share_db = advised_db();
    for serial in 1..=n as u64 {
        share_db.push(serial, &synthetic::random_shares(&mut rng));
    }
    let prepared = [Part::Code, Part::Mask].map(|part| {
        let len = part.coefs();
        let mut queries = ScratchPool::default().zeroed(q * len);
        queries.copy_from_slice(&random_u16(&mut rng, q * len));
        (part, engine.prepare_rotations(queries, len))
    });
    let mut out = vec![0u16; rows * n];
    let (_, rotations_seconds) = best_of_three(|| {
        for (part, queries) in &prepared {
            engine.dot_db_prepared(queries, &share_db, Eye::Left, *part, 0..n, &mut out);
        }
    });
    let rotations_rate = (rows * n) as f64 / rotations_seconds;
    let rotations_macs = (engine.rotation_macs(q, CODE_COEFS) + engine.rotation_macs(q, MASK_COEFS))
        as f64
        / rows as f64;
    let rotations_macs_per_second = rotations_rate * rotations_macs;
    drop((share_db, prepared, out));

    progress("comparison phase");
    let a = threshold_coefficient(DEFAULT_THRESHOLD);
    let comparisons = rows * n;
    let md: Vec<u16> = (0..comparisons)
        .map(|_| (rng.next_u32() % 12_801) as u16)
        .collect();
    let cd: Vec<u16> = md.iter().map(|&m| m / 2).collect();
    let (cd_shares, md_shares) = (additive_u16(&mut rng, &cd), additive_u16(&mut rng, &md));
    let (_, compare_seconds) = best_of_three(|| {
        run_three_unrecorded(1, |s| {
            let i = s.party().index();
            let bits = match_bits(s, &cd_shares[i], &md_shares[i], a).expect("in-memory network");
            or_blocks(s, &bits, ROTATION_COUNT).expect("in-memory network")
        })
    });
    let compare_rate = comparisons as f64 / (compare_seconds / 3.0);
    drop((cd_shares, md_shares));

    progress("whole pipeline");
    let people: Vec<(IrisTemplate, IrisTemplate)> = (0..n + q)
        .map(|_| (synthetic::eye(&mut rng), synthetic::eye(&mut rng)))
        .collect();
    let shares: Vec<Vec<PartyShares>> = people
        .iter()
        .map(|(l, r)| synthetic::share_person(&mut rng, l, r))
        .collect();
    let engines: Vec<CpuEngine> = (0..3)
        .map(|_| tuning.engine(1).expect("one bench thread starts"))
        .collect();
    let pipeline_config = PipelineConfig::with_threshold(DEFAULT_THRESHOLD);
    let dbs: Vec<MatchDb> = (0..3)
        .map(|i| {
            let mut db = advised_db();
            for (d, person) in shares[..n].iter().enumerate() {
                db.push(d as u64 + 1, &person[i]);
            }
            db
        })
        .collect();
    // Each party's pool, kept across its batches as a node keeps it.
    let scratch: [ScratchPool; 3] = Default::default();
    let batch = |mirror: bool| {
        best_of_three(|| {
            run_three_unrecorded(2, |s| {
                let i = s.party().index();
                let db = &dbs[i];
                let requests: Vec<PipelineRequest<'_>> = shares[n..]
                    .iter()
                    .map(|person| PipelineRequest {
                        shares: &person[i],
                        target: Target::Database,
                        against_earlier: false,
                        candidate: false,
                        or_policy: false,
                        rules: PairRules {
                            mirror,
                            ..PairRules::default()
                        },
                    })
                    .collect();
                evaluate(s, &engines[i], db, &requests, &pipeline_config, &scratch[i])
                    .expect("in-memory network")
            })
        })
    };
    let (results, pipeline_seconds) = batch(false);
    progress("whole pipeline with mirror-attack detection");
    let (mirror_results, mirror_seconds) = batch(true);
    let pipeline_comparisons = 2 * rows * n;
    let pipeline_rate = pipeline_comparisons as f64 / (pipeline_seconds / 3.0);
    let bytes = results[0].1.bytes_sent as f64 / pipeline_comparisons as f64;

    progress("plaintext matcher");
    let packed = plaintext::Packed::new(&people[n..], &people[..n]);
    let plain_comparisons = packed.comparisons() as f64;
    let c_rate = c_matcher_rate(&packed, a);
    let plain_kernel = plaintext::fastest(&packed, a);
    let variants: Vec<PlaintextVariant> = plaintext::Popcount::supported()
        .into_iter()
        .map(|kernel| {
            let (_, seconds) = best_of_three(|| plaintext::count_packed(kernel, &packed, a));
            let per_core = plain_comparisons / seconds;
            PlaintextVariant {
                kernel: kernel.name(),
                per_core,
                over_c: c_rate.map(|c| per_core / c),
            }
        })
        .collect();
    let plain_rate = variants
        .iter()
        .find(|v| v.kernel == plain_kernel.name())
        .map_or(0.0, |v| v.per_core);
    drop(packed);
    drop(dbs);

    BenchReport {
        kernel: kernel.name().to_owned(),
        db_entries: n,
        queries: q,
        dot_per_party_core: dot_rate,
        dot_rotations_per_party_core: rotations_rate,
        dot_rotations_macs_per_comparison: rotations_macs,
        dot_rotations_mac_fraction: of(peak, rotations_macs_per_second),
        dot_chunk: engine_chunk,
        dot_tile_p: tuning.tile.shape().0,
        dot_tile_d: tuning.tile.shape().1,
        dot_tuned: tuned.is_some(),
        tuning_seconds: tuned.as_ref().map(|t| t.seconds),
        tuning_candidates: tuned.map_or_else(Vec::new, |t| {
            t.candidates
                .into_iter()
                .map(|(c, seconds)| TuningCandidate {
                    p: c.tile.shape().0,
                    d: c.tile.shape().1,
                    chunk: c.chunk,
                    seconds,
                })
                .collect()
        }),
        compare_per_party_core: compare_rate,
        pipeline_per_party_core: pipeline_rate,
        plaintext_per_core: plain_rate,
        plaintext_kernel: plain_kernel.name(),
        plaintext_variants: variants,
        plaintext_c_per_core: c_rate,
        plaintext_over_c: c_rate.map(|c| plain_rate / c),
        keystream: keystream.name(),
        resident_bytes_per_enrolled: resident,
        mac_peak: peak.map(|p| p.macs_per_second),
        mac_peak_fraction: of(peak, dot_macs),
        mac_accumulate_peak: accumulate.map(|p| p.macs_per_second),
        mac_accumulate_fraction: of(accumulate, dot_macs),
        dot_rotations_accumulate_fraction: of(accumulate, rotations_macs_per_second),
        clock_hz: clock,
        plaintext_over_pipeline: plain_rate / pipeline_rate,
        bytes_per_comparison: bytes,
        mirror_time_factor: mirror_seconds / pipeline_seconds,
        rounds: (results[0].1.rounds, mirror_results[0].1.rounds),
    }
}

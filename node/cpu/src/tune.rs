//! The engine tunes itself: each candidate tile shape ([`Tile::candidates`]) and chunk length
//! ([`CHUNKS`]) of a kernel is timed for a few milliseconds on this core, on synthetic data
//! shaped like a batch's work (a slab of query rows against database rows, and four queries'
//! rotation groups), and the fastest is kept. The choice is kept per CPU model in a small file
//! ([`cached_or_tuned`]), so a restart does not measure again. No choice changes a result: every
//! candidate passes the parity suite.

use std::path::Path;
use std::time::Duration;

use ocelli_mpc::backend::Backend;
use ocelli_mpc::scratch::{ScratchPool, ScratchVec};
use ocelli_os::thread_cpu_seconds;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use sdk_orb::{CODE_COEFS, MASK_COEFS};

use crate::engine::{BLOCK_ROWS, CHUNK, QUERY_SLAB_ROWS};
use crate::kernels::CpuModel;
use crate::{CpuEngine, Kernel, Tile};

/// The tuner's version: a cached choice made by another version is measured again (the
/// candidates or the workload changed).
pub const TUNER_VERSION: u32 = 2;

/// Chunk lengths the tuner tries ([`CHUNK`] is the default).
pub const CHUNKS: [usize; 3] = [1024, CHUNK, 4096];

/// Environment variable that, set to `off` or `0`, keeps the default tile and chunk (tests and
/// CI, so that their time does not grow).
pub const SKIP_VAR: &str = "OCELLI_CPU_TUNING";

/// The file a node keeps its tuning in, in its data directory.
pub const FILE_NAME: &str = "cpu-tuning.toml";

/// How long a tuning takes by default, about: the fastest of a few runs of every candidate.
pub const BUDGET: Duration = Duration::from_millis(600);

/// Whether [`SKIP_VAR`] asks for the defaults.
pub fn skipped_by_env() -> bool {
    std::env::var(SKIP_VAR).is_ok_and(|v| matches!(v.trim(), "off" | "0" | "false"))
}

/// A tile shape and chunk length for the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// The tile shape (and its kernel).
    pub tile: Tile,
    /// Coefficients per chunk.
    pub chunk: usize,
}

impl Tuning {
    /// What `kernel` runs untuned.
    pub fn default_for(kernel: Kernel) -> Tuning {
        Tuning {
            tile: Tile::default_for(kernel),
            chunk: CHUNK,
        }
    }

    /// Every candidate of `kernel`, the default first.
    pub fn candidates(kernel: Kernel) -> Vec<Tuning> {
        Tile::candidates(kernel)
            .into_iter()
            .flat_map(|tile| {
                // The default chunk first, so the default tuning leads.
                let mut chunks = CHUNKS;
                chunks.sort_by_key(|&c| c != CHUNK);
                chunks.map(|chunk| Tuning { tile, chunk })
            })
            .collect()
    }

    /// An engine with this tuning on a dedicated pool of `threads` threads, or on rayon's
    /// current pool where `threads` is 0.
    ///
    /// # Errors
    /// The thread pool cannot be started.
    pub fn engine(self, threads: usize) -> Result<CpuEngine, crate::CpuError> {
        match threads {
            0 => Ok(CpuEngine::on_current_pool(self.tile, self.chunk)),
            threads => CpuEngine::with_tile(self.tile, threads, self.chunk),
        }
    }
}

impl std::fmt::Display for Tuning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}, chunk {}", self.tile, self.chunk)
    }
}

/// What a tuning measured.
#[derive(Clone, Debug)]
pub struct TuneReport {
    /// The choice.
    pub choice: Tuning,
    /// Every candidate with its best time for the workload, seconds of one core.
    pub candidates: Vec<(Tuning, f64)>,
    /// Wall time the tuning took, seconds.
    pub seconds: f64,
}

/// A candidate has to beat the default by this fraction to be chosen: closer than that is
/// noise, and the default is the shape the rest of the engine was measured with.
const MARGIN: f64 = 0.01;

/// Times every candidate of `kernel` on one thread for about `budget` in all, and picks the
/// fastest.
///
/// # Errors
/// The one-thread pool cannot be started.
pub fn tune(kernel: Kernel, budget: Duration) -> Result<TuneReport, crate::CpuError> {
    let start = std::time::Instant::now();
    let candidates = Tuning::candidates(kernel);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .map_err(|_| crate::CpuError::Threads(1))?;
    let mut best = vec![f64::INFINITY; candidates.len()];
    if candidates.len() > 1 {
        let work = Workload::new();
        // Rounds over all candidates, so a slow moment of the core is spread over them; the
        // first round also warms caches and page tables.
        let prepared: Vec<Prepared> = candidates.iter().map(|t| work.prepare(*t)).collect();
        let mut round = 0;
        while round < 2 || (start.elapsed() < budget && round < 12) {
            for (p, best) in prepared.iter().zip(best.iter_mut()) {
                *best = best.min(pool.install(|| work.time(p)));
            }
            round += 1;
        }
    }
    let fastest = (0..candidates.len())
        .min_by(|&a, &b| best[a].total_cmp(&best[b]))
        .unwrap_or(0);
    let choice = if best[fastest] < best[0] * (1.0 - MARGIN) {
        candidates[fastest]
    } else {
        candidates[0]
    };
    Ok(TuneReport {
        choice,
        candidates: candidates.into_iter().zip(best).collect(),
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// The synthetic work a candidate is timed on.
struct Workload {
    /// A slab of query rows (code length).
    queries: Vec<u16>,
    /// Four queries, code then mask.
    bases: [Vec<u16>; 2],
    /// Database rows, code then mask.
    db: [Vec<u16>; 2],
}

/// Database rows of the workload: half a block task, so that a candidate's run is a few
/// milliseconds.
const WORK_ROWS: usize = BLOCK_ROWS / 2;
/// Queries of the workload's rotation groups: a demo batch's four.
const WORK_BASES: usize = 4;

/// A candidate's engine and its queries, laid out.
struct Prepared {
    engine: CpuEngine,
    queries: crate::engine::CpuQueries,
    rotations: [crate::engine::CpuQueries; 2],
}

impl Workload {
    fn new() -> Workload {
        let mut rng = ChaCha20Rng::seed_from_u64(0x7a11);
        let mut random = |n: usize| -> Vec<u16> { (0..n).map(|_| rng.next_u32() as u16).collect() };
        Workload {
            queries: random(QUERY_SLAB_ROWS * CODE_COEFS),
            bases: [
                random(WORK_BASES * CODE_COEFS),
                random(WORK_BASES * MASK_COEFS),
            ],
            db: [
                random(WORK_ROWS * CODE_COEFS),
                random(WORK_ROWS * MASK_COEFS),
            ],
        }
    }

    fn prepare(&self, tuning: Tuning) -> Prepared {
        let engine = CpuEngine::on_current_pool(tuning.tile, tuning.chunk);
        let pool = ScratchPool::default();
        let scratch = |v: &[u16]| -> ScratchVec {
            let mut s = pool.zeroed(v.len());
            s.copy_from_slice(v);
            s
        };
        let queries = engine.prepare_queries(scratch(&self.queries), CODE_COEFS);
        let rotations = [
            engine.prepare_rotations(scratch(&self.bases[0]), CODE_COEFS),
            engine.prepare_rotations(scratch(&self.bases[1]), MASK_COEFS),
        ];
        Prepared {
            engine,
            queries,
            rotations,
        }
    }

    /// Seconds of this thread's CPU time one run of the workload takes with `p`.
    fn time(&self, p: &Prepared) -> f64 {
        let rows = WORK_BASES * sdk_orb::rotation::ROTATION_COUNT;
        let mut out = vec![0u16; QUERY_SLAB_ROWS.max(rows) * WORK_ROWS];
        let start = thread_cpu_seconds();
        let slab = &mut out[..QUERY_SLAB_ROWS * WORK_ROWS];
        p.engine
            .dot_prepared_rows(&p.queries, QUERY_SLAB_ROWS, &self.db[0], CODE_COEFS, slab);
        for (prepared, (db, len)) in p
            .rotations
            .iter()
            .zip([(&self.db[0], CODE_COEFS), (&self.db[1], MASK_COEFS)])
        {
            let out = &mut out[..rows * WORK_ROWS];
            p.engine.dot_prepared_rows(prepared, rows, db, len, out);
        }
        let seconds = thread_cpu_seconds() - start;
        std::hint::black_box(&out);
        seconds
    }
}

/// The file a tuning is kept in: this CPU model, the kernel and the tuner's version, with the
/// choice. Any other content is ignored and the tuning measured again.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Kept {
    tuner: u32,
    vendor: String,
    family: u32,
    model: u32,
    kernel: String,
    p: usize,
    d: usize,
    chunk: usize,
}

impl Kept {
    fn new(cpu: &CpuModel, tuning: Tuning) -> Kept {
        let (p, d) = tuning.tile.shape();
        Kept {
            tuner: TUNER_VERSION,
            vendor: cpu.vendor.clone(),
            family: cpu.family,
            model: cpu.model,
            kernel: tuning.tile.kernel().name().to_owned(),
            p,
            d,
            chunk: tuning.chunk,
        }
    }

    /// The tuning this file keeps for `kernel` on `cpu`, if it is one.
    fn tuning(&self, cpu: &CpuModel, kernel: Kernel) -> Option<Tuning> {
        let ours = self.tuner == TUNER_VERSION
            && self.vendor == cpu.vendor
            && self.family == cpu.family
            && self.model == cpu.model
            && self.kernel == kernel.name()
            && CHUNKS.contains(&self.chunk);
        let tile = Tile::of_shape(kernel, (self.p, self.d))?;
        ours.then_some(Tuning {
            tile,
            chunk: self.chunk,
        })
    }
}

/// Where a tuning came from.
#[derive(Debug)]
pub enum Source {
    /// The file kept for this CPU model.
    Kept,
    /// Measured now ([`tune`]); `saved` says whether the file could be written.
    Measured {
        /// The measurements.
        report: TuneReport,
        /// Writing the file, which failed if `Err` (the tuning stands; the next start
        /// measures again).
        saved: Result<(), std::io::Error>,
    },
}

/// The tuning kept at `path` for `kernel` on this CPU model, or, where the file is missing,
/// unreadable, corrupt or for another CPU, kernel or tuner version, one measured now
/// ([`tune`], about `budget`) and written there.
///
/// # Errors
/// The one-thread pool of the measurement cannot be started.
pub fn cached_or_tuned(
    path: &Path,
    kernel: Kernel,
    budget: Duration,
) -> Result<(Tuning, Source), crate::CpuError> {
    let cpu = CpuModel::detect();
    let kept = std::fs::read_to_string(path)
        .ok()
        .and_then(|text| toml::from_str::<Kept>(&text).ok())
        .and_then(|kept| kept.tuning(&cpu, kernel));
    if let Some(tuning) = kept {
        return Ok((tuning, Source::Kept));
    }
    let report = tune(kernel, budget)?;
    let saved = save(path, &Kept::new(&cpu, report.choice));
    Ok((report.choice, Source::Measured { report, saved }))
}

/// Writes `kept` to `path` whole (a temporary file renamed over it).
fn save(path: &Path, kept: &Kept) -> Result<(), std::io::Error> {
    let text = toml::to_string(kept).map_err(std::io::Error::other)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(
        &tmp,
        format!(
            "# The CPU engine's tile, measured on this CPU model; delete to measure again.\n{text}"
        ),
    )?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_has_its_default_first_among_its_candidates() {
        for kernel in Kernel::all_supported() {
            let candidates = Tuning::candidates(kernel);
            assert_eq!(candidates[0], Tuning::default_for(kernel));
            assert_eq!(
                candidates.len(),
                Tile::candidates(kernel).len() * CHUNKS.len()
            );
        }
    }

    #[test]
    fn a_kept_tuning_is_used_only_for_its_cpu_kernel_and_tuner_version() {
        let cpu = CpuModel::detect();
        for kernel in Kernel::all_supported() {
            let tuning = *Tuning::candidates(kernel).last().expect("candidates");
            let kept = Kept::new(&cpu, tuning);
            assert_eq!(kept.tuning(&cpu, kernel), Some(tuning));
            let other_model = CpuModel {
                model: cpu.model + 1,
                ..cpu.clone()
            };
            assert_eq!(kept.tuning(&other_model, kernel), None);
            let older = Kept {
                tuner: TUNER_VERSION - 1,
                ..Kept::new(&cpu, tuning)
            };
            assert_eq!(older.tuning(&cpu, kernel), None);
            let unknown_shape = Kept {
                p: 7,
                ..Kept::new(&cpu, tuning)
            };
            assert_eq!(unknown_shape.tuning(&cpu, kernel), None);
            for other in Kernel::all_supported().into_iter().filter(|&k| k != kernel) {
                assert_eq!(kept.tuning(&cpu, other), None);
            }
        }
    }

    /// A kept file is read back instead of measuring; a corrupt one is measured over and
    /// replaced. Zero budget: two rounds of the candidates, the least the tuner runs.
    #[test]
    fn a_corrupt_tuning_file_is_measured_again_and_a_kept_one_is_reused() {
        let dir = std::env::temp_dir().join(format!("ocelli-tune-{}", std::process::id()));
        let path = dir.join("cpu-tuning.toml");
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(&path, "tuner = \"not a number\"\n[[").expect("write");
        let kernel = Kernel::Scalar;
        let (first, source) = cached_or_tuned(&path, kernel, Duration::ZERO).expect("tuned");
        assert!(
            matches!(source, Source::Measured { saved: Ok(()), .. }),
            "{source:?}"
        );
        let (again, source) = cached_or_tuned(&path, kernel, Duration::ZERO).expect("kept");
        assert!(matches!(source, Source::Kept), "{source:?}");
        assert_eq!(first, again);
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}

//! The CPU engine: register-tiled SIMD kernels, database blocks sized for the L2 cache, rayon
//! across cores.

use rayon::prelude::*;

use crate::dot::DotEngine;
use crate::engine::kernels::{
    peak_avx2, peak_avx512_vnni, peak_scalar, tile_avx2, tile_avx512_vnni, tile_scalar, Avx2,
    Avx512Vnni, Tile, TILE_D, TILE_Q,
};
use crate::error::EngineError;

/// Database vectors per parallel task: 16 code shares are 400 KB, inside one L2.
const DB_BLOCK: usize = 16;

/// Which micro-kernel the engine runs. The SIMD variants carry the token that run-time
/// detection issues, so a `Kernel` always names instructions this CPU has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// AVX-512 VNNI (`vpdpwssd`), 32 multiply-adds per instruction.
    Avx512Vnni(Avx512Vnni),
    /// AVX2 (`vpmaddwd`), 16 multiply-adds per instruction.
    Avx2(Avx2),
    /// Portable Rust.
    Scalar,
}

impl Kernel {
    /// Names [`Kernel::by_name`] takes, fastest first.
    pub const NAMES: [&'static str; 3] = ["avx512-vnni", "avx2", "scalar"];

    /// The fastest kernel this CPU supports.
    pub fn detect() -> Kernel {
        Kernel::all_supported()[0]
    }

    /// Every kernel this CPU supports, fastest first.
    pub fn all_supported() -> Vec<Kernel> {
        Kernel::NAMES
            .iter()
            .filter_map(|name| Kernel::by_name(name).ok())
            .collect()
    }

    /// The kernel called `name` (one of [`Kernel::NAMES`]), if this CPU supports it.
    ///
    /// # Errors
    /// An unknown name, or a kernel this CPU cannot run.
    pub fn by_name(name: &str) -> Result<Kernel, EngineError> {
        let unsupported = |name| EngineError::KernelUnsupported(name);
        match name {
            "avx512-vnni" => Avx512Vnni::detect()
                .map(Kernel::Avx512Vnni)
                .ok_or(unsupported("avx512-vnni")),
            "avx2" => Avx2::detect().map(Kernel::Avx2).ok_or(unsupported("avx2")),
            "scalar" => Ok(Kernel::Scalar),
            _ => Err(EngineError::UnknownKernel(name.to_owned())),
        }
    }

    /// The kernel's name, as [`Kernel::by_name`] takes it.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Avx512Vnni(_) => "avx512-vnni",
            Kernel::Avx2(_) => "avx2",
            Kernel::Scalar => "scalar",
        }
    }

    fn tile(self, q: &[&[u16]; TILE_Q], d: &[&[u16]; TILE_D]) -> Tile {
        match self {
            Kernel::Avx512Vnni(cpu) => tile_avx512_vnni(cpu, q, d),
            Kernel::Avx2(cpu) => tile_avx2(cpu, q, d),
            Kernel::Scalar => tile_scalar(q, d),
        }
    }
}

/// Multiply-adds per second one core issues with `kernel`'s instruction on register-resident
/// data: the machine's u16 multiply-add peak that engine rates are compared against. The best
/// of five runs, so a run slowed by other load does not flatter the engine.
pub fn mac_peak(kernel: Kernel) -> f64 {
    const ITERS: u64 = 5_000_000;
    (0..5)
        .map(|_| {
            let start = std::time::Instant::now();
            let macs = match kernel {
                Kernel::Avx512Vnni(cpu) => peak_avx512_vnni(cpu, ITERS),
                Kernel::Avx2(cpu) => peak_avx2(cpu, ITERS),
                Kernel::Scalar => peak_scalar(ITERS / 8),
            };
            macs as f64 / start.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

/// The CPU dot-product engine.
#[derive(Debug)]
pub struct CpuEngine {
    kernel: Kernel,
    pool: Option<rayon::ThreadPool>,
}

impl CpuEngine {
    /// The fastest supported kernel on rayon's global pool.
    pub fn new() -> CpuEngine {
        CpuEngine {
            kernel: Kernel::detect(),
            pool: None,
        }
    }

    /// A given kernel on a dedicated pool of `threads` threads.
    ///
    /// # Errors
    /// The thread pool cannot be started.
    pub fn with(kernel: Kernel, threads: usize) -> Result<CpuEngine, EngineError> {
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|_| EngineError::Threads(threads))?;
        Ok(CpuEngine {
            kernel,
            pool: Some(pool),
        })
    }

    /// The kernel in use.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    fn run(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]) {
        let nq = queries.len() / len;
        let nd = db.len() / len;
        let zero = vec![0u16; len];
        // Each task: one block of database rows against all queries, into its own buffer.
        let blocks: Vec<(usize, Vec<u16>)> = (0..nd.div_ceil(DB_BLOCK))
            .into_par_iter()
            .map(|b| {
                let d0 = b * DB_BLOCK;
                let d1 = (d0 + DB_BLOCK).min(nd);
                let width = d1 - d0;
                let mut buf = vec![0u16; nq * width];
                for q0 in (0..nq).step_by(TILE_Q) {
                    let qs: [&[u16]; TILE_Q] = core::array::from_fn(|i| {
                        let qi = q0 + i;
                        if qi < nq {
                            &queries[qi * len..(qi + 1) * len]
                        } else {
                            &zero[..]
                        }
                    });
                    for t0 in (d0..d1).step_by(TILE_D) {
                        let ds: [&[u16]; TILE_D] = core::array::from_fn(|j| {
                            let dj = t0 + j;
                            if dj < d1 {
                                &db[dj * len..(dj + 1) * len]
                            } else {
                                &zero[..]
                            }
                        });
                        let tile = self.kernel.tile(&qs, &ds);
                        for (i, tile_row) in tile.iter().enumerate() {
                            let qi = q0 + i;
                            if qi >= nq {
                                break;
                            }
                            for (j, &v) in tile_row.iter().enumerate() {
                                let dj = t0 + j;
                                if dj >= d1 {
                                    break;
                                }
                                buf[qi * width + (dj - d0)] = v;
                            }
                        }
                    }
                }
                (d0, buf)
            })
            .collect();
        for (d0, buf) in blocks {
            let width = buf.len() / nq.max(1);
            for qi in 0..nq {
                out[qi * nd + d0..qi * nd + d0 + width]
                    .copy_from_slice(&buf[qi * width..(qi + 1) * width]);
            }
        }
    }
}

impl Default for CpuEngine {
    fn default() -> CpuEngine {
        CpuEngine::new()
    }
}

impl DotEngine for CpuEngine {
    fn name(&self) -> String {
        format!("cpu-{}", self.kernel.name())
    }

    fn dot(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]) {
        assert!(
            len > 0 && len.is_multiple_of(64),
            "vector length must be a multiple of 64"
        );
        assert_eq!(queries.len() % len, 0);
        assert_eq!(db.len() % len, 0);
        assert_eq!(out.len(), (queries.len() / len) * (db.len() / len));
        if out.is_empty() {
            return;
        }
        match &self.pool {
            Some(pool) => pool.install(|| self.run(queries, db, len, out)),
            None => self.run(queries, db, len, out),
        }
    }
}

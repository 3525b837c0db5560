//! The CPU engine: register-tiled SIMD kernels, database blocks sized for the L2 cache, rayon
//! across cores.

use rayon::prelude::*;

use super::kernels::{tile_scalar, Tile, TILE_D, TILE_Q};
use super::DotEngine;

/// Database vectors per parallel task: 16 code shares are 400 KB, inside one L2.
const DB_BLOCK: usize = 16;

/// Which micro-kernel the engine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// AVX-512 VNNI (`vpdpwssd`), 32 multiply-adds per instruction.
    Avx512Vnni,
    /// AVX2 (`vpmaddwd`), 16 multiply-adds per instruction.
    Avx2,
    /// Portable Rust.
    Scalar,
}

impl Kernel {
    /// The fastest kernel this CPU supports.
    pub fn detect() -> Kernel {
        Kernel::all_supported()[0]
    }

    /// Every kernel this CPU supports, fastest first.
    pub fn all_supported() -> Vec<Kernel> {
        let mut out = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vnni")
            {
                out.push(Kernel::Avx512Vnni);
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                out.push(Kernel::Avx2);
            }
        }
        out.push(Kernel::Scalar);
        out
    }

    #[allow(unsafe_code)]
    fn tile(self, q: &[&[u16]; TILE_Q], d: &[&[u16]; TILE_D]) -> Tile {
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: only constructed by `all_supported` after feature detection; callers
            // pass equal-length slices whose length is a multiple of 64.
            Kernel::Avx512Vnni => unsafe { super::kernels::tile_avx512_vnni(q, d) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Kernel::Avx2 => unsafe { super::kernels::tile_avx2(q, d) },
            _ => tile_scalar(q, d),
        }
    }
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

    /// A given kernel (if supported) on a dedicated pool of `threads` threads.
    pub fn with(kernel: Kernel, threads: usize) -> Option<CpuEngine> {
        if !Kernel::all_supported().contains(&kernel) {
            return None;
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .build()
            .ok()?;
        Some(CpuEngine {
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
        format!("cpu-{:?}", self.kernel).to_lowercase()
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

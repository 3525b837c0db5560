//! The CPU engine: register-tiled SIMD kernels, blocks of database rows per rayon task, the
//! vector length in chunks or whole (chosen at start by timing both).
//!
//! With chunks, a task runs its block chunk by chunk: every query tile against every
//! database tile of the block over one chunk, the accumulators kept in memory between
//! chunks. The block's chunk then stays in L1 across all query tiles, so the kernels read it
//! from there instead of streaming whole vectors from L2 for every tile.

use core::ops::Range;

use rayon::prelude::*;
use zeroize::Zeroizing;

use crate::dot::DotEngine;
use crate::engine::kernels::{
    chunk_avx2, chunk_avx512_vnni, chunk_scalar, prefetch, reduce, Acc, Avx2, Avx512Vnni, AVX2_D,
    AVX2_LANES, AVX2_Q, VNNI_D, VNNI_LANES, VNNI_Q,
};
use crate::error::EngineError;
use crate::process::thread_cpu_seconds;

/// Coefficients per chunk, a multiple of 64 like every vector length. A block's chunk is 24
/// to 32 KB, about the L1; 512 and 2048 measured no faster, with 8 to 32 rows a block.
pub const CHUNK: usize = 1024;
/// A chunk as long as the vector: each tile streams whole vectors from L2. Where L2 keeps up
/// with the multiplies (Zen 4 at one zmm `vpdpwssd` per cycle) this saves the chunking's
/// overheads, measured 5 to 10 % faster; where it does not (whole vectors reached 0.47 of the
/// peak on a core issuing two per cycle) chunks keep the block in L1.
pub const WHOLE: usize = usize::MAX;
/// The chunk lengths an engine chooses between at start, by timing both.
pub const CHUNK_CANDIDATES: [usize; 2] = [CHUNK, WHOLE];
/// Query rows per slab (rounded up to whole query tiles): four requests' 31 rotations, the
/// shape [`fastest_chunk`] times and the bench's dot phase measures.
pub const QUERY_SLAB_ROWS: usize = 124;
/// How many chunks ahead the database rows are prefetched: memory latency is not hidden by
/// the next chunk alone (measured).
const PREFETCH_CHUNKS: usize = 2;

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

    /// `queries` x `db` into `out`, as [`DotEngine::dot`], in chunks of `chunk`, on the
    /// current rayon pool.
    fn run(self, chunk: usize, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]) {
        match self {
            // Database tiles per block: 16 rows here, 6 for AVX2 (12 measured 10 % slower).
            // AVX-512 reads whole tiles' rows in place (5 % faster than through the panel);
            // AVX2 through the panel (10 % faster than in place).
            Kernel::Avx512Vnni(cpu) => tiled::<VNNI_Q, VNNI_D, VNNI_LANES>(
                (4, true, chunk),
                |q, d, stride, acc| chunk_avx512_vnni(cpu, q, d, stride, acc),
                queries,
                db,
                len,
                out,
            ),
            Kernel::Avx2(cpu) => tiled::<AVX2_Q, AVX2_D, AVX2_LANES>(
                (2, false, chunk),
                |q, d, stride, acc| chunk_avx2(cpu, q, d, stride, acc),
                queries,
                db,
                len,
                out,
            ),
            Kernel::Scalar => {
                tiled::<4, 4, 1>((4, true, chunk), chunk_scalar, queries, db, len, out)
            }
        }
    }
}

/// Rows `rows` of the row-major `len`-long vectors in `src`, padded with zero rows to a
/// multiple of `tile`, repacked chunk by chunk: the chunk at `k0` starts at `k0 * padded`
/// and holds each row's `k0..k0 + CHUNK` back to back, so a tile's chunk is one contiguous
/// run (no cache-set conflicts between rows, one stream for the prefetcher). Zeroized when
/// dropped: it copies shares.
fn pack(
    src: &[u16],
    rows: Range<usize>,
    len: usize,
    tile: usize,
    chunk: usize,
) -> Zeroizing<Vec<u16>> {
    let padded = rows.len().div_ceil(tile) * tile;
    let mut out = Zeroizing::new(vec![0u16; padded * len]);
    // Row by row, so the reads stream; the writes scatter one chunk per row.
    for (i, r) in rows.enumerate() {
        for k0 in (0..len).step_by(chunk) {
            let kl = chunk.min(len - k0);
            out[k0 * padded + i * kl..k0 * padded + (i + 1) * kl]
                .copy_from_slice(&src[r * len + k0..r * len + k0 + kl]);
        }
    }
    out
}

/// The blocked loop nest around a `Q` x `D` micro-kernel with `L`-lane accumulators, chunks of
/// `chunk` coefficients, blocks of `block_tiles` database tiles, read in place where `in_place` and the block's tiles are
/// whole, else copied chunk by chunk into a panel. Rows past the ends are zeros and their
/// results dropped.
fn tiled<const Q: usize, const D: usize, const L: usize>(
    shape: (usize, bool, usize),
    micro: impl Fn(&[u16], &[u16], usize, &mut Acc<Q, D, L>) + Sync,
    queries: &[u16],
    db: &[u16],
    len: usize,
    out: &mut [u16],
) {
    // Slabs of query rows, each against the whole database: a slab's vectors stay in cache
    // while every database block passes over them. Without slabs a batch of 64 requests with
    // their mirrored queries (3,968 rows, 100 MB of codes) is streamed from memory for every
    // block, and the kernel ran at half the speed it has on a slab.
    // Slabs run in parallel as well as the blocks inside them, so a small database still
    // keeps every thread busy.
    let slab = QUERY_SLAB_ROWS.div_ceil(Q) * Q;
    let nd = db.len() / len;
    queries
        .par_chunks(slab * len)
        .zip(out.par_chunks_mut(slab * nd))
        .for_each(|(qs, os)| tiled_slab(shape, &micro, qs, db, len, os));
}

/// [`tiled`] for one slab of query rows.
fn tiled_slab<const Q: usize, const D: usize, const L: usize>(
    (block_tiles, in_place, chunk): (usize, bool, usize),
    micro: &(impl Fn(&[u16], &[u16], usize, &mut Acc<Q, D, L>) + Sync),
    queries: &[u16],
    db: &[u16],
    len: usize,
    out: &mut [u16],
) {
    let chunk = chunk.min(len);
    let nq = queries.len() / len;
    let nd = db.len() / len;
    let block = D * block_tiles;
    let q_tiles = nq.div_ceil(Q);
    // Whole vectors: full query tiles are read in place, only the last, part tile is copied
    // (with zero rows). Chunks: every query packed chunk by chunk.
    let whole = chunk == len;
    let in_place_tiles = if whole { nq / Q } else { 0 };
    let packed_queries = pack(queries, in_place_tiles * Q..nq, len, Q, chunk);
    // Each task: one block of database rows against all queries, into its own buffer.
    let blocks: Vec<(usize, Vec<u16>)> = (0..nd.div_ceil(block))
        .into_par_iter()
        .map(|b| {
            let d0 = b * block;
            let d1 = (d0 + block).min(nd);
            let width = d1 - d0;
            let d_tiles = width.div_ceil(D);
            let d_rows = d_tiles * D;
            // The block's chunk, rows back to back: it stays in L1 while every query tile
            // passes over it.
            let part = !in_place || width != d_rows;
            let mut panel = Zeroizing::new(vec![0u16; usize::from(part) * d_rows * chunk.min(len)]);
            let mut acc = vec![[[[0i32; L]; D]; Q]; q_tiles * d_tiles];
            for k0 in (0..len).step_by(chunk) {
                let kl = chunk.min(len - k0);
                let qs: Vec<&[u16]> = (0..q_tiles)
                    .map(|t| {
                        if whole && t < in_place_tiles {
                            &queries[t * Q * len..(t + 1) * Q * len]
                        } else {
                            let t = t - in_place_tiles;
                            &packed_queries[k0 * (q_tiles - in_place_tiles) * Q + t * Q * kl..]
                                [..Q * kl]
                        }
                    })
                    .collect();
                let ahead = (k0 + PREFETCH_CHUNKS * chunk).min(len);
                let ahead_len = chunk.min(len - ahead);
                // In place the rows are `len` apart; in the panel `kl`, zero rows after the
                // block's.
                let (ds, stride) = if !part {
                    (&db[d0 * len + k0..(d1 - 1) * len + k0 + kl], len)
                } else {
                    let ds = &mut panel[..d_rows * kl];
                    for (r, dst) in (d0..d1).zip(ds.chunks_exact_mut(kl)) {
                        dst.copy_from_slice(&db[r * len + k0..r * len + k0 + kl]);
                    }
                    ds[width * kl..].fill(0);
                    (&panel[..d_rows * kl], kl)
                };
                for (t, (&q, tiles)) in qs.iter().zip(acc.chunks_exact_mut(d_tiles)).enumerate() {
                    // A later chunk of a row or two, fetched from memory while this one
                    // computes.
                    for r in (d0 + t..d1).step_by(q_tiles) {
                        prefetch(&db[r * len + ahead..r * len + ahead + ahead_len]);
                    }
                    for (dt, tile) in tiles.iter_mut().enumerate() {
                        micro(q, &ds[dt * D * stride..], stride, tile);
                    }
                }
            }
            let mut buf = vec![0u16; nq * width];
            for (t, tile) in acc.iter().enumerate() {
                let (q0, c0) = ((t / d_tiles) * Q, (t % d_tiles) * D);
                for (i, row) in tile.iter().enumerate().take(nq - q0) {
                    for (j, lanes) in row.iter().enumerate().take(width - c0) {
                        buf[(q0 + i) * width + c0 + j] = reduce(lanes);
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

/// Which of [`CHUNK_CANDIDATES`] runs `kernel` faster on this core: a batch's shape (124
/// query rotations, 32 code vectors), the best of three runs each, on this thread's CPU time.
/// Either gives the same results; this picks the loop nest for the cache this core has.
pub fn fastest_chunk(kernel: Kernel) -> usize {
    // The portable kernel is the fallback, not worth a start-up delay (seconds unoptimised).
    if kernel == Kernel::Scalar {
        return WHOLE;
    }
    // One thread, timed from inside it: the loop nest's tasks all run where the clock is.
    let Ok(pool) = rayon::ThreadPoolBuilder::new().num_threads(1).build() else {
        return CHUNK;
    };
    let len = sdk_orb::CODE_COEFS;
    let queries: Vec<u16> = (0..124 * len).map(|i| (i * 7) as u16).collect();
    let db: Vec<u16> = (0..32 * len).map(|i| (i * 13) as u16).collect();
    let mut out = vec![0u16; 124 * 32];
    let mut time = |chunk| {
        pool.install(|| {
            (0..3)
                .map(|_| {
                    let start = thread_cpu_seconds();
                    kernel.run(chunk, &queries, &db, len, &mut out);
                    thread_cpu_seconds() - start
                })
                .fold(f64::INFINITY, f64::min)
        })
    };
    let mut best = (CHUNK_CANDIDATES[0], f64::INFINITY);
    for chunk in CHUNK_CANDIDATES {
        let t = time(chunk);
        if t < best.1 {
            best = (chunk, t);
        }
    }
    best.0
}

/// The CPU dot-product engine.
#[derive(Debug)]
pub struct CpuEngine {
    kernel: Kernel,
    chunk: usize,
    pool: Option<rayon::ThreadPool>,
}

impl CpuEngine {
    /// The fastest supported kernel on rayon's global pool.
    pub fn new() -> CpuEngine {
        let kernel = Kernel::detect();
        CpuEngine {
            kernel,
            chunk: fastest_chunk(kernel),
            pool: None,
        }
    }

    /// A given kernel on a dedicated pool of `threads` threads.
    ///
    /// # Errors
    /// The thread pool cannot be started.
    pub fn with(kernel: Kernel, threads: usize) -> Result<CpuEngine, EngineError> {
        CpuEngine::with_chunk(kernel, threads, fastest_chunk(kernel))
    }

    /// A given kernel and chunk length (one of [`CHUNK_CANDIDATES`]) on a dedicated pool of
    /// `threads` threads.
    ///
    /// # Errors
    /// The thread pool cannot be started.
    pub fn with_chunk(
        kernel: Kernel,
        threads: usize,
        chunk: usize,
    ) -> Result<CpuEngine, EngineError> {
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|_| EngineError::Threads(threads))?;
        Ok(CpuEngine {
            kernel,
            chunk: chunk.max(64),
            pool: Some(pool),
        })
    }

    /// The kernel in use.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// The chunk length in use ([`WHOLE`]: whole vectors).
    pub fn chunk(&self) -> usize {
        self.chunk
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
            Some(pool) => pool.install(|| self.kernel.run(self.chunk, queries, db, len, out)),
            None => self.kernel.run(self.chunk, queries, db, len, out),
        }
    }
}

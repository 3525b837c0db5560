//! The CPU engine: broadcast register tiles ([`crate::kernels`]), query rows in slabs
//! and database rows in blocks, slabs and blocks in parallel.
//!
//! The query rows are laid out once (`interleave`) into the panels the tiles read: per
//! call, or per batch through [`Backend::prepare_queries`], since a batch's database passes
//! all read the same queries. A block task runs chunk after chunk of the vector length:
//! every database tile of the block against every query panel of the slab. A tile's
//! accumulators are results, not lane sums, so a chunk of thousands of coefficients costs one
//! load and one store of them; the slab's chunk stays in L2 while the block's tiles stream
//! over it. Where a call has fewer database rows than query rows (a request against a few
//! candidates), the database rows are laid out instead and the results transposed.

use rayon::prelude::*;
use zeroize::Zeroizing;

use crate::correlate::{self, leaf_len, DIRECT_COUPLE, DIRECT_LEAVES, LEAF_LAGS, LEAVES};
use crate::kernels::{prefetch, Acc, Avx2, Avx512Vnni, CONTIGUOUS};
use crate::tile::{dispatch, Tile};
use crate::CpuError;
use ocelli_mpc::backend::{expand_rotations, Backend};
use ocelli_mpc::network::Transport;
use ocelli_mpc::scratch::{ScratchPool, ScratchVec};
use ocelli_mpc::Session;
use sdk_orb::rotation::{CHUNK_COEFS, ROTATION_COUNT};

/// Coefficients per chunk (even, like every vector length). A slab's chunk is 512 KB at 128
/// query rows, inside L2. The default the tuner starts from ([`crate::tune`]); the runs that
/// chose it are in docs/benchmarks-history.md.
pub const CHUNK: usize = 2048;
/// Query rows per slab (rounded up to whole panels): four requests' 31 rotations. A demo
/// batch with its mirrored queries (3,968 rows, 100 MB of codes) would otherwise be streamed
/// from memory for every block.
pub const QUERY_SLAB_ROWS: usize = 124;
/// Database rows per block task (rounded down to whole tiles).
pub const BLOCK_ROWS: usize = 192;
/// Database rows whose correlation leaves ([`correlate`]) are made together, for one chunk of
/// the leaf length: 110 KB of leaves at the engine's chunk, beside the chunk's query panels
/// (295 KB for four queries) and the task's accumulators in L2. The fastest of the values tried
/// (docs/benchmarks-history.md).
pub const CORRELATION_ROWS: usize = 12;
/// Leaf rows (query, lag) a work item of the correlated loop nest takes at most (16 queries),
/// so that the leaves of a database row are made once per 16 queries. The fastest of the values
/// tried against a demo pass (docs/benchmarks-history.md).
pub const SLAB_LEAF_ROWS: usize = 128;
/// The leaf rows that [`BLOCK_ROWS`] is sized for in the correlated loop nest (four queries):
/// a slab of more takes a proportionally smaller task, so its accumulators take the same
/// room in L2.
const BUDGET_LEAF_ROWS: usize = 32;
/// Coefficients per 64-byte cache line.
const CACHE_LINE_COEFS: usize = 32;

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
    pub fn by_name(name: &str) -> Result<Kernel, CpuError> {
        let unsupported = |name| CpuError::KernelUnsupported(name);
        match name {
            "avx512-vnni" => Avx512Vnni::detect()
                .map(Kernel::Avx512Vnni)
                .ok_or(unsupported("avx512-vnni")),
            "avx2" => Avx2::detect().map(Kernel::Avx2).ok_or(unsupported("avx2")),
            "scalar" => Ok(Kernel::Scalar),
            _ => Err(CpuError::UnknownKernel(name.to_owned())),
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
}

/// The `len`-long rows of `q` in panels of `p` rows, the last padded with zero rows. Panel
/// after panel, each holds pair `k` of its every row side by side, then pair `k + 1`: a
/// chunk `k0..k0 + kl` of a panel is the run `p * k0..p * (k0 + kl)` inside it. In parallel
/// over panels; zeroized when dropped (it copies shares). The padding rows are never
/// written: they are the zeros [`ScratchPool::zeroed`] hands out.
pub(crate) fn interleave(q: &[u16], len: usize, p: usize, pool: &ScratchPool) -> ScratchVec {
    let panels = (q.len() / len).div_ceil(p);
    let mut out = pool.zeroed(panels * p * len);
    out.par_chunks_mut(p * len)
        .zip(q.par_chunks(p * len))
        .for_each(|(panel, rows)| {
            let rows: Vec<&[u16]> = rows.chunks_exact(len).collect();
            // Written in order; the panel's rows are read side by side. Pairs as arrays: a
            // two-element `copy_from_slice` here is a call to `memcpy`.
            for (k, pairs) in panel.chunks_exact_mut(2 * p).enumerate() {
                for (pair, row) in pairs.chunks_exact_mut(2).zip(&rows) {
                    let pair: &mut [u16; 2] = pair.try_into().expect("two elements");
                    *pair = row[2 * k..2 * k + 2].try_into().expect("two elements");
                }
            }
        });
    out
}

/// Rewrites each panel of `p` rows laid out by [`interleave`] into blocks of `block`
/// coefficients: block `b` of every row side by side (`block` each, fewer in the last
/// block), then block `b + 1`. A chunk starting at a multiple of `block` is still one run
/// of its panel. Nothing changes where `block` is 2.
pub(crate) fn regroup(panels: &mut [u16], len: usize, p: usize, block: usize) {
    if block == 2 {
        return;
    }
    panels.par_chunks_mut(p * len).for_each(|panel| {
        let pairs = Zeroizing::new(panel.to_vec());
        let mut out = panel.iter_mut();
        for k0 in (0..len).step_by(block) {
            for i in 0..p {
                for c in k0..(k0 + block).min(len) {
                    *out.next().expect("as long as the panel") =
                        pairs[c / 2 * 2 * p + 2 * i + c % 2];
                }
            }
        }
    });
}

/// A chunk length `tile` can start chunks at: even, at least 2, and whole blocks of its
/// query layout ([`Tile::query_block`]).
fn chunk_for(tile: Tile, chunk: usize) -> usize {
    (chunk.max(2) & !1).next_multiple_of(tile.query_block())
}

/// A tile function of the loop nests that reads database rows contiguous.
fn contiguous<const P: usize, const D: usize>(
    tile: impl Fn(&[u16], &[u16], usize, usize, &mut Acc<P, D>) + Sync,
) -> impl Fn(&[u16], &[u16], usize, &mut Acc<P, D>) + Sync {
    move |q, d, stride, acc| tile(q, d, stride, CONTIGUOUS, acc)
}

/// The loop nest around a `P` x `D` tile: slabs of query panels, each against the whole
/// database in blocks, slabs and blocks in parallel (so a small database still keeps every
/// thread busy). `panels` holds `nq` query rows as [`interleave`] lays them out.
fn tiled<const P: usize, const D: usize>(
    chunk: usize,
    tile: impl Fn(&[u16], &[u16], usize, &mut Acc<P, D>) + Sync,
    (panels, nq): (&[u16], usize),
    db: &[u16],
    len: usize,
    out: &mut [u16],
) {
    let slab = QUERY_SLAB_ROWS.div_ceil(P) * P;
    let nd = db.len() / len;
    assert_eq!(panels.len(), nq.div_ceil(P) * P * len);
    panels
        .par_chunks(slab * len)
        .zip(out.par_chunks_mut(slab * nd))
        .for_each(|(qs, os)| tiled_slab(chunk, &tile, (qs, os.len() / nd), db, len, os));
}

/// [`tiled`] for one slab of `nq` query rows.
fn tiled_slab<const P: usize, const D: usize>(
    chunk: usize,
    tile: &(impl Fn(&[u16], &[u16], usize, &mut Acc<P, D>) + Sync),
    (panels, nq): (&[u16], usize),
    db: &[u16],
    len: usize,
    out: &mut [u16],
) {
    let chunk = chunk.min(len);
    let nd = db.len() / len;
    let n_panels = panels.len() / (P * len);
    let block = (BLOCK_ROWS / D).max(1) * D;
    let blocks: Vec<Block> = (0..nd.div_ceil(block))
        .into_par_iter()
        .map(|b| {
            let d0 = b * block;
            let d1 = (d0 + block).min(nd);
            let width = d1 - d0;
            let tiles = width.div_ceil(D);
            let whole_tiles = width / D;
            // A last, part tile reads a copy padded with zero rows, not past the database.
            let mut tail = Zeroizing::new(Vec::new());
            if whole_tiles < tiles {
                tail.resize(D * len, 0);
                tail[..(width - whole_tiles * D) * len]
                    .copy_from_slice(&db[(d0 + whole_tiles * D) * len..d1 * len]);
            }
            let mut acc = vec![[[0i32; P]; D]; tiles * n_panels];
            for k0 in (0..len).step_by(chunk) {
                let kl = chunk.min(len - k0);
                for (t, accs) in acc.chunks_exact_mut(n_panels).enumerate() {
                    let rows = if t < whole_tiles {
                        &db[(d0 + t * D) * len..]
                    } else {
                        &tail[..]
                    };
                    let ds = &rows[k0..(D - 1) * len + k0 + kl];
                    for (panel, a) in panels.chunks_exact(P * len).zip(accs.iter_mut()) {
                        tile(&panel[P * k0..P * (k0 + kl)], ds, len, a);
                    }
                }
            }
            let mut buf = vec![0u16; nq * width];
            for (t, accs) in acc.chunks_exact(n_panels).enumerate() {
                for (p, a) in accs.iter().enumerate() {
                    for (j, results) in a.iter().enumerate().take(width - t * D) {
                        for (r, &v) in results.iter().enumerate().take(nq - p * P) {
                            // Mod 2^16.
                            buf[(p * P + r) * width + t * D + j] = v as u16;
                        }
                    }
                }
            }
            Block {
                first_row: 0,
                first_column: d0,
                width,
                results: buf,
            }
        })
        .collect();
    place_blocks(blocks, nd, out);
}

/// Results for a block of query rows against a block of database rows.
struct Block {
    /// The block's first query row.
    first_row: usize,
    /// The block's first database row.
    first_column: usize,
    /// Database rows in the block.
    width: usize,
    /// Its rows x width results, query row by query row.
    results: Vec<u16>,
}

/// Writes blocks of results into `out`, `nd` database rows per query row.
fn place_blocks(blocks: Vec<Block>, nd: usize, out: &mut [u16]) {
    for block in blocks {
        let (d0, width) = (block.first_column, block.width);
        for (i, results) in block.results.chunks_exact(width.max(1)).enumerate() {
            let at = (block.first_row + i) * nd + d0;
            out[at..at + width].copy_from_slice(results);
        }
    }
}

/// The loop nest of the correlated layout around a `P` x `D` tile: `panels` holds the nine
/// leaves' query panels (`bases` queries' eight lags each, laid out as [`interleave`] does,
/// by [`correlate::lagged_panel`]), `db` the rows; `chunk` is the engine's chunk.
///
/// Work items, run in parallel, are a slab of query panels (at most [`SLAB_LEAF_ROWS`] leaf
/// rows) against a task of database rows. An item walks the leaf length in chunks: the
/// slab's nine query panels for a chunk stay in L2 while the task's rows pass
/// [`CORRELATION_ROWS`] at a time, each group's leaves made for that chunk alone (so they
/// stay in L2 too) and multiplied at once. With `in_place`, where a group is whole tiles and
/// the slab one panel, only its five sum leaves are made: the tiles read the four that are
/// the rows' own elements ([`DIRECT_LEAVES`]) from the rows in place, which the prefetch has
/// brought to L2. The accumulators of the item's leaf products live across the chunks; at
/// the end the 31 rotations are combined from them. The task shrinks as the slab grows, so
/// the accumulators keep to what four queries take.
fn correlated<const P: usize, const D: usize>(
    chunk: usize,
    (tile, in_place): (
        impl Fn(&[u16], &[u16], usize, usize, &mut Acc<P, D>) + Sync,
        bool,
    ),
    (panels, bases, used): (&ScratchVec, usize, usize),
    db: &[u16],
    len: usize,
    out: &mut [u16],
) {
    let n = leaf_len(len);
    let nd = db.len() / len;
    // Each leaf's panels are laid out for all `bases`; the first `used` bases are multiplied.
    let stride = (bases * LEAF_LAGS).div_ceil(P) * P * n;
    assert_eq!(panels.len(), LEAVES * stride);
    assert!(used <= bases);
    let leaf_rows = used * LEAF_LAGS;
    let n_panels = leaf_rows.div_ceil(P);
    let slab_panels = (SLAB_LEAF_ROWS / P).clamp(1, n_panels);
    let slab_rows = slab_panels * P;
    // Whole bases per slab: panels hold a multiple of eight leaf rows.
    const { assert!(P.is_multiple_of(LEAF_LAGS)) };
    // A leaf chunk comes from a run four times as long of each row: the engine's chunk, in
    // whole steps of the AVX2 leaf transform.
    let leaf_chunk = (chunk / 4 / 16 * 16).clamp(16, n);
    let task = (BUDGET_LEAF_ROWS * BLOCK_ROWS / slab_rows / D * D).max(D);
    let group = (CORRELATION_ROWS / D).clamp(1, task / D) * D;
    let items: Vec<(usize, usize)> = (0..n_panels.div_ceil(slab_panels))
        .flat_map(|j| (0..nd.div_ceil(task)).map(move |b| (j, b)))
        .collect();
    let blocks: Vec<Block> = items
        .into_par_iter()
        // Buffers reused across a thread's items: fresh ones each time cost page faults.
        .map_init(
            || {
                (
                    Vec::new(),
                    panels.zeroed_like(LEAVES * leaf_spacing(group * leaf_chunk)),
                )
            },
            |(acc, leaves), (j, b)| {
                let slab = j * slab_panels..((j + 1) * slab_panels).min(n_panels);
                let sp = slab.len();
                // Leaf s's query panels of this slab.
                let slab_panels =
                    |s: usize| &panels[s * stride + slab.start * P * n..][..sp * P * n];
                let rows = &db[b * task * len..((b + 1) * task).min(nd) * len];
                let width = rows.len() / len;
                let tiles = width.div_ceil(D);
                // Accumulators by tile, then leaf, then query panel.
                acc.clear();
                acc.resize(tiles * LEAVES * sp, [[0i32; P]; D]);
                let steps: Vec<(usize, usize)> = (0..n)
                    .step_by(leaf_chunk)
                    .flat_map(|k0| (0..width).step_by(group).map(move |g0| (k0, g0)))
                    .collect();
                // The rows' run that a step makes leaves of: a group's rows, one leaf chunk.
                let runs = |(k0, g0): (usize, usize)| {
                    let kl = leaf_chunk.min(n - k0);
                    let here = group.min(width - g0);
                    rows[g0 * len..(g0 + here) * len]
                        .chunks_exact(len)
                        .map(move |y| &y[4 * k0..4 * (k0 + kl)])
                };
                for (i, &(k0, g0)) in steps.iter().enumerate() {
                    let kl = leaf_chunk.min(n - k0);
                    let here = group.min(width - g0);
                    let leaf_size = here.div_ceil(D) * D * kl;
                    let leaf_stride = leaf_spacing(leaf_size);
                    let whole_tiles = here.is_multiple_of(D);
                    if !whole_tiles {
                        // The last tile's missing rows read as zeros.
                        leaves.fill(0);
                    }
                    // In place pays where a copy would serve one panel: with more, the copy's
                    // reuse from L1 wins (docs/benchmarks-history.md).
                    let in_place = in_place && whole_tiles && sp == 1;
                    for (d, run) in runs((k0, g0)).enumerate() {
                        correlate::db_leaves(run, &mut leaves[d * kl..], leaf_stride, !in_place);
                    }
                    // The next step's rows are fetched while this one multiplies, a share after
                    // each tile: its leaves would otherwise wait on memory.
                    let mut upcoming = steps
                        .get(i + 1)
                        .into_iter()
                        .flat_map(|&next| runs(next))
                        .flat_map(|run| run.chunks(CACHE_LINE_COEFS));
                    let calls = LEAVES * here.div_ceil(D) * sp;
                    let share = (group * 4 * leaf_chunk).div_ceil(CACHE_LINE_COEFS * calls);
                    for (s, leaf) in leaves.chunks_exact(leaf_stride).take(LEAVES).enumerate() {
                        let queries = slab_panels(s);
                        for t in 0..here.div_ceil(D) {
                            // Tile t's rows of leaf s: in place (the chunk's run of each row,
                            // from element r of its first group), or the copy.
                            let (ds, stride, couple) = match DIRECT_LEAVES[s] {
                                Some(r) if in_place => {
                                    let at = (g0 + t * D) * len + 4 * k0 + 4 * r;
                                    (&rows[at..], len, DIRECT_COUPLE)
                                }
                                _ => (&leaf[t * D * kl..(t + 1) * D * kl], kl, CONTIGUOUS),
                            };
                            let at = ((g0 / D + t) * LEAVES + s) * sp;
                            for (panel, a) in queries.chunks_exact(P * n).zip(&mut acc[at..at + sp])
                            {
                                tile(&panel[P * k0..P * (k0 + kl)], ds, stride, couple, a);
                                upcoming.by_ref().take(share).for_each(prefetch);
                            }
                        }
                    }
                }
                let slab_leaf_rows = (sp * P).min(leaf_rows - slab.start * P);
                let buf = rotations_from_leaves(acc, sp, slab_leaf_rows, width);
                Block {
                    first_row: slab.start * P / LEAF_LAGS * ROTATION_COUNT,
                    first_column: b * task,
                    width,
                    results: buf,
                }
            },
        )
        .collect();
    place_blocks(blocks, nd, out);
}

/// Distance between two leaves of `size` in the correlated loop nest's buffer: a cache line
/// more than the leaf, since leaves a power of two apart would put the nine rows of stores
/// into one set of the 8-way L1, where they evict each other.
fn leaf_spacing(size: usize) -> usize {
    size + CACHE_LINE_COEFS
}

/// The 31 rotations' results (base by base, `width` database rows each) from a work item's
/// accumulators of the correlated loop nest (by tile, leaf and panel: `panels` panels holding
/// `leaf_rows` rows of eight lags per base).
fn rotations_from_leaves<const P: usize, const D: usize>(
    acc: &[Acc<P, D>],
    panels: usize,
    leaf_rows: usize,
    width: usize,
) -> Vec<u16> {
    // Leaf s's results at leaf row r for the item's rows, mod 2^16.
    let part = leaf_rows * width;
    let mut results = vec![0u16; LEAVES * part];
    // Written in order, a leaf row's results tile by tile: scattered two-byte stores cost
    // more than the strided reads.
    for (s, leaf) in results.chunks_exact_mut(part).enumerate() {
        for (row, out) in leaf.chunks_exact_mut(width).enumerate() {
            let (p, r) = (row / P, row % P);
            for (t, out) in out.chunks_mut(D).enumerate() {
                let a = &acc[(t * LEAVES + s) * panels + p];
                for (v, results) in out.iter_mut().zip(a) {
                    *v = results[r] as u16;
                }
            }
        }
    }
    let mut buf = vec![0u16; leaf_rows / LEAF_LAGS * ROTATION_COUNT * width];
    for (base, out) in buf.chunks_exact_mut(ROTATION_COUNT * width).enumerate() {
        let leaf = |s: usize, i: usize| {
            let at = s * part + (base * LEAF_LAGS + i) * width;
            &results[at..at + width]
        };
        correlate::combine(leaf, width, out);
    }
    buf
}

/// The CPU dot-product engine.
#[derive(Debug)]
pub struct CpuEngine {
    tile: Tile,
    chunk: usize,
    pool: Option<rayon::ThreadPool>,
}

impl CpuEngine {
    /// The fastest supported kernel on rayon's global pool.
    pub fn new() -> CpuEngine {
        CpuEngine {
            tile: Tile::default_for(Kernel::detect()),
            chunk: CHUNK,
            pool: None,
        }
    }

    /// A given kernel on a dedicated pool of `threads` threads.
    ///
    /// # Errors
    /// The thread pool cannot be started.
    pub fn with(kernel: Kernel, threads: usize) -> Result<CpuEngine, CpuError> {
        CpuEngine::with_chunk(kernel, threads, CHUNK)
    }

    /// A given kernel and chunk length (even, at least 2; [`CHUNK`] is the measured choice)
    /// on a dedicated pool of `threads` threads.
    ///
    /// # Errors
    /// The thread pool cannot be started.
    pub fn with_chunk(kernel: Kernel, threads: usize, chunk: usize) -> Result<CpuEngine, CpuError> {
        CpuEngine::with_tile(Tile::default_for(kernel), threads, chunk)
    }

    /// A given tile shape and chunk length (even, at least 2), as the tuner picks them
    /// ([`crate::tune`]), on a dedicated pool of `threads` threads.
    ///
    /// # Errors
    /// The thread pool cannot be started.
    pub fn with_tile(tile: Tile, threads: usize, chunk: usize) -> Result<CpuEngine, CpuError> {
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|_| CpuError::Threads(threads))?;
        Ok(CpuEngine {
            tile,
            chunk: chunk_for(tile, chunk),
            pool: Some(pool),
        })
    }

    /// The same tile and chunk on the current rayon pool: what the tuner times on one thread.
    pub(crate) fn on_current_pool(tile: Tile, chunk: usize) -> CpuEngine {
        CpuEngine {
            tile,
            chunk: chunk_for(tile, chunk),
            pool: None,
        }
    }

    /// The kernel in use.
    pub fn kernel(&self) -> Kernel {
        self.tile.kernel()
    }

    /// The tile shape in use.
    pub fn tile(&self) -> Tile {
        self.tile
    }

    /// The chunk length in use, in coefficients.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// `f` on the engine's pool (or the current one).
    fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(pool) => pool.install(f),
            None => f(),
        }
    }

    /// Rows of `len` in the panels this engine's tile reads.
    fn lay_out(&self, rows: &[u16], len: usize, pool: &ScratchPool) -> ScratchVec {
        let p = self.tile.panel_rows();
        self.install(|| {
            let mut panels = interleave(rows, len, p, pool);
            regroup(&mut panels, len, p, self.tile.query_block());
            panels
        })
    }

    /// [`Backend::dot`] for queries laid out by [`interleave`] for this engine's kernel.
    fn dot_panels(&self, panels: &[u16], nq: usize, db: &[u16], len: usize, out: &mut [u16]) {
        assert!(
            len > 0 && len.is_multiple_of(64),
            "vector length must be a multiple of 64"
        );
        assert_eq!(db.len() % len, 0);
        assert_eq!(out.len(), nq * (db.len() / len));
        if out.is_empty() {
            return;
        }
        let chunk = self.chunk;
        macro_rules! go {
            ($p:literal, $d:literal, $tile:expr, $in_place:expr) => {
                tiled::<$p, $d>(chunk, contiguous($tile), (panels, nq), db, len, out)
            };
        }
        self.install(|| dispatch!(self.tile, go));
    }

    /// Multiply-adds for the rotations of `bases` queries of length `len` against one
    /// database row, each layout counted in whole panels of this kernel: the rotations as
    /// rows, and the correlation leaves where the length splits into them.
    fn rotation_costs(&self, bases: usize, len: usize) -> (usize, Option<usize>) {
        let p = self.tile.panel_rows();
        let rows = (bases * ROTATION_COUNT).div_ceil(p) * p * len;
        let fits = len.is_multiple_of(CHUNK_COEFS) && leaf_len(len).is_multiple_of(64);
        let leaves = LEAVES * (bases * LEAF_LAGS).div_ceil(p) * p * leaf_len(len);
        (rows, fits.then_some(leaves))
    }

    /// Whether `bases` queries' correlation leaves take fewer multiply-adds than their
    /// rotations.
    fn correlation_pays(&self, bases: usize, len: usize) -> bool {
        let (rows, leaves) = self.rotation_costs(bases, len);
        leaves.is_some_and(|leaves| leaves < rows)
    }

    /// Multiply-adds the kernel runs for the rotations of `bases` queries of length `len`
    /// against one database row ([`Backend::prepare_rotations`]), panel padding included.
    pub fn rotation_macs(&self, bases: usize, len: usize) -> usize {
        let (rows, leaves) = self.rotation_costs(bases, len);
        leaves.map_or(rows, |leaves| leaves.min(rows))
    }

    /// [`Backend::dot_db_prepared`] for correlated queries (`bases` of
    /// them, `panels` their leaves), the first `used` of them, on the engine's pool.
    fn dot_correlated(
        &self,
        (panels, bases, used): (&ScratchVec, usize, usize),
        db: &[u16],
        len: usize,
        out: &mut [u16],
    ) {
        assert_eq!(db.len() % len, 0);
        assert_eq!(out.len(), used * ROTATION_COUNT * (db.len() / len));
        if out.is_empty() {
            return;
        }
        let queries = (panels, bases, used);
        let chunk = self.chunk;
        macro_rules! go {
            ($p:literal, $d:literal, $tile:expr, $in_place:expr) => {
                correlated::<$p, $d>(chunk, ($tile, $in_place), queries, db, len, out)
            };
        }
        self.install(|| dispatch!(self.tile, go));
    }
}

impl Default for CpuEngine {
    fn default() -> CpuEngine {
        CpuEngine::new()
    }
}

/// How [`CpuQueries`] holds its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// Panels of this many rows (the last padded with zero rows), each pair of coefficients
    /// of every row of a panel side by side: the tiles' layout ([`crate::kernels`]).
    Panels(usize),
    /// The nine leaves of [`crate::correlate`], eight lags per query each, every leaf in
    /// panels of this many rows: the rotation groups.
    Correlated(usize),
}

/// Query vectors laid out for the CPU engine's kernel ([`Backend::prepare_queries`]).
/// Zeroized on drop.
#[derive(Debug)]
pub struct CpuQueries {
    rows: usize,
    layout: Layout,
    data: ScratchVec,
}

impl Backend for CpuEngine {
    type Prepared = CpuQueries;
    type Circuit<'s, 'n: 's, T: Transport + 'n> = &'s mut Session<'n, T>;

    fn circuit<'s, 'n: 's, T: Transport + 'n>(
        &'s self,
        session: &'s mut Session<'n, T>,
    ) -> &'s mut Session<'n, T> {
        session
    }

    fn prepared_rows(queries: &CpuQueries) -> usize {
        queries.rows
    }

    fn name(&self) -> String {
        format!("cpu-{}", self.tile.kernel().name())
    }

    fn dot(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]) {
        assert!(
            len > 0 && len.is_multiple_of(64),
            "vector length must be a multiple of 64"
        );
        assert_eq!(queries.len() % len, 0);
        let nq = queries.len() / len;
        if nq == 0 || db.is_empty() {
            assert_eq!(db.len() % len, 0);
            assert!(out.is_empty());
            return;
        }
        let nd = db.len() / len;
        if nd >= nq {
            // Queries given as rows are laid out for this call alone: nothing to keep.
            let once = ScratchPool::keeping(0);
            let panels = self.lay_out(queries, len, &once);
            self.dot_panels(&panels, nq, db, len, out);
        } else {
            // Fewer database rows: those are laid out, the queries read in place, and the
            // results transposed (a request against a few candidates or one entry).
            let once = ScratchPool::keeping(0);
            let panels = self.lay_out(db, len, &once);
            let mut transposed = vec![0u16; nd * nq];
            self.dot_panels(&panels, nd, queries, len, &mut transposed);
            for (d, results) in transposed.chunks_exact(nq).enumerate() {
                for (q, &v) in results.iter().enumerate() {
                    out[q * nd + d] = v;
                }
            }
        }
    }

    fn prepare_queries(&self, queries: ScratchVec, len: usize) -> CpuQueries {
        let rows = queries.len() / len;
        let panel = self.tile.panel_rows();
        CpuQueries {
            rows,
            layout: Layout::Panels(panel),
            data: self.lay_out(&queries, len, queries.pool()),
        }
    }

    fn prepare_rotations(&self, queries: ScratchVec, len: usize) -> CpuQueries {
        let bases = queries.len() / len;
        if !self.correlation_pays(bases, len) {
            return self.prepare_queries(expand_rotations(&queries, len, queries.pool()), len);
        }
        let p = self.tile.panel_rows();
        let n = leaf_len(len);
        let leaf_rows = bases * LEAF_LAGS;
        let stride = leaf_rows.div_ceil(p) * p * n;
        let mut data = queries.zeroed_like(LEAVES * stride);
        // Every query's nine leaves, leaf `s` of query `b` at `(b * LEAVES + s) * n`.
        let mut leaves = queries.zeroed_like(bases * LEAVES * n);
        self.install(|| {
            leaves
                .par_chunks_mut(LEAVES * n)
                .zip(queries.par_chunks(len))
                .for_each(|(out, x)| correlate::query_leaves(x, out));
            let leaf = |b: usize, s: usize| &leaves[(b * LEAVES + s) * n..][..n];
            for (s, panels) in data.chunks_exact_mut(stride).enumerate() {
                panels
                    .par_chunks_mut(p * n)
                    .enumerate()
                    .for_each(|(j, panel)| {
                        let first = j * p / LEAF_LAGS;
                        let rows = (leaf_rows - j * p).min(p);
                        correlate::lagged_panel(|b| leaf(first + b, s), rows, p, panel);
                        regroup(panel, n, p, self.tile.query_block());
                    });
            }
        });
        CpuQueries {
            rows: bases * ROTATION_COUNT,
            layout: Layout::Correlated(p),
            data,
        }
    }

    fn dot_prepared_rows(
        &self,
        queries: &CpuQueries,
        rows: usize,
        db: &[u16],
        len: usize,
        out: &mut [u16],
    ) {
        assert!(rows <= queries.rows, "more rows than were prepared");
        // The layout was made by this engine, whose kernel (and so panel height) is fixed.
        match queries.layout {
            // Panels hold consecutive rows: the panels of the first rows are a prefix.
            Layout::Panels(p) => {
                let panels = &queries.data[..rows.div_ceil(p) * p * len];
                self.dot_panels(panels, rows, db, len, out)
            }
            Layout::Correlated(_) => {
                assert!(
                    rows.is_multiple_of(ROTATION_COUNT),
                    "whole queries' rotations"
                );
                let bases = queries.rows / ROTATION_COUNT;
                let used = rows / ROTATION_COUNT;
                self.dot_correlated((&queries.data, bases, used), db, len, out)
            }
        }
    }
}

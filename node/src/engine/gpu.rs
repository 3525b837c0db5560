//! The GPU engine: u16 dot products mod 2^16 as int8 tensor-core GEMMs through cuBLAS
//! (`cublasGemmEx`, i8 inputs, i32 accumulation), with the enrolled database resident in
//! device memory.
//!
//! Every vector is stored split into shifted low and high bytes with its correction term (see
//! [`super::split`]). One product block is three GEMMs, `DB_lo^T Q_lo` into one i32 buffer and
//! `DB_lo^T Q_hi + DB_hi^T Q_lo` into another, then the `combine` kernel (compiled at run time
//! with NVRTC) adds the corrections and writes u16 results in the engine's layout.
//!
//! cudarc loads libcuda, libnvrtc and libcublas when the engine is created, so the node builds
//! and runs without them; [`GpuEngine::new`] says which is missing.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::cublas::result::{gemm_ex, CublasError};
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr,
    DriverError, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};
use cudarc::nvrtc::CompileError;
use zeroize::Zeroize;

use super::mirror::{Mirror, RowStore, Sharded};
use super::split::{length_term, split_bytes, KERNELS_CU};
use super::{DotEngine, Part};
use crate::pipeline::MatchDb;

/// GEMM dimensions are padded to this: cuBLAS's int8 tensor-core kernels want multiples of 4.
const PAD: usize = 4;
/// Rows moved per copy when a deletion or an out-of-order insertion shifts the database.
const MOVE_CHUNK: usize = 1024;
/// Rows split on the host and uploaded per copy when loading.
const LOAD_CHUNK: usize = 1024;

/// Why the GPU engine cannot run.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No CUDA driver library.
    #[error("no CUDA driver library (libcuda.so) could be loaded: no NVIDIA driver here")]
    NoDriver,
    /// No NVRTC library.
    #[error("no NVRTC library (libnvrtc.so, CUDA 12 toolkit or the nvidia-cuda-nvrtc package)")]
    NoNvrtc,
    /// No cuBLAS library.
    #[error("no cuBLAS library (libcublas.so, CUDA 12 toolkit or the nvidia-cublas package)")]
    NoCublas,
    /// The driver sees no such device.
    #[error("no CUDA device {ordinal} ({count} present)")]
    NoDevice {
        /// The device asked for.
        ordinal: usize,
        /// Devices present.
        count: i32,
    },
    /// A driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(#[from] DriverError),
    /// A cuBLAS call failed.
    #[error("cuBLAS: {0}")]
    Blas(#[from] CublasError),
    /// The kernels did not compile.
    #[error("NVRTC: {0}")]
    Compile(#[from] CompileError),
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Reallocates `buf` (contents lost) when it holds fewer than `n` elements. Every buffer here
/// holds shares or products of shares: the old one is zeroed before it is freed.
fn ensure<T: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    buf: &mut CudaSlice<T>,
    n: usize,
) -> Result<(), DriverError> {
    if buf.len() < n {
        stream.memset_zeros(buf)?;
        *buf = stream.alloc_zeros(round_up(n, 1 << 20))?;
    }
    Ok(())
}

/// Host-side split of `rows` vectors of `len`, ready to upload.
struct Split {
    lo: Vec<i8>,
    hi: Vec<i8>,
    corrections: Vec<u16>,
}

impl Split {
    fn of(vectors: &[u16], len: usize) -> Split {
        let n = vectors.len();
        let mut s = Split {
            lo: vec![0; n],
            hi: vec![0; n],
            corrections: Vec::with_capacity(n / len),
        };
        for ((v, lo), hi) in vectors
            .chunks_exact(len)
            .zip(s.lo.chunks_exact_mut(len))
            .zip(s.hi.chunks_exact_mut(len))
        {
            s.corrections.push(split_bytes(v, lo, hi));
        }
        s
    }
}

impl Drop for Split {
    fn drop(&mut self) {
        self.lo.zeroize();
        self.hi.zeroize();
    }
}

/// Split vectors of one length on the device, `rows` of them in use and room for more.
struct Plane {
    len: usize,
    lo: CudaSlice<i8>,
    hi: CudaSlice<i8>,
    corrections: CudaSlice<u16>,
}

impl Plane {
    fn new(stream: &Arc<CudaStream>, len: usize, capacity: usize) -> Result<Plane, DriverError> {
        Ok(Plane {
            len,
            lo: stream.alloc_zeros(capacity * len)?,
            hi: stream.alloc_zeros(capacity * len)?,
            corrections: stream.alloc_zeros(capacity)?,
        })
    }

    /// Rows of the current length that fit.
    fn capacity(&self) -> usize {
        self.corrections.len().min(self.lo.len() / self.len)
    }

    /// Uploads `split` as rows `row..`.
    fn upload(
        &mut self,
        stream: &Arc<CudaStream>,
        row: usize,
        split: &Split,
    ) -> Result<(), DriverError> {
        let n = split.corrections.len();
        let at = row * self.len..(row + n) * self.len;
        stream.memcpy_htod(&split.lo, &mut self.lo.slice_mut(at.clone()))?;
        stream.memcpy_htod(&split.hi, &mut self.hi.slice_mut(at))?;
        stream.memcpy_htod(
            &split.corrections,
            &mut self.corrections.slice_mut(row..row + n),
        )
    }

    /// Zeroes the whole allocation.
    fn wipe(&mut self, stream: &Arc<CudaStream>) -> Result<(), DriverError> {
        stream.memset_zeros(&mut self.lo)?;
        stream.memset_zeros(&mut self.hi)?;
        stream.memset_zeros(&mut self.corrections)
    }

    fn zero_rows(
        &mut self,
        stream: &Arc<CudaStream>,
        rows: core::ops::Range<usize>,
    ) -> Result<(), DriverError> {
        let at = rows.start * self.len..rows.end * self.len;
        stream.memset_zeros(&mut self.lo.slice_mut(at.clone()))?;
        stream.memset_zeros(&mut self.hi.slice_mut(at))?;
        stream.memset_zeros(&mut self.corrections.slice_mut(rows))
    }
}

/// Moves rows `from..from + count` of `buf` (rows of `row_len`) to start at row `to`, through
/// `temp`: device-to-device copies must not overlap.
fn move_rows<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    buf: &mut CudaSlice<T>,
    temp: &mut CudaSlice<T>,
    row_len: usize,
    (from, to, count): (usize, usize, usize),
) -> Result<(), DriverError> {
    let chunk = (temp.len() / row_len).max(1);
    let starts: Vec<usize> = (0..count).step_by(chunk).collect();
    // Moving down, copy the last chunk first; moving up, the first: never read a row already
    // overwritten.
    let order: Box<dyn Iterator<Item = &usize>> = if to > from {
        Box::new(starts.iter().rev())
    } else {
        Box::new(starts.iter())
    };
    for &s in order {
        let n = chunk.min(count - s);
        let src = (from + s) * row_len..(from + s + n) * row_len;
        let dst = (to + s) * row_len..(to + s + n) * row_len;
        stream.memcpy_dtod(&buf.slice(src), &mut temp.slice_mut(0..n * row_len))?;
        stream.memcpy_dtod(&temp.slice(0..n * row_len), &mut buf.slice_mut(dst))?;
    }
    Ok(())
}

/// One party's enrolled database on the device: code and trimmed-mask planes of both eyes,
/// rows in the [`MatchDb`]'s order, with `PAD` spare rows so padded GEMMs stay in bounds.
struct DeviceDb {
    stream: Arc<CudaStream>,
    /// `[eye * 2 + (0 code | 1 mask)]`.
    planes: [Plane; 4],
    rows: usize,
    temp_i8: CudaSlice<i8>,
    temp_u16: CudaSlice<u16>,
}

fn plane_index(eye: usize, part: Part) -> usize {
    eye * 2 + usize::from(part == Part::Mask)
}

impl DeviceDb {
    fn new(stream: Arc<CudaStream>) -> Result<DeviceDb, DriverError> {
        let capacity = LOAD_CHUNK + PAD;
        let plane = |part: Part| Plane::new(&stream, part.coefs(), capacity);
        let planes = [
            plane(Part::Code)?,
            plane(Part::Mask)?,
            plane(Part::Code)?,
            plane(Part::Mask)?,
        ];
        Ok(DeviceDb {
            temp_i8: stream.alloc_zeros(MOVE_CHUNK * Part::Code.coefs())?,
            temp_u16: stream.alloc_zeros(MOVE_CHUNK)?,
            planes,
            rows: 0,
            stream,
        })
    }

    /// Makes room for `rows` rows (plus padding), keeping the rows in use.
    fn reserve(&mut self, rows: usize) -> Result<(), DriverError> {
        let needed = rows + PAD;
        if self.planes[0].capacity() >= needed {
            return Ok(());
        }
        let capacity = needed.max(self.planes[0].capacity() * 2);
        for plane in &mut self.planes {
            let mut grown = Plane::new(&self.stream, plane.len, capacity)?;
            let used = self.rows * plane.len;
            self.stream
                .memcpy_dtod(&plane.lo.slice(0..used), &mut grown.lo.slice_mut(0..used))?;
            self.stream
                .memcpy_dtod(&plane.hi.slice(0..used), &mut grown.hi.slice_mut(0..used))?;
            self.stream.memcpy_dtod(
                &plane.corrections.slice(0..self.rows),
                &mut grown.corrections.slice_mut(0..self.rows),
            )?;
            // The old allocation is freed on drop; zero it first, shares must not linger.
            plane.wipe(&self.stream)?;
            *plane = grown;
        }
        Ok(())
    }

    /// Moves rows `from..self.rows` to start at `to`.
    fn shift(&mut self, from: usize, to: usize) -> Result<(), DriverError> {
        let count = self.rows - from;
        for plane in &mut self.planes {
            let moved = (from, to, count);
            for bytes in [&mut plane.lo, &mut plane.hi] {
                move_rows(&self.stream, bytes, &mut self.temp_i8, plane.len, moved)?;
            }
            move_rows(
                &self.stream,
                &mut plane.corrections,
                &mut self.temp_u16,
                1,
                moved,
            )?;
        }
        Ok(())
    }
}

impl Drop for DeviceDb {
    fn drop(&mut self) {
        // Best effort: a failing device cannot be zeroed, and its memory goes with it.
        for plane in &mut self.planes {
            let _ = plane.wipe(&self.stream);
        }
        let _ = self.stream.synchronize();
    }
}

impl RowStore for DeviceDb {
    type Error = DriverError;

    fn load(&mut self, db: &MatchDb, rows: core::ops::Range<usize>) -> Result<(), DriverError> {
        if self.rows > 0 {
            for plane in &mut self.planes {
                plane.zero_rows(&self.stream, 0..self.rows)?;
            }
        }
        self.rows = 0;
        self.reserve(rows.len())?;
        for start in rows.clone().step_by(LOAD_CHUNK) {
            let end = (start + LOAD_CHUNK).min(rows.end);
            for eye in 0..2 {
                for part in [Part::Code, Part::Mask] {
                    let split = Split::of(db.vectors(eye, part, start..end), part.coefs());
                    let plane = &mut self.planes[plane_index(eye, part)];
                    plane.upload(&self.stream, start - rows.start, &split)?;
                }
            }
        }
        self.rows = rows.len();
        self.stream.synchronize()
    }

    fn rows(&self) -> usize {
        self.rows
    }

    fn insert_gap(&mut self, row: usize) -> Result<(), DriverError> {
        self.reserve(self.rows + 1)?;
        self.shift(row, row + 1)?;
        self.rows += 1;
        Ok(())
    }

    fn remove(&mut self, row: usize) -> Result<(), DriverError> {
        self.shift(row + 1, row)?;
        self.rows -= 1;
        let last = self.rows;
        for plane in &mut self.planes {
            plane.zero_rows(&self.stream, last..last + 1)?;
        }
        Ok(())
    }

    fn write(&mut self, row: usize, db: &MatchDb, from: Option<usize>) -> Result<(), DriverError> {
        for eye in 0..2 {
            for part in [Part::Code, Part::Mask] {
                let plane = &mut self.planes[plane_index(eye, part)];
                match from {
                    Some(f) => {
                        let split = Split::of(db.vectors(eye, part, f..f + 1), part.coefs());
                        plane.upload(&self.stream, row, &split)?;
                    }
                    None => plane.zero_rows(&self.stream, row..row + 1)?,
                }
            }
        }
        // The host split buffers are dropped (and zeroed) on return: finish the copies first.
        self.stream.synchronize()
    }
}

/// GEMM outputs and the combined result.
struct Outputs {
    ll: CudaSlice<i32>,
    cross: CudaSlice<i32>,
    out: CudaSlice<u16>,
}

/// Device buffers reused across calls; grown on demand.
struct Scratch {
    /// Queries, padded to whole [`PAD`] rows.
    q: Plane,
    /// Database vectors passed from the host ([`DotEngine::dot`]), padded likewise.
    d: Plane,
    outputs: Outputs,
}

impl Scratch {
    fn new(stream: &Arc<CudaStream>) -> Result<Scratch, DriverError> {
        Ok(Scratch {
            q: Plane::new(stream, 64, 1)?,
            d: Plane::new(stream, 64, 1)?,
            outputs: Outputs {
                ll: stream.alloc_zeros(1)?,
                cross: stream.alloc_zeros(1)?,
                out: stream.alloc_zeros(1)?,
            },
        })
    }
}

/// Uploads `vectors` into `plane` as `rows_pad` rows of `len`, the padding zero.
fn stage(
    stream: &Arc<CudaStream>,
    plane: &mut Plane,
    vectors: &[u16],
    len: usize,
    rows_pad: usize,
) -> Result<(), DriverError> {
    plane.len = len;
    if plane.capacity() < rows_pad {
        plane.wipe(stream)?;
        *plane = Plane::new(stream, len, round_up(rows_pad, 256))?;
    }
    let rows = vectors.len() / len;
    plane.upload(stream, 0, &Split::of(vectors, len))?;
    if rows_pad > rows {
        plane.zero_rows(stream, rows..rows_pad)?;
    }
    Ok(())
}

/// `C = A^T B + beta C` in column-major storage: `A` is `k x m` (one database vector per
/// column), op T makes it `m x k`; `B` is `k x n` (one query per column); `C` is `m x n`, i32.
fn int8_gemm(
    blas: &CudaBlas,
    (m, n, k): (usize, usize, usize),
    (a, b, c): (u64, u64, u64),
    beta: i32,
) -> Result<(), CublasError> {
    let alpha = 1i32;
    // SAFETY: callers pass live device allocations of at least these sizes on the handle's
    // stream; alpha and beta are host i32 scalars, as CUBLAS_COMPUTE_32I requires in the
    // default pointer mode.
    unsafe {
        gemm_ex(
            *blas.handle(),
            cublasOperation_t::CUBLAS_OP_T,
            cublasOperation_t::CUBLAS_OP_N,
            m as i32,
            n as i32,
            k as i32,
            (&alpha as *const i32).cast::<c_void>(),
            a as *const c_void,
            cudaDataType::CUDA_R_8I,
            k as i32,
            b as *const c_void,
            cudaDataType::CUDA_R_8I,
            k as i32,
            (&beta as *const i32).cast::<c_void>(),
            c as *mut c_void,
            cudaDataType::CUDA_R_32I,
            m as i32,
            cublasComputeType_t::CUBLAS_COMPUTE_32I,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
}

/// Dense int8 tensor operations per second from NVIDIA's data sheets, by device name.
pub fn int8_dense_peak(name: &str) -> Option<f64> {
    let name = name.to_ascii_uppercase();
    let tops = if name.contains("H200") {
        1979.0
    } else if name.contains("H100") && name.contains("PCIE") {
        1513.0
    } else if name.contains("H100") && name.contains("NVL") {
        1671.0
    } else if name.contains("H100") {
        1979.0
    } else if name.contains("A100") {
        624.0
    } else {
        return None;
    };
    Some(tops * 1e12)
}

/// The entry point in [`KERNELS_CU`] that [`Device`] loads.
const COMBINE_KERNEL: &str = "combine";

/// [`KERNELS_CU`] as PTX: for NVRTC's default virtual architecture, as each device compiles
/// it at start, or for `arch`.
fn compile_kernels(arch: Option<&'static str>) -> Result<cudarc::nvrtc::Ptx, CompileError> {
    let opts = cudarc::nvrtc::CompileOptions {
        arch,
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(KERNELS_CU, opts)
}

/// One device: its context, stream, kernel, cuBLAS handle and scratch buffers.
struct Device {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    combine: CudaFunction,
    blas: CudaBlas,
    scratch: Scratch,
}

impl Device {
    fn new(ordinal: usize) -> Result<Device, GpuError> {
        let ctx = CudaContext::new(ordinal)?;
        let stream = ctx.new_stream()?;
        let ptx = compile_kernels(None)?;
        let combine = ctx.load_module(ptx)?.load_function(COMBINE_KERNEL)?;
        let blas = CudaBlas::new(stream.clone())?;
        let scratch = Scratch::new(&stream)?;
        Ok(Device {
            ctx,
            stream,
            combine,
            blas,
            scratch,
        })
    }

    /// `out = db^T q`: rows `first..first + m` of `db` against `queries` (host vectors of
    /// `db.len`), `out` row-major `n x m`.
    fn product(
        &mut self,
        queries: &[u16],
        db: Option<&Plane>,
        first: usize,
        m: usize,
        out: &mut [u16],
    ) -> Result<(), GpuError> {
        self.ctx.bind_to_thread()?;
        let stream = &self.stream;
        let Scratch { q, d, outputs } = &mut self.scratch;
        let db = db.unwrap_or(d);
        let len = db.len;
        let n = queries.len() / len;
        let (m_pad, n_pad) = (round_up(m, PAD), round_up(n, PAD));
        stage(stream, q, queries, len, n_pad)?;
        assert_eq!(out.len(), m * n);
        assert!(first + m_pad <= db.capacity() && n_pad <= q.capacity());
        ensure(stream, &mut outputs.ll, m_pad * n_pad)?;
        ensure(stream, &mut outputs.cross, m_pad * n_pad)?;
        ensure(stream, &mut outputs.out, m * n)?;
        let a = first * len..(first + m_pad) * len;
        let b = 0..n_pad * len;
        {
            let views = (
                db.lo.slice(a.clone()),
                db.hi.slice(a),
                q.lo.slice(b.clone()),
                q.hi.slice(b),
            );
            let (a_lo, _a_lo) = views.0.device_ptr(stream);
            let (a_hi, _a_hi) = views.1.device_ptr(stream);
            let (b_lo, _b_lo) = views.2.device_ptr(stream);
            let (b_hi, _b_hi) = views.3.device_ptr(stream);
            let (ll, _ll) = outputs.ll.device_ptr_mut(stream);
            let (cross, _cross) = outputs.cross.device_ptr_mut(stream);
            let shape = (m_pad, n_pad, len);
            int8_gemm(&self.blas, shape, (a_lo, b_lo, ll), 0)?;
            int8_gemm(&self.blas, shape, (a_lo, b_hi, cross), 0)?;
            int8_gemm(&self.blas, shape, (a_hi, b_lo, cross), 1)?;
        }
        let c_db = db.corrections.slice(first..first + m);
        let (m32, m_pad32, n32) = (m as u32, m_pad as u32, n as u32);
        let length = u32::from(length_term(len));
        let config = LaunchConfig {
            grid_dim: (m32.div_ceil(256), n32.min(65_535), 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = stream.launch_builder(&self.combine);
        launch
            .arg(&outputs.ll)
            .arg(&outputs.cross)
            .arg(&c_db)
            .arg(&q.corrections)
            .arg(&mut outputs.out)
            .arg(&m32)
            .arg(&m_pad32)
            .arg(&n32)
            .arg(&length);
        // SAFETY: the argument list matches `combine`'s signature in KERNELS_CU; every index
        // the kernel forms is below the sizes ensured above.
        unsafe { launch.launch(config) }?;
        stream.memcpy_dtoh(&outputs.out.slice(0..m * n), out)?;
        stream.synchronize()?;
        Ok(())
    }

    /// Int8 operations per second of the three GEMM calls on resident `m x k` by `k x n`
    /// operands, `repeats` times, without transfers or the combine kernel.
    fn gemm_ops_per_second(
        &self,
        (m, n, k): (usize, usize, usize),
        repeats: usize,
    ) -> Result<f64, GpuError> {
        self.ctx.bind_to_thread()?;
        let (m, n) = (round_up(m, PAD), round_up(n, PAD));
        let stream = &self.stream;
        let a: CudaSlice<i8> = stream.clone_htod(&vec![3i8; m * k])?;
        let b: CudaSlice<i8> = stream.clone_htod(&vec![-5i8; n * k])?;
        let mut c: CudaSlice<i32> = stream.alloc_zeros(m * n)?;
        let run = |c: &mut CudaSlice<i32>| -> Result<(), GpuError> {
            let (pa, _ra) = a.device_ptr(stream);
            let (pb, _rb) = b.device_ptr(stream);
            let (pc, _rc) = c.device_ptr_mut(stream);
            for beta in [0i32, 0, 1] {
                int8_gemm(&self.blas, (m, n, k), (pa, pb, pc), beta)?;
            }
            Ok(())
        };
        run(&mut c)?;
        stream.synchronize()?;
        let started = std::time::Instant::now();
        for _ in 0..repeats {
            run(&mut c)?;
        }
        stream.synchronize()?;
        let seconds = started.elapsed().as_secs_f64();
        Ok((3 * repeats * 2 * m * n * k) as f64 / seconds)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // Best effort, as for the database: scratch holds query shares and products.
        let (s, stream) = (&mut self.scratch, &self.stream);
        let _ = s.q.wipe(stream);
        let _ = s.d.wipe(stream);
        let _ = stream.memset_zeros(&mut s.outputs.ll);
        let _ = stream.memset_zeros(&mut s.outputs.cross);
        let _ = stream.memset_zeros(&mut s.outputs.out);
        let _ = stream.synchronize();
    }
}

struct State {
    /// One per shard of the database, in shard order.
    devices: Vec<Device>,
    mirror: Mirror<Sharded<DeviceDb>>,
}

/// The GPU dot-product engine: one device, or several holding contiguous shards of the
/// enrolled database (rows in the [`MatchDb`]'s order across them). Each device computes its
/// shard's block of a product; the host places the blocks, which it receives anyway, so the
/// devices have nothing to combine among themselves.
pub struct GpuEngine {
    name: String,
    state: Mutex<State>,
}

impl core::fmt::Debug for GpuEngine {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GpuEngine")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl GpuEngine {
    /// Whether a GPU engine can be created on device `ordinal`, and if not, why.
    ///
    /// # Errors
    /// The reason, for the skip message of tests and the error of the node's start.
    pub fn probe(ordinal: usize) -> Result<(), GpuError> {
        // SAFETY: these only try to open the shared libraries.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(GpuError::NoDriver);
        }
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(GpuError::NoNvrtc);
        }
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(GpuError::NoCublas);
        }
        let count = CudaContext::device_count()?;
        if ordinal >= count.max(0) as usize {
            return Err(GpuError::NoDevice { ordinal, count });
        }
        Ok(())
    }

    /// An engine on device `ordinal`, with its own stream, cuBLAS handle and (empty)
    /// resident database.
    ///
    /// # Errors
    /// See [`GpuEngine::probe`]; also a failed kernel compilation or allocation.
    pub fn new(ordinal: usize) -> Result<GpuEngine, GpuError> {
        Self::with_devices(&[ordinal])
    }

    /// An engine sharding the database over `ordinals`, one shard per entry (an ordinal may
    /// repeat: two shards on one device).
    ///
    /// # Errors
    /// As [`GpuEngine::new`], for any of the devices.
    ///
    /// # Panics
    /// If `ordinals` is empty.
    pub fn with_devices(ordinals: &[usize]) -> Result<GpuEngine, GpuError> {
        assert!(!ordinals.is_empty());
        let mut devices = Vec::new();
        let mut shards = Vec::new();
        for &ordinal in ordinals {
            Self::probe(ordinal)?;
            let device = Device::new(ordinal)?;
            shards.push(DeviceDb::new(device.stream.clone())?);
            devices.push(device);
        }
        let ctx = &devices[0].ctx;
        let (major, minor) = ctx.compute_capability()?;
        let list: Vec<String> = ordinals.iter().map(usize::to_string).collect();
        let name = format!("gpu:{} {} (sm_{major}{minor})", list.join(","), ctx.name()?);
        let state = State {
            devices,
            mirror: Mirror::new(Sharded::new(shards)),
        };
        Ok(GpuEngine {
            name,
            state: Mutex::new(state),
        })
    }

    /// The first device's name as the driver reports it.
    ///
    /// # Errors
    /// The driver call failed.
    pub fn device_name(&self) -> Result<String, GpuError> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        Ok(state.devices[0].ctx.name()?)
    }

    /// Brings the resident database to `db` now (at start, after loading the store), rather
    /// than at the first batch.
    ///
    /// # Errors
    /// A device allocation or copy failed.
    pub fn sync(&self, db: &MatchDb) -> Result<(), GpuError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        Ok(state.mirror.sync(db)?)
    }

    /// Int8 operations per second (two per multiply-add) the engine's GEMM calls sustain on
    /// the first device, on `m x k` by `k x n` operands already there: the three GEMMs of a
    /// product block, `repeats` times, without transfers or the combine kernel.
    ///
    /// # Errors
    /// A device allocation or cuBLAS call failed.
    pub fn gemm_ops_per_second(
        &self,
        m: usize,
        n: usize,
        k: usize,
        repeats: usize,
    ) -> Result<f64, GpuError> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.devices[0].gemm_ops_per_second((m, n, k), repeats)
    }

    fn run(&self, f: impl FnOnce(&mut State) -> Result<(), GpuError>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        // The engine trait has no error path: a failing device ends the batch, whose
        // evaluation runs on its own task, and the node reports it.
        if let Err(e) = f(&mut state) {
            panic!("{}: {e}", self.name);
        }
    }
}

impl DotEngine for GpuEngine {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn prepare(&self, db: &MatchDb) -> Result<(), String> {
        let started = std::time::Instant::now();
        self.sync(db).map_err(|e| format!("{}: {e}", self.name))?;
        tracing::info!(
            engine = %self.name,
            entries = db.len(),
            seconds = started.elapsed().as_secs_f64(),
            "enrolled shares resident on the GPU"
        );
        Ok(())
    }

    fn dot(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]) {
        assert!(
            len.is_multiple_of(64)
                && queries.len().is_multiple_of(len)
                && db.len().is_multiple_of(len)
        );
        let (n, m) = (queries.len() / len, db.len() / len);
        assert_eq!(out.len(), n * m);
        if n == 0 || m == 0 {
            return;
        }
        self.run(|state| {
            let device = &mut state.devices[0];
            device.ctx.bind_to_thread()?;
            let stream = device.stream.clone();
            stage(&stream, &mut device.scratch.d, db, len, round_up(m, PAD))?;
            device.product(queries, None, 0, m, out)
        });
    }

    fn dot_db(
        &self,
        queries: &[u16],
        db: &MatchDb,
        eye: usize,
        part: Part,
        rows: core::ops::Range<usize>,
        out: &mut [u16],
    ) {
        let len = part.coefs();
        assert!(queries.len().is_multiple_of(len) && rows.end <= db.len());
        let (n, m) = (queries.len() / len, rows.len());
        assert_eq!(out.len(), n * m);
        if n == 0 || m == 0 {
            return;
        }
        self.run(|state| {
            let State { devices, mirror } = state;
            mirror.sync(db)?;
            let store = mirror.store();
            let pieces = store.pieces(rows.clone());
            let plane = |k: usize| &store.shards()[k].planes[plane_index(eye, part)];
            if let [(k, local, _)] = pieces.as_slice() {
                return devices[*k].product(queries, Some(plane(*k)), local.start, m, out);
            }
            // Several shards: each device computes its block on its own thread.
            let blocks = std::thread::scope(|scope| {
                let mut handles = Vec::new();
                for (device_index, device) in devices.iter_mut().enumerate() {
                    let Some((k, local, offset)) =
                        pieces.iter().find(|p| p.0 == device_index).cloned()
                    else {
                        continue;
                    };
                    let plane = plane(k);
                    handles.push(scope.spawn(move || {
                        let mut block = vec![0u16; n * local.len()];
                        device
                            .product(queries, Some(plane), local.start, local.len(), &mut block)
                            .map(|()| (offset, local.len(), block))
                    }));
                }
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a device thread panicked"))
                    .collect::<Result<Vec<_>, GpuError>>()
            })?;
            for (offset, width, block) in blocks {
                for q in 0..n {
                    out[q * m + offset..q * m + offset + width]
                        .copy_from_slice(&block[q * width..(q + 1) * width]);
                }
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::synthetic::random_shares;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{RngCore, SeedableRng};

    use super::*;
    use crate::engine::CpuEngine;

    /// The engine, or `None` after printing why GPU tests skip here.
    fn engine_or_skip(test: &str) -> Option<GpuEngine> {
        match GpuEngine::new(0) {
            Ok(e) => Some(e),
            Err(e) => {
                println!("{test}: SKIPPED, no usable GPU: {e}");
                None
            }
        }
    }

    /// The kernel source compiles as each device compiles it at start, and for the
    /// architectures the engine is run on (A100, H100 and H200), with the entry point the
    /// device loads. NVRTC needs no driver or device, so this runs wherever libnvrtc loads: CI
    /// installs it from the `nvidia-cuda-nvrtc-cu12` wheel.
    #[test]
    fn kernels_compile_with_nvrtc() {
        // SAFETY: this only tries to open the shared library.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            println!("kernels_compile_with_nvrtc: SKIPPED, {}", GpuError::NoNvrtc);
            return;
        }
        for arch in [None, Some("compute_80"), Some("compute_90")] {
            let ptx = compile_kernels(arch)
                .unwrap_or_else(|e| panic!("{arch:?}: {e:?}"))
                .to_src();
            assert!(
                ptx.contains(&format!(".entry {COMBINE_KERNEL}(")),
                "{arch:?}: no {COMBINE_KERNEL} entry point in\n{ptx}"
            );
            println!(
                "kernels_compile_with_nvrtc: {}, {} bytes of PTX",
                arch.unwrap_or("NVRTC's default architecture"),
                ptx.len()
            );
        }
    }

    #[test]
    fn gpu_engine_passes_the_parity_suite() {
        let Some(gpu) = engine_or_skip("gpu_engine_passes_the_parity_suite") else {
            return;
        };
        println!("{}", gpu.name());
        crate::engine::parity::check_engine(&gpu);
    }

    /// The resident database equals the CPU engine's view of the host database, bit for bit,
    /// through appends, out-of-order inserts, replacements and deletions, at sizes that are
    /// not multiples of the padding, the load chunk or the move chunk; on one shard and on
    /// three.
    #[test]
    fn resident_database_matches_the_cpu_engine_through_changes() {
        let Some(one) = engine_or_skip("resident_database_matches_the_cpu_engine") else {
            return;
        };
        // Three shards on one device exercise the multi-GPU path on a single GPU.
        let sharded = GpuEngine::with_devices(&[0, 0, 0]).expect("device 0");
        for gpu in [one, sharded] {
            println!("{}", gpu.name());
            resident_database_matches(&gpu);
        }
    }

    fn resident_database_matches(gpu: &GpuEngine) {
        let cpu = CpuEngine::new();
        let mut rng = ChaCha20Rng::seed_from_u64(0x6e0);
        let mut db = MatchDb::new();
        let queries: Vec<Vec<u16>> = [Part::Code, Part::Mask]
            .iter()
            .map(|p| (0..7 * p.coefs()).map(|_| rng.next_u32() as u16).collect())
            .collect();
        let check = |db: &MatchDb, what: &str| {
            for eye in 0..2 {
                for (part, q) in [Part::Code, Part::Mask].into_iter().zip(&queries) {
                    for rows in [0..db.len(), db.len() / 3..db.len(), 0..db.len().min(1)] {
                        let n = q.len() / part.coefs() * rows.len();
                        let (mut g, mut c) = (vec![0xA5A5u16; n], vec![0u16; n]);
                        gpu.dot_db(q, db, eye, part, rows.clone(), &mut g);
                        cpu.dot_db(q, db, eye, part, rows.clone(), &mut c);
                        assert!(g == c, "{what}: eye {eye} {part:?} rows {rows:?}");
                    }
                }
            }
        };
        check(&db, "empty");
        for serial in 1..=1_100u64 {
            db.push(serial * 10, &random_shares(&mut rng));
        }
        check(&db, "loaded");
        for k in 0..40u64 {
            db.insert(k * 271 + 5, &random_shares(&mut rng));
            let row = (rng.next_u32() as usize) % db.len();
            db.replace(row, &random_shares(&mut rng));
            let row = (rng.next_u32() as usize) % db.len();
            db.remove(row);
        }
        check(&db, "after changes");
        while db.len() > 1 {
            db.remove(0);
        }
        check(&db, "one entry");
        db.remove(0);
        check(&db, "emptied");
    }

    /// Three parties' pipelines on GPU engines open exactly what they open on CPU engines:
    /// database passes, intra-batch pairs, single-entry targets, both eye policies.
    #[test]
    fn pipeline_results_equal_on_gpu_and_cpu() {
        let Some(first) = engine_or_skip("pipeline_results_equal_on_gpu_and_cpu") else {
            return;
        };
        let gpus = [
            first,
            GpuEngine::new(0).expect("device 0"),
            GpuEngine::new(0).expect("device 0"),
        ];
        let cpu = CpuEngine::new();
        let on_gpu = crate::engine::parity::pipeline_outcomes([&gpus[0], &gpus[1], &gpus[2]]);
        let on_cpu = crate::engine::parity::pipeline_outcomes([&cpu, &cpu, &cpu]);
        assert_eq!(on_gpu, on_cpu);
    }
}

//! One CUDA device: context, stream, kernel, cuBLAS handle and scratch buffers, and the
//! product of host queries against device rows.

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig,
    PushKernelArg,
};

use super::blas::*;
use super::buffers::*;
use super::circuit::CudaKernels;
use super::error::GpuError;
use ocelli_device::split::length_term;

/// One device: its context, stream, kernel, cuBLAS handle and scratch buffers.
pub(super) struct Device {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    pub(super) combine: CudaFunction,
    /// The comparison phase's kernels, on a stream of their own.
    pub(super) kernels: Arc<CudaKernels>,
    pub(super) blas: CudaBlas,
    pub(super) scratch: Scratch,
}

impl Device {
    pub(super) fn new(ordinal: usize) -> Result<Device, GpuError> {
        let ctx = CudaContext::new(ordinal)?;
        let stream = ctx.new_stream()?;
        let ptx = compile_kernels(None)?;
        let module = ctx.load_module(ptx)?;
        let combine = module.load_function(COMBINE_KERNEL)?;
        let kernels = Arc::new(CudaKernels::new(&ctx, &module)?);
        let blas = CudaBlas::new(stream.clone())?;
        let scratch = Scratch::new(&stream)?;
        Ok(Device {
            ctx,
            stream,
            combine,
            kernels,
            blas,
            scratch,
        })
    }

    /// `out = db^T q`: rows `first..first + m` of `db` against `queries` (host vectors of
    /// `db.len`, uploaded here unless `resident` holds them already), `out` row-major `n x m`.
    pub(super) fn product(
        &mut self,
        queries: &[u16],
        resident: Option<&Plane>,
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
        let q = match resident {
            Some(plane) => {
                assert_eq!(plane.len, len, "queries prepared for another part");
                plane
            }
            None => {
                stage(stream, q, queries, len, n_pad)?;
                q
            }
        };
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
        let (m32, m_pad32, n32) = (
            GpuError::fits_u32("product rows", m)?,
            GpuError::fits_u32("padded product rows", m_pad)?,
            GpuError::fits_u32("product columns", n)?,
        );
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
        // SAFETY: the argument list matches `combine`'s signature in kernels/dot.cu; every index
        // the kernel forms is below the sizes ensured above.
        unsafe { launch.launch(config) }?;
        stream.memcpy_dtoh(&outputs.out.slice(0..m * n), out)?;
        stream.synchronize()?;
        Ok(())
    }

    /// Int8 operations per second of the three GEMM calls on resident `m x k` by `k x n`
    /// operands, `repeats` times, without transfers or the combine kernel.
    pub(super) fn gemm_ops_per_second(
        &self,
        (m, n, k): (usize, usize, usize),
        repeats: usize,
    ) -> Result<f64, GpuError> {
        self.ctx.bind_to_thread()?;
        let (m, n) = (round_up(m, PAD), round_up(n, PAD));
        let stream = &self.stream;
        // Random operands: a GEMM of constants can run faster than one of data (the
        // multipliers toggle less), which would overstate the peak.
        let mut rng = <rand_chacha::ChaCha20Rng as rand_core::SeedableRng>::seed_from_u64(1);
        let mut random = |len: usize| -> Vec<i8> {
            let mut bytes = vec![0u8; len];
            rand_core::RngCore::fill_bytes(&mut rng, &mut bytes);
            bytes.into_iter().map(|b| b as i8).collect()
        };
        let a: CudaSlice<i8> = stream.clone_htod(&random(m * k))?;
        let b: CudaSlice<i8> = stream.clone_htod(&random(n * k))?;
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

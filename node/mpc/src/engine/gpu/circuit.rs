//! The comparison-phase kernels on a CUDA device: [`CudaKernels`] is the
//! [`KernelDevice`] a [`crate::device::DeviceCircuit`] runs on for a GPU node.

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
    PushKernelArg,
};

use super::busy::BusyClock;
use super::error::GpuError;
use crate::device::{Arg, KernelDevice, KERNEL_NAMES};

/// One device's context, a stream of its own and every kernel of
/// [`crate::device::KERNELS_CU`].
pub struct CudaKernels {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    functions: Vec<(&'static str, CudaFunction)>,
    busy: std::sync::OnceLock<Arc<BusyClock>>,
}

impl core::fmt::Debug for CudaKernels {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CudaKernels")
            .field("ordinal", &self.ctx.ordinal())
            .finish_non_exhaustive()
    }
}

/// A device allocation, zeroed before it is freed: it holds shares.
pub struct CudaBuf {
    slice: CudaSlice<u8>,
    stream: Arc<CudaStream>,
}

impl core::fmt::Debug for CudaBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CudaBuf")
            .field("bytes", &self.slice.len())
            .finish_non_exhaustive()
    }
}

impl Drop for CudaBuf {
    fn drop(&mut self) {
        // Best effort: a failing device cannot be made to zero anything.
        let _ = self.stream.memset_zeros(&mut self.slice);
    }
}

impl CudaKernels {
    /// The kernels of `module` (loaded on `ctx`), on a new stream.
    ///
    /// # Errors
    /// A missing entry point or a failed stream creation.
    pub(super) fn new(ctx: &Arc<CudaContext>, module: &Arc<CudaModule>) -> Result<Self, GpuError> {
        let functions = KERNEL_NAMES
            .iter()
            .map(|&name| Ok((name, module.load_function(name)?)))
            .collect::<Result<Vec<_>, GpuError>>()?;
        Ok(CudaKernels {
            ctx: ctx.clone(),
            stream: ctx.new_stream()?,
            functions,
            busy: std::sync::OnceLock::new(),
        })
    }

    /// Has `clock` time every call from now on (the first clock given stays).
    pub(super) fn time_busy(&self, clock: &Arc<BusyClock>) {
        let _ = self.busy.set(clock.clone());
    }

    fn timed<R>(&self, f: impl FnOnce() -> R) -> R {
        match self.busy.get() {
            Some(clock) => clock.span(&[&self.stream], f),
            None => f(),
        }
    }

    fn bind(&self) {
        self.ctx
            .bind_to_thread()
            .unwrap_or_else(|e| panic!("GPU {}: {e}", self.ctx.ordinal()));
    }

    fn check<T>(&self, what: &str, r: Result<T, cudarc::driver::DriverError>) -> T {
        r.unwrap_or_else(|e| panic!("GPU {}: {what}: {e}", self.ctx.ordinal()))
    }
}

impl KernelDevice for CudaKernels {
    type Buf = CudaBuf;

    fn alloc_zeroed(&self, bytes: usize) -> CudaBuf {
        self.bind();
        let slice = self.timed(|| self.check("allocation", self.stream.alloc_zeros::<u8>(bytes)));
        CudaBuf {
            slice,
            stream: self.stream.clone(),
        }
    }

    fn upload(&self, bytes: &[u8]) -> CudaBuf {
        self.bind();
        let slice = self.timed(|| self.check("upload", self.stream.clone_htod(bytes)));
        CudaBuf {
            slice,
            stream: self.stream.clone(),
        }
    }

    fn download(&self, buf: &CudaBuf, offset: usize, out: &mut [u8]) {
        self.bind();
        let src = buf.slice.slice(offset..offset + out.len());
        self.timed(|| self.check("download", self.stream.memcpy_dtoh(&src, out)));
        self.check("synchronize", self.stream.synchronize());
    }

    fn address(&self, buf: &CudaBuf) -> u64 {
        let (address, _sync) = buf.slice.device_ptr(&self.stream);
        address
    }

    fn launch(&self, kernel: &'static str, grid: (u32, u32), block: u32, args: &[Arg]) {
        self.bind();
        let function = &self
            .functions
            .iter()
            .find(|(name, _)| *name == kernel)
            .unwrap_or_else(|| panic!("no kernel {kernel} in KERNELS_CU"))
            .1;
        // The values the launch reads, in storage that outlives it.
        let wide: Vec<u64> = args
            .iter()
            .filter_map(|a| match *a {
                Arg::Ptr(v) | Arg::U64(v) => Some(v),
                Arg::U32(_) => None,
            })
            .collect();
        let narrow: Vec<u32> = args
            .iter()
            .filter_map(|a| match *a {
                Arg::U32(v) => Some(v),
                _ => None,
            })
            .collect();
        let mut builder = self.stream.launch_builder(function);
        let (mut w, mut n) = (wide.iter(), narrow.iter());
        for a in args {
            match a {
                Arg::Ptr(_) | Arg::U64(_) => builder.arg(w.next().expect("one slot per arg")),
                Arg::U32(_) => builder.arg(n.next().expect("one slot per arg")),
            };
        }
        let config = LaunchConfig {
            grid_dim: (grid.0, grid.1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the device circuits pass each kernel the argument list its signature in
        // kernels/*.cu declares (a device address travels as the u64 it is), with addresses
        // of live allocations on this device large enough for every index the kernel forms
        // from its length arguments; the host parity tests run the same launches.
        let launched = self.timed(|| unsafe { builder.launch(config) });
        self.check(kernel, launched.map(|_| ()));
    }
}

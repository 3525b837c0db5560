//! The comparison-phase kernels on a CUDA device: [`CudaKernels`] is the
//! [`KernelDevice`] a [`ocelli_device::DeviceCircuit`] runs on for a GPU node.

use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
    PushKernelArg,
};

use super::busy::BusyClock;
use super::error::GpuError;
use ocelli_device::{Arg, KernelDevice, KERNEL_NAMES};

/// One device's context, a stream of its own and every kernel of
/// [`ocelli_device::KERNELS_CU`].
pub struct CudaKernels {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    functions: Vec<(&'static str, CudaFunction)>,
    busy: std::sync::OnceLock<Arc<BusyClock>>,
    free: Arc<Mutex<FreeList>>,
}

impl core::fmt::Debug for CudaKernels {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CudaKernels")
            .field("ordinal", &self.ctx.ordinal())
            .finish_non_exhaustive()
    }
}

/// Freed allocations kept for the next of the same size: a fresh one costs the driver's
/// allocation and cudarc's tracking events, and a comparison phase makes hundreds per pass,
/// the same sizes pass after pass. Every kept allocation is all zeros.
#[derive(Default)]
struct FreeList {
    bytes: usize,
    by_size: std::collections::HashMap<usize, Vec<CudaSlice<u8>>>,
}

/// The most bytes a [`CudaKernels`] keeps freed.
const KEPT_BYTES: usize = 4 << 30;

impl FreeList {
    fn take(&mut self, bytes: usize) -> Option<CudaSlice<u8>> {
        let slice = self.by_size.get_mut(&bytes)?.pop()?;
        self.bytes -= bytes;
        Some(slice)
    }
}

/// A device allocation, zeroed before it is freed or kept: it holds shares.
pub struct CudaBuf {
    /// Always present until dropped.
    slice: Option<CudaSlice<u8>>,
    stream: Arc<CudaStream>,
    free: Arc<Mutex<FreeList>>,
}

impl CudaBuf {
    fn slice(&self) -> &CudaSlice<u8> {
        self.slice.as_ref().expect("present until dropped")
    }
}

impl core::fmt::Debug for CudaBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CudaBuf")
            .field("bytes", &self.slice().len())
            .finish_non_exhaustive()
    }
}

impl Drop for CudaBuf {
    fn drop(&mut self) {
        let Some(mut slice) = self.slice.take() else {
            return;
        };
        // Best effort: a failing device cannot be made to zero anything, and then nothing
        // is kept. The memset is ordered before any later use on this stream.
        if self.stream.memset_zeros(&mut slice).is_err() {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        let bytes = slice.len();
        if free.bytes + bytes <= KEPT_BYTES {
            free.bytes += bytes;
            free.by_size.entry(bytes).or_default().push(slice);
        }
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
            free: Arc::default(),
        })
    }

    fn kept(&self, bytes: usize) -> Option<CudaSlice<u8>> {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(bytes)
    }

    fn buf(&self, slice: CudaSlice<u8>) -> CudaBuf {
        CudaBuf {
            slice: Some(slice),
            stream: self.stream.clone(),
            free: self.free.clone(),
        }
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
        let slice = self.kept(bytes).unwrap_or_else(|| {
            self.timed(|| self.check("allocation", self.stream.alloc_zeros::<u8>(bytes)))
        });
        self.buf(slice)
    }

    fn upload(&self, bytes: &[u8]) -> CudaBuf {
        self.bind();
        let slice = match self.kept(bytes.len()) {
            Some(mut slice) => {
                self.timed(|| self.check("upload", self.stream.memcpy_htod(bytes, &mut slice)));
                slice
            }
            None => self.timed(|| self.check("upload", self.stream.clone_htod(bytes))),
        };
        self.buf(slice)
    }

    fn download(&self, buf: &CudaBuf, offset: usize, out: &mut [u8]) {
        self.bind();
        let src = buf.slice().slice(offset..offset + out.len());
        self.timed(|| self.check("download", self.stream.memcpy_dtoh(&src, out)));
        self.check("synchronize", self.stream.synchronize());
    }

    fn launch(
        &self,
        kernel: &'static str,
        grid: (u32, u32),
        block: u32,
        args: &[Arg<'_, CudaBuf>],
    ) {
        self.bind();
        let function = &self
            .functions
            .iter()
            .find(|(name, _)| *name == kernel)
            .unwrap_or_else(|| panic!("no kernel {kernel} in KERNELS_CU"))
            .1;
        // The values the launch reads, in storage that outlives it. Each buffer's guard is
        // held until the launch is queued: dropping it records the launch as a use of the
        // allocation on this stream, which later work on another stream waits for.
        let mut guards = Vec::new();
        let wide: Vec<u64> = args
            .iter()
            .filter_map(|a| match *a {
                Arg::Buf(buf, offset) => {
                    let (address, guard) = buf.slice().device_ptr(&self.stream);
                    guards.push(guard);
                    Some(address + offset as u64)
                }
                Arg::Null => Some(0),
                Arg::U64(v) => Some(v),
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
                Arg::Buf(..) | Arg::Null | Arg::U64(_) => {
                    builder.arg(w.next().expect("one slot per arg"))
                }
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
        drop(guards);
        self.check(kernel, launched.map(|_| ()));
    }
}

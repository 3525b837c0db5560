//! The kernels on the host: `build.rs` compiles `kernels/host.cpp` (the kernel sources under
//! `kernels/host.h`, which maps the grid onto loops) into this crate, and [`HostDevice`] runs
//! them on host memory. The parity tests use it to run every kernel's exact source in CI,
//! where there is no GPU.

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{Arg, KernelDevice};

extern "C" {
    fn ocelli_host_launch(
        name: *const c_char,
        grid_x: c_uint,
        grid_y: c_uint,
        block_x: c_uint,
        params: *mut *mut c_void,
    ) -> c_int;
}

/// Runs the kernels on the calling thread, on host memory, and counts the bytes allocated
/// as a GPU would hold them.
#[derive(Debug, Default)]
pub struct HostDevice {
    bytes: Arc<Usage>,
}

#[derive(Debug, Default)]
struct Usage {
    live: AtomicUsize,
    peak: AtomicUsize,
}

impl HostDevice {
    /// The most bytes allocated at once since the last [`HostDevice::reset_peak`].
    pub fn peak_bytes(&self) -> usize {
        self.bytes.peak.load(Ordering::Relaxed)
    }

    /// Starts a new peak from what is allocated now.
    pub fn reset_peak(&self) {
        let live = self.bytes.live.load(Ordering::Relaxed);
        self.bytes.peak.store(live, Ordering::Relaxed);
    }
}

/// Host memory that kernels write through raw addresses.
pub struct HostBuf {
    words: Box<[UnsafeCell<u64>]>,
    usage: Arc<Usage>,
}

impl core::fmt::Debug for HostBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HostBuf")
            .field("words", &self.words.len())
            .finish_non_exhaustive()
    }
}

// SAFETY: the kernels write a buffer only inside a `launch` call, which runs to completion on
// the calling thread; the device circuits never hand one buffer to two launches at once, and
// Rust code only reads a buffer through `download`, after the launches that wrote it.
unsafe impl Sync for HostBuf {}

impl HostBuf {
    fn base(&self) -> *mut u8 {
        self.words[0].get().cast()
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        // Shares and products of shares: zeroed before the memory is freed.
        for w in self.words.iter_mut() {
            *w.get_mut() = 0;
        }
        self.usage
            .live
            .fetch_sub(8 * self.words.len(), Ordering::Relaxed);
    }
}

impl KernelDevice for HostDevice {
    type Buf = HostBuf;

    fn alloc_zeroed(&self, bytes: usize) -> HostBuf {
        let words = bytes.div_ceil(8).max(1);
        let live = self.bytes.live.fetch_add(8 * words, Ordering::Relaxed) + 8 * words;
        self.bytes.peak.fetch_max(live, Ordering::Relaxed);
        HostBuf {
            words: (0..words).map(|_| UnsafeCell::new(0)).collect(),
            usage: self.bytes.clone(),
        }
    }

    fn upload(&self, bytes: &[u8]) -> HostBuf {
        let buf = self.alloc_zeroed(bytes.len());
        for (cell, chunk) in buf.words.iter().zip(bytes.chunks(8)) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            // SAFETY: no launch runs while this buffer is being created.
            unsafe { *cell.get() = u64::from_le_bytes(word) };
        }
        buf
    }

    fn download(&self, buf: &HostBuf, offset: usize, out: &mut [u8]) {
        assert!(offset + out.len() <= 8 * buf.words.len());
        // SAFETY: the range is inside the allocation (checked above), and no launch writes the
        // buffer while it is read (see `HostBuf`).
        let bytes = unsafe { std::slice::from_raw_parts(buf.base().add(offset), out.len()) };
        out.copy_from_slice(bytes);
    }

    fn launch(
        &self,
        kernel: &'static str,
        grid: (u32, u32),
        block: u32,
        args: &[Arg<'_, HostBuf>],
    ) {
        // Each argument in a u64 slot: a u32 parameter reads the slot's first four bytes,
        // which hold its value on a little-endian host.
        let mut slots: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                Arg::Buf(buf, offset) => buf.base() as u64 + offset as u64,
                Arg::Null => 0,
                Arg::U64(v) => v,
                Arg::U32(v) => u64::from(v),
            })
            .collect();
        let mut params: Vec<*mut c_void> = slots
            .iter_mut()
            .map(|s| (s as *mut u64).cast::<c_void>())
            .collect();
        let name = CString::new(kernel).expect("kernel names have no NUL");
        // SAFETY: `params` holds one pointer per kernel parameter, each to a live slot of at
        // least the parameter's size; the device circuits pass the argument list each
        // kernel's signature in kernels/*.cu declares, with addresses of live `HostBuf`s
        // large enough for every index the kernel forms from its length arguments.
        let status = unsafe {
            ocelli_host_launch(name.as_ptr(), grid.0, grid.1, block, params.as_mut_ptr())
        };
        assert_eq!(status, 0, "no kernel named {kernel} in kernels/host.cpp");
    }
}

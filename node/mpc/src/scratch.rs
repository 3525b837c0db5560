//! Zeroed buffers for a batch's query matrices, kept for the next batch.
//!
//! A batch lays out hundreds of megabytes of query shares per party (every rotation of every
//! query, then the engine's panel layout). Fresh allocations of that size are new mappings:
//! every page faults and is cleared by the kernel, and unmapping them flushes the TLBs of every
//! core, once per batch. A [`ScratchVec`] is cleared when dropped and handed back to the
//! [`ScratchPool`] it came from instead, so the next batch writes into memory that is already
//! mapped. The executor of a party's batches owns its pool; a buffer prepared from another
//! ([`ScratchVec::zeroed_like`]) comes from and returns to the same one.
//!
//! Every buffer a pool keeps is all zeros: no share outlives the [`ScratchVec`] that held it,
//! as with [`zeroize::Zeroizing`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use zeroize::Zeroize;

/// Buffers smaller than this are allocated and freed as usual.
const MIN_KEPT_BYTES: usize = 1 << 20;

/// The most bytes a pool keeps by default; beyond it the buffers dropped longest ago are
/// freed. Enough for the query matrices of one party's batch of 64 people (about 300 MB) with
/// room for the next batch's to differ.
pub const DEFAULT_KEPT_BYTES: usize = 1 << 30;

/// A free buffer is handed out for at most this many times more values than asked for
/// (the batch's matrices differ by a few rows from batch to batch); a smaller request gets a
/// new buffer rather than one that a later large request would miss.
const MAX_SLACK: (usize, usize) = (5, 4);

/// Where a buffer's values start: a cache line, so that no 64-byte SIMD load (an AVX-512
/// register of a query panel) straddles two lines and no 32-byte load or store does. The
/// allocator gives large buffers 16 bytes past a page.
const ALIGN_BYTES: usize = 64;

/// Values a buffer holds beyond its length, room to start at a cache line.
pub(crate) const ALIGN_SLACK: usize = ALIGN_BYTES / 2 - 1;

/// The index of the first value of `buf`'s allocation at a cache line (at most
/// [`ALIGN_SLACK`]; 0 where the pointer cannot be aligned, which a heap pointer always can).
pub(crate) fn cache_line_start(buf: *const u16) -> usize {
    Some(buf.align_offset(ALIGN_BYTES))
        .filter(|&s| s <= ALIGN_SLACK)
        .unwrap_or(0)
}

#[derive(Debug)]
struct Free {
    /// Each all zeros and at its full length, the one dropped last at the back.
    buffers: VecDeque<Vec<u16>>,
    kept_bytes: usize,
    max_kept_bytes: usize,
}

/// Zeroed buffers kept for reuse by one owner's batches; clones share the buffers.
#[derive(Clone, Debug)]
pub struct ScratchPool {
    free: Arc<Mutex<Free>>,
}

impl Default for ScratchPool {
    fn default() -> ScratchPool {
        ScratchPool::keeping(DEFAULT_KEPT_BYTES)
    }
}

impl ScratchPool {
    /// A pool that keeps at most `max_kept_bytes` of free buffers.
    pub fn keeping(max_kept_bytes: usize) -> ScratchPool {
        ScratchPool {
            free: Arc::new(Mutex::new(Free {
                buffers: VecDeque::new(),
                kept_bytes: 0,
                max_kept_bytes,
            })),
        }
    }

    fn free(&self) -> MutexGuard<'_, Free> {
        // A panic elsewhere cannot leave the list inconsistent: every change is whole.
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes of free buffers the pool holds now.
    pub fn kept_bytes(&self) -> usize {
        self.free().kept_bytes
    }

    /// `len` zeros: the smallest free buffer that holds them with little to spare, or a new
    /// one.
    pub fn zeroed(&self, len: usize) -> ScratchVec {
        let size = len + ALIGN_SLACK;
        let kept = (size * 2 >= MIN_KEPT_BYTES)
            .then(|| {
                let mut free = self.free();
                let most = size / MAX_SLACK.1 * MAX_SLACK.0;
                let best = (0..free.buffers.len())
                    .filter(|&i| (size..=most).contains(&free.buffers[i].len()))
                    .min_by_key(|&i| free.buffers[i].len());
                let buf = best.and_then(|i| free.buffers.remove(i));
                if let Some(b) = &buf {
                    free.kept_bytes -= b.len() * 2;
                }
                buf
            })
            .flatten();
        let buf = kept.unwrap_or_else(|| vec![0; size]);
        let start = cache_line_start(buf.as_ptr());
        ScratchVec {
            buf,
            start,
            len,
            pool: self.clone(),
        }
    }

    /// Takes back a cleared buffer, freeing the oldest beyond the pool's bound.
    fn keep(&self, buf: Vec<u16>) {
        let mut free = self.free();
        free.kept_bytes += buf.len() * 2;
        free.buffers.push_back(buf);
        while free.kept_bytes > free.max_kept_bytes {
            // Already all zeros.
            let Some(old) = free.buffers.pop_front() else {
                break;
            };
            free.kept_bytes -= old.len() * 2;
        }
    }
}

/// A zeroed `u16` buffer from a [`ScratchPool`], cleared when dropped and then kept there for
/// reuse (see the module).
pub struct ScratchVec {
    buf: Vec<u16>,
    /// The first value, at a multiple of [`ALIGN_BYTES`].
    start: usize,
    len: usize,
    pool: ScratchPool,
}

impl ScratchVec {
    /// `len` zeros from the pool this buffer came from.
    pub fn zeroed_like(&self, len: usize) -> ScratchVec {
        self.pool.zeroed(len)
    }

    /// The pool this buffer returns to.
    pub fn pool(&self) -> &ScratchPool {
        &self.pool
    }

    /// Keeps the first `len` values (at most the current length).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

impl core::ops::Deref for ScratchVec {
    type Target = [u16];
    fn deref(&self) -> &[u16] {
        &self.buf[self.start..self.start + self.len]
    }
}

impl core::ops::DerefMut for ScratchVec {
    fn deref_mut(&mut self) -> &mut [u16] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

impl Drop for ScratchVec {
    fn drop(&mut self) {
        if self.buf.len() * 2 >= MIN_KEPT_BYTES {
            // The cleared buffer is read again by whoever takes it next, so this store is not
            // dead and stays (unlike a clear right before a free, hence `zeroize` below).
            self.buf.fill(0);
            self.pool.keep(core::mem::take(&mut self.buf));
            return;
        }
        self.buf.zeroize();
    }
}

impl core::fmt::Debug for ScratchVec {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ScratchVec")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEN: usize = (MIN_KEPT_BYTES / 2) + 4_321;

    #[test]
    fn a_reused_buffer_comes_back_zeroed() {
        let pool = ScratchPool::default();
        let mut a = pool.zeroed(LEN);
        a.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = i as u16 | 1);
        a.truncate(LEN - 10);
        let ptr = a.buf.as_ptr();
        drop(a);
        let b = pool.zeroed(LEN - 1);
        assert_eq!(b.len(), LEN - 1);
        // The same allocation, whole (the truncated tail cleared too).
        assert_eq!(b.buf.as_ptr(), ptr);
        assert!(b.buf.iter().all(|&v| v == 0));
    }

    #[test]
    fn a_small_request_leaves_a_large_buffer() {
        let pool = ScratchPool::default();
        let large = pool.zeroed(3 * LEN);
        let ptr = large.buf.as_ptr();
        drop(large);
        let small = pool.zeroed(LEN + 1);
        assert_ne!(small.buf.as_ptr(), ptr);
        assert_eq!(small.len(), LEN + 1);
    }

    #[test]
    fn buffers_start_at_a_cache_line() {
        let pool = ScratchPool::default();
        for len in [1, 17, 1000, LEN + 7] {
            let a = pool.zeroed(len);
            assert_eq!(a.as_ptr() as usize % ALIGN_BYTES, 0, "length {len}");
            assert_eq!(a.len(), len);
        }
    }

    #[test]
    fn small_buffers_are_not_kept() {
        let pool = ScratchPool::default();
        drop(pool.zeroed(17));
        assert_eq!(pool.kept_bytes(), 0);
    }

    #[test]
    fn a_buffer_returns_to_its_own_pool_and_each_keeps_within_its_bound() {
        let size = (LEN + ALIGN_SLACK) * 2;
        let (a, b) = (ScratchPool::keeping(2 * size), ScratchPool::default());
        let first = a.zeroed(LEN);
        let sibling = first.zeroed_like(LEN);
        drop((first, sibling));
        assert_eq!((a.kept_bytes(), b.kept_bytes()), (2 * size, 0));
        // A third buffer pushes out the one dropped longest ago.
        drop((a.zeroed(LEN), a.zeroed(LEN), a.zeroed(LEN)));
        assert_eq!(a.kept_bytes(), 2 * size);
        drop(b.zeroed(LEN));
        assert_eq!(b.kept_bytes(), size);
    }
}

//! Zeroed buffers for a batch's query matrices, kept for the next batch.
//!
//! A batch lays out hundreds of megabytes of query shares per party (every rotation of every
//! query, then the engine's panel layout). Fresh allocations of that size are new mappings:
//! every page faults and is cleared by the kernel, and unmapping them flushes the TLBs of every
//! core, once per batch. A [`ScratchVec`] is cleared when dropped and handed to a process-wide
//! free list instead, so the next batch writes into memory that is already mapped.
//!
//! Every buffer on the free list is all zeros: no share outlives the [`ScratchVec`] that held
//! it, as with [`zeroize::Zeroizing`].

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use zeroize::Zeroize;

/// Buffers smaller than this are allocated and freed as usual.
const MIN_KEPT_BYTES: usize = 1 << 20;

/// The most bytes the free list keeps; beyond it the buffers dropped longest ago are freed.
/// Enough for the query matrices of a batch of 64 people at each of three parties sharing a
/// process (the demo and the tests): about 300 MB each.
const MAX_KEPT_BYTES: usize = 2 << 30;

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

/// Free buffers, each all zeros and at its full length, the one dropped last at the back.
static FREE: Mutex<VecDeque<Vec<u16>>> = Mutex::new(VecDeque::new());

fn free_list() -> MutexGuard<'static, VecDeque<Vec<u16>>> {
    // A panic elsewhere cannot leave the list inconsistent: every push and remove is whole.
    FREE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn kept_bytes(free: &VecDeque<Vec<u16>>) -> usize {
    free.iter().map(|b| b.len() * 2).sum()
}

/// A zeroed `u16` buffer, cleared when dropped and then kept for reuse (see the module).
pub struct ScratchVec {
    buf: Vec<u16>,
    /// The first value, at a multiple of [`ALIGN_BYTES`].
    start: usize,
    len: usize,
}

impl ScratchVec {
    /// `len` zeros: the smallest free buffer that holds them with little to spare, or a new
    /// one.
    pub fn zeroed(len: usize) -> ScratchVec {
        let size = len + ALIGN_SLACK;
        let kept = (size * 2 >= MIN_KEPT_BYTES)
            .then(|| {
                let mut free = free_list();
                let most = size / MAX_SLACK.1 * MAX_SLACK.0;
                let best = (0..free.len())
                    .filter(|&i| (size..=most).contains(&free[i].len()))
                    .min_by_key(|&i| free[i].len());
                best.and_then(|i| free.remove(i))
            })
            .flatten();
        let buf = kept.unwrap_or_else(|| vec![0; size]);
        let start = cache_line_start(buf.as_ptr());
        ScratchVec { buf, start, len }
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
        let bytes = self.buf.len() * 2;
        if bytes >= MIN_KEPT_BYTES {
            // The cleared buffer is read again by whoever takes it next, so this store is not
            // dead and stays (unlike a clear right before a free, hence `zeroize` below).
            self.buf.fill(0);
            let mut free = free_list();
            free.push_back(core::mem::take(&mut self.buf));
            while kept_bytes(&free) > MAX_KEPT_BYTES {
                // Already all zeros.
                drop(free.pop_front());
            }
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

    // The free list is process-wide, so the tests use lengths no other test in this crate
    // asks for and look only at their own buffers.
    const LEN: usize = (MIN_KEPT_BYTES / 2) + 4_321;

    #[test]
    fn a_reused_buffer_comes_back_zeroed() {
        let mut a = ScratchVec::zeroed(LEN);
        a.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = i as u16 | 1);
        a.truncate(LEN - 10);
        let ptr = a.buf.as_ptr();
        drop(a);
        let b = ScratchVec::zeroed(LEN - 1);
        assert_eq!(b.len(), LEN - 1);
        assert!(b.iter().all(|&v| v == 0));
        // The same allocation, whole (the truncated tail cleared too).
        if b.buf.as_ptr() == ptr {
            assert!(b.buf.iter().all(|&v| v == 0));
        }
    }

    #[test]
    fn a_small_request_leaves_a_large_buffer() {
        let large = ScratchVec::zeroed(3 * LEN);
        let ptr = large.buf.as_ptr();
        drop(large);
        let small = ScratchVec::zeroed(LEN + 1);
        assert_ne!(small.buf.as_ptr(), ptr);
        assert_eq!(small.len(), LEN + 1);
    }

    #[test]
    fn buffers_start_at_a_cache_line() {
        for len in [1, 17, 1000, LEN + 7] {
            let a = ScratchVec::zeroed(len);
            assert_eq!(a.as_ptr() as usize % ALIGN_BYTES, 0, "length {len}");
            assert_eq!(a.len(), len);
        }
    }

    #[test]
    fn small_buffers_are_not_kept() {
        let a = ScratchVec::zeroed(17);
        drop(a);
        assert!(free_list().iter().all(|b| b.len() != 17 + ALIGN_SLACK));
    }
}

//! What the pipeline needs from the operating system about its own process: CPU time for
//! rate measurements, resident memory, and the allocator tuning its buffers call for. Safe
//! wrappers, so the service crate can forbid `unsafe`.

/// CPU seconds (user and system) this process has used.
#[allow(unsafe_code)]
pub fn cpu_seconds() -> f64 {
    let mut usage = core::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is pointed at and nothing else; RUSAGE_SELF is a
    // valid selector, so it cannot fail, and a zeroed rusage is a valid value regardless.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

/// CPU seconds the calling thread has used: what a single-thread probe ran for, whatever
/// other processes took of the core meanwhile.
#[allow(unsafe_code)]
pub fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is pointed at and nothing else;
    // CLOCK_THREAD_CPUTIME_ID is supported on every Linux and BSD the crate builds for.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Resident bytes of this process now, from `/proc/self/statm` (Linux); `None` elsewhere.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size())
}

#[allow(unsafe_code)]
fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096)
}

/// Asks the kernel to back the whole 2 MiB pages inside `buf`'s allocation (its capacity, used
/// or not) with transparent huge pages, for buffers that are scanned end to end many times
/// over: the share database. A scan touches a new 4 KiB page every 4 KiB, and its page walks
/// stall the prefetches that keep the dot products fed (docs/benchmarks-history.md has the
/// runs with and without). A hint: Linux only, and only where the system's
/// THP mode is `madvise` or `always`; it changes no contents, and an error leaves the pages
/// as they were. Capacity never touched stays unbacked; what it costs is the rest of the
/// 2 MiB page the data ends in.
#[allow(unsafe_code)]
pub fn advise_huge_pages<T>(buf: &Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = buf.as_ptr() as usize;
        let end = start + buf.capacity() * core::mem::size_of::<T>();
        let first = start.next_multiple_of(HUGE);
        let last = end / HUGE * HUGE;
        if last > first {
            // SAFETY: the range lies inside `buf`'s allocation, which is mapped; MADV_HUGEPAGE
            // only marks how the kernel may back it and never changes what it holds.
            unsafe {
                libc::madvise(
                    first as *mut libc::c_void,
                    last - first,
                    libc::MADV_HUGEPAGE,
                )
            };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buf;
}

/// Tunes glibc's malloc for the pipeline, which allocates and frees buffers of hundreds of
/// kilobytes to hundreds of megabytes on many threads:
/// - at most two arenas: per-thread arenas keep about twice the live memory resident, at no
///   speed gain;
/// - buffers up to 32 MiB (glibc's largest mapping threshold) come from the heap, not from a
///   fresh mapping each time, and the heap is trimmed only past 1 GiB free: a new mapping is
///   zeroed by page faults on first touch;
/// - 128 MiB of padding whenever an arena takes memory from the kernel: the second arena's
///   heaps (64 MiB each) are then mapped read-write whole instead of a few pages per
///   `mprotect`, and stay mapped when they empty, so the comparison phase's passes, which take
///   and free tens of megabytes at a time, do not fault on fresh pages or flush the other
///   cores' TLBs.
///
/// The measurements behind each setting are in docs/benchmarks-history.md (`tune_malloc`).
///
/// Call it before starting threads; elsewhere than glibc it does nothing.
#[allow(unsafe_code)]
pub fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only adjusts allocator tuning; each value is in its parameter's range
    // (positive arena count, thresholds below glibc's maxima on 64-bit).
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TOP_PAD, 128 << 20);
    }
}

/// This process's limit on open descriptors, before and after [`raise_open_files_limit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFilesLimit {
    /// The soft limit found.
    pub before: u64,
    /// The soft limit in force now.
    pub now: u64,
}

/// Raises this process's soft limit on open descriptors to its hard limit. A node holds one per
/// connection, MPC link and store file, and many systems start a process at a soft limit of
/// 1,024 while allowing far more: what runs out first then is the descriptors, for strangers'
/// connections and the node's own links alike.
///
/// # Errors
/// The limits cannot be read, or the system refuses the raise.
#[allow(unsafe_code)]
pub fn raise_open_files_limit() -> std::io::Result<OpenFilesLimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the rlimit it is pointed at and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before = rlim_u64(limit.rlim_cur);
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: setrlimit only reads the rlimit it is pointed at; a soft limit up to the hard
        // one is always a valid request.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(OpenFilesLimit {
        before,
        now: rlim_u64(limit.rlim_cur),
    })
}

/// `rlim_t` is `u64` on Linux and macOS, another width elsewhere.
#[allow(clippy::unnecessary_cast)]
fn rlim_u64(v: libc::rlim_t) -> u64 {
    v as u64
}

/// Tells the kernel that `file` will be read sequentially (a larger read-ahead window); a
/// hint only, so a failure is ignored.
#[allow(unsafe_code)]
pub fn advise_sequential(file: &std::fs::File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: posix_fadvise reads no memory; a bad descriptor only returns an error.
        unsafe {
            libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_files_limit_rises_to_the_hard_limit() -> std::io::Result<()> {
        let first = raise_open_files_limit()?;
        assert!(first.now >= first.before);
        let again = raise_open_files_limit()?;
        assert_eq!(
            again,
            OpenFilesLimit {
                before: first.now,
                now: first.now
            }
        );
        Ok(())
    }
}

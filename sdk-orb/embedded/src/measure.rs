//! What `run.sh` reports about `seal_envelope` and its steps: the stack used (the stack painted
//! with a pattern before the call, scanned after) and the instructions executed (QEMU runs with
//! `-icount shift=0`, so its virtual clock advances one nanosecond per instruction; the CMSDK
//! timer at 0x4000_0000 counts that clock, and a loop of known length calibrates it).

use core::ptr::{addr_of, read_volatile, write_volatile};

const PAINT: u32 = 0x5EA1_5EA1;

/// CMSDK APB timer 0 of the MPS2 FPGA images: control, current value, reload.
const TIMER_CTRL: *mut u32 = 0x4000_0000 as *mut u32;
const TIMER_VALUE: *mut u32 = 0x4000_0004 as *mut u32;
const TIMER_RELOAD: *mut u32 = 0x4000_0008 as *mut u32;

extern "C" {
    /// End of .bss (cortex-m-rt's heap start); the stack grows down towards it.
    static __sheap: u32;
}

/// Starts the timer counting down from its largest value.
pub fn timer_start() {
    // SAFETY: the MPS2 images map timer 0's registers at these addresses; nothing else in
    // this single-threaded program touches them.
    unsafe {
        write_volatile(TIMER_CTRL, 0);
        write_volatile(TIMER_RELOAD, u32::MAX);
        write_volatile(TIMER_VALUE, u32::MAX);
        write_volatile(TIMER_CTRL, 1);
    }
}

/// The timer's current value (it counts down).
#[inline(always)]
pub fn timer_now() -> u32 {
    // SAFETY: as in `timer_start`; a read has no side effect on this timer.
    unsafe { read_volatile(TIMER_VALUE) }
}

/// Timer ticks taken by `iterations` rounds of a two-instruction loop.
#[inline(never)]
pub fn calibrate(iterations: u32) -> u32 {
    let start = timer_now();
    // SAFETY: a register-only countdown loop; it touches no memory.
    unsafe {
        core::arch::asm!(
            "1:",
            "subs {n}, {n}, #1",
            "bne 1b",
            n = inout(reg) iterations => _,
            options(nomem, nostack),
        );
    }
    start.wrapping_sub(timer_now())
}

/// Iterations of the calibration loop (two instructions each).
pub const CALIBRATION_ITERATIONS: u32 = 1_000_000;

/// Instruction counts from the calibrated timer.
pub struct Counter {
    /// Timer ticks of the calibration loop.
    pub loop_ticks: u32,
    last_stack: core::cell::Cell<usize>,
}

impl Counter {
    /// Starts the timer and calibrates it.
    pub fn start() -> Counter {
        timer_start();
        Counter {
            loop_ticks: calibrate(CALIBRATION_ITERATIONS),
            last_stack: core::cell::Cell::new(0),
        }
    }

    /// Instructions executed in `ticks` timer ticks.
    pub fn instructions(&self, ticks: u32) -> u64 {
        u64::from(ticks) * 2 * u64::from(CALIBRATION_ITERATIONS) / u64::from(self.loop_ticks)
    }

    /// Runs `f` and counts its instructions; [`Counter::last_stack`] is then its stack.
    #[inline(never)]
    pub fn count<T>(&self, f: impl FnOnce() -> T) -> (T, u64) {
        paint_stack();
        let sp = cortex_m::register::msp::read() as usize;
        let start = timer_now();
        let out = f();
        let ticks = start.wrapping_sub(timer_now());
        self.last_stack.set(stack_used_below(sp));
        (out, self.instructions(ticks))
    }

    /// Bytes of stack the last counted call used.
    pub fn last_stack(&self) -> usize {
        self.last_stack.get()
    }
}

fn stack_floor() -> usize {
    // Only the address of the linker symbol is taken, never its value.
    addr_of!(__sheap) as usize
}

/// Fills the unused stack, from the end of .bss up to just below this function's frame,
/// with the pattern.
#[inline(never)]
pub fn paint_stack() {
    let top = cortex_m::register::msp::read() as usize - 64;
    let mut p = stack_floor();
    while p < top {
        // SAFETY: [floor, top) lies below every live stack frame (this function's frame is
        // above `top`) and above every static; no interrupt is enabled and there is no heap,
        // so nothing else uses that memory while it is painted.
        unsafe { write_volatile(p as *mut u32, PAINT) };
        p += 4;
    }
}

/// Bytes of stack used below `sp` since the last `paint_stack`: from `sp` down to the lowest
/// word that no longer holds the pattern.
pub fn stack_used_below(sp: usize) -> usize {
    let mut p = stack_floor();
    // SAFETY: the same region `paint_stack` wrote; reading it races with nothing.
    while p < sp && unsafe { read_volatile(p as *const u32) } == PAINT {
        p += 4;
    }
    sp.saturating_sub(p)
}

//! The machine's u16 multiply-add peak, which the bench divides the dot-product phase by: the
//! kernel's multiply instruction on registers, timed beside an estimate of the core clock so
//! a figure above what the core can issue is caught instead of printed.

use crate::kernels::{Avx2, Avx512Vnni};
use crate::Kernel;
use ocelli_os::thread_cpu_seconds;

/// The measured peak of one kernel's instruction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MacPeak {
    /// u16 multiply-adds per second, best of the runs.
    pub macs_per_second: f64,
    /// Core clock estimated in the same runs (one dependent `add` per cycle).
    pub clock_hz: f64,
}

impl MacPeak {
    /// Multiply-adds per cycle at the estimated clock.
    pub fn per_cycle(&self) -> f64 {
        self.macs_per_second / self.clock_hz
    }
}

/// Multiply-adds per cycle no core can exceed with `kernel`'s instruction: two vector
/// multiply pipes (Zen 4 and 5, Golden Cove; Zen 4 splits a zmm `vpdpwssd` over both, so it
/// issues one), times the multiply-adds per instruction. The portable kernel's loop may be
/// auto-vectorised with whatever the build enables, so it gets AVX-512's bound.
pub fn max_per_cycle(kernel: Kernel) -> f64 {
    match kernel {
        Kernel::Avx512Vnni(_) | Kernel::Scalar => 2.0 * 32.0,
        Kernel::Avx2(_) => 2.0 * 16.0,
    }
}

/// The estimated clock may lag a frequency change by a little; a probe this far above
/// [`max_per_cycle`] is a measurement error, not noise.
const CLOCK_TOLERANCE: f64 = 1.25;

/// Multiply-adds per second one core issues with `kernel`'s instruction on register-resident
/// data, per second of this thread's CPU time (as the bench times the engine: time the core
/// spent on other processes counts in neither), the best of five runs. `None` where the
/// figure exceeds what the core can issue at the clock measured around it.
pub fn mac_peak(kernel: Kernel) -> Option<MacPeak> {
    const ITERS: u64 = 5_000_000;
    best_of_five(kernel, || match kernel {
        Kernel::Avx512Vnni(cpu) => peak_avx512_vnni(cpu, ITERS),
        Kernel::Avx2(cpu) => peak_avx2(cpu, ITERS),
        Kernel::Scalar => peak_scalar(ITERS / 8),
    })
}

/// Multiply-adds per second one core sustains when every product is also added into an
/// accumulator, as a dot product needs, measured as [`mac_peak`]. AVX2 has no accumulating
/// multiply: each `vpmaddwd` takes a `vpaddd` beside it, and the two share the vector pipes,
/// so this bounds what any AVX2 dot-product loop reaches. `vpdpwssd` and the portable
/// multiply-add accumulate themselves: for them this is `peak`, the kernel's [`mac_peak`]
/// already measured.
pub fn accumulate_peak(kernel: Kernel, peak: Option<MacPeak>) -> Option<MacPeak> {
    const ITERS: u64 = 5_000_000;
    match kernel {
        Kernel::Avx2(cpu) => best_of_five(kernel, || peak_avx2_accumulate(cpu, ITERS)),
        Kernel::Avx512Vnni(_) | Kernel::Scalar => peak,
    }
}

/// The best rate of five runs of `run` (which returns the multiply-adds it issued), or
/// `None` if a run read more than `kernel` can issue at the clock measured around it.
fn best_of_five(kernel: Kernel, run: impl Fn() -> u64) -> Option<MacPeak> {
    let mut best = MacPeak {
        macs_per_second: 0.0,
        clock_hz: 1.0,
    };
    for _ in 0..5 {
        let before = clock_hz();
        let start = thread_cpu_seconds();
        let macs = run();
        let rate = macs as f64 / (thread_cpu_seconds() - start).max(1e-9);
        // The higher clock of the two sides: the lenient bound.
        let clock = before.max(clock_hz());
        if rate / clock > max_per_cycle(kernel) * CLOCK_TOLERANCE {
            return None;
        }
        if rate > best.macs_per_second {
            best = MacPeak {
                macs_per_second: rate,
                clock_hz: clock,
            };
        }
    }
    Some(best)
}

/// Cycles per second of this core: a chain of dependent `add`s, one cycle each on every x86
/// core since the Pentium Pro, per second of this thread's CPU time, the best of several
/// short runs; elsewhere, `f64::INFINITY` (no bound).
pub fn clock_hz() -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        const ITERS: u64 = 250_000;
        (0..8)
            .map(|_| {
                let start = thread_cpu_seconds();
                x86::add_chain(ITERS);
                (ITERS * 8) as f64 / (thread_cpu_seconds() - start).max(1e-9)
            })
            .fold(0.0, f64::max)
    }
    #[cfg(not(target_arch = "x86_64"))]
    f64::INFINITY
}

/// Multiply-adds `iters` rounds of 16 independent `vpdpwssd` issue (32 each).
pub fn peak_avx512_vnni(_cpu: Avx512Vnni, iters: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves the CPU has the target features; the loop touches registers only.
    return unsafe { x86::peak_avx512_vnni(iters) };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no token exists off x86_64")
}

/// Multiply-adds `iters` rounds of 12 independent `vpmaddwd` issue (16 each).
pub fn peak_avx2(_cpu: Avx2, iters: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves the CPU has the target feature; the loop touches registers only.
    return unsafe { x86::peak_avx2(iters) };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no token exists off x86_64")
}

/// Multiply-adds `iters` rounds of 12 `vpmaddwd`, each added into its own accumulator by a
/// `vpaddd`, issue (16 each).
pub fn peak_avx2_accumulate(_cpu: Avx2, iters: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves the CPU has the target feature; the loop touches registers only.
    return unsafe { x86::peak_avx2_accumulate(iters) };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no token exists off x86_64")
}

/// Multiply-adds one core issues with the portable kernel's scalar multiply-add.
pub fn peak_scalar(iters: u64) -> u64 {
    let mut acc = [1u16; 64];
    let x = std::hint::black_box([3u16; 64]);
    for _ in 0..iters {
        for (a, b) in acc.iter_mut().zip(x) {
            *a = a.wrapping_mul(b).wrapping_add(b);
        }
    }
    std::hint::black_box(acc);
    iters * 64
}

/// Assembly, so the compiler can neither hoist nor fold the instructions whose rate is
/// measured (with intrinsics on constant operands it hoisted the multiply out of the loop and
/// reported rates no core can issue).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::asm;

    /// `iters` rounds of 8 dependent one-cycle `add`s (the loop counter runs beside them).
    /// The addend is a register: Intel cores since Golden Cove fold a chain of immediate
    /// adds at rename, which read four times the clock on a Xeon.
    pub fn add_chain(iters: u64) {
        if iters == 0 {
            return;
        }
        // SAFETY: general-purpose register arithmetic only.
        unsafe {
            asm!(
                "2:",
                "add {a}, {one}",
                "add {a}, {one}",
                "add {a}, {one}",
                "add {a}, {one}",
                "add {a}, {one}",
                "add {a}, {one}",
                "add {a}, {one}",
                "add {a}, {one}",
                "dec {n}",
                "jnz 2b",
                a = inout(reg) 0u64 => _,
                one = in(reg) 1u64,
                n = inout(reg) iters => _,
                options(nomem, nostack),
            );
        }
    }

    /// `iters` rounds of 16 independent `vpdpwssd` accumulation chains (32 multiply-adds
    /// each); returns the multiply-adds issued.
    ///
    /// # Safety
    /// The CPU must support `avx512f` and `avx512vnni`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn peak_avx512_vnni(iters: u64) -> u64 {
        if iters == 0 {
            return 0;
        }
        // SAFETY: register-only arithmetic on clobbered vector registers; the caller
        // guarantees the features.
        unsafe {
            asm!(
                "vpternlogd zmm16, zmm16, zmm16, 0xff",
                "vpternlogd zmm17, zmm17, zmm17, 0xff",
                "2:",
                "vpdpwssd zmm0, zmm16, zmm17",
                "vpdpwssd zmm1, zmm16, zmm17",
                "vpdpwssd zmm2, zmm16, zmm17",
                "vpdpwssd zmm3, zmm16, zmm17",
                "vpdpwssd zmm4, zmm16, zmm17",
                "vpdpwssd zmm5, zmm16, zmm17",
                "vpdpwssd zmm6, zmm16, zmm17",
                "vpdpwssd zmm7, zmm16, zmm17",
                "vpdpwssd zmm8, zmm16, zmm17",
                "vpdpwssd zmm9, zmm16, zmm17",
                "vpdpwssd zmm10, zmm16, zmm17",
                "vpdpwssd zmm11, zmm16, zmm17",
                "vpdpwssd zmm12, zmm16, zmm17",
                "vpdpwssd zmm13, zmm16, zmm17",
                "vpdpwssd zmm14, zmm16, zmm17",
                "vpdpwssd zmm15, zmm16, zmm17",
                "dec {n}",
                "jnz 2b",
                n = inout(reg) iters => _,
                out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
                out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
                out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
                out("zmm12") _, out("zmm13") _, out("zmm14") _, out("zmm15") _,
                out("zmm16") _, out("zmm17") _,
                options(nomem, nostack),
            );
        }
        iters * 16 * 32
    }

    /// `iters` rounds of 12 independent `vpmaddwd` (16 multiply-adds each); returns the
    /// multiply-adds issued.
    ///
    /// # Safety
    /// The CPU must support `avx2`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn peak_avx2(iters: u64) -> u64 {
        if iters == 0 {
            return 0;
        }
        // SAFETY: register-only arithmetic on clobbered vector registers; the caller
        // guarantees the feature.
        unsafe {
            asm!(
                "vpcmpeqd ymm12, ymm12, ymm12",
                "vpcmpeqd ymm13, ymm13, ymm13",
                "2:",
                "vpmaddwd ymm0, ymm12, ymm13",
                "vpmaddwd ymm1, ymm12, ymm13",
                "vpmaddwd ymm2, ymm12, ymm13",
                "vpmaddwd ymm3, ymm12, ymm13",
                "vpmaddwd ymm4, ymm12, ymm13",
                "vpmaddwd ymm5, ymm12, ymm13",
                "vpmaddwd ymm6, ymm12, ymm13",
                "vpmaddwd ymm7, ymm12, ymm13",
                "vpmaddwd ymm8, ymm12, ymm13",
                "vpmaddwd ymm9, ymm12, ymm13",
                "vpmaddwd ymm10, ymm12, ymm13",
                "vpmaddwd ymm11, ymm12, ymm13",
                "dec {n}",
                "jnz 2b",
                n = inout(reg) iters => _,
                out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
                out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
                out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _,
                out("ymm12") _, out("ymm13") _,
                options(nomem, nostack),
            );
        }
        iters * 12 * 16
    }

    /// `iters` rounds of 12 `vpmaddwd` (16 multiply-adds each), each product added into one
    /// of 12 accumulators; returns the multiply-adds issued.
    ///
    /// # Safety
    /// The CPU must support `avx2`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn peak_avx2_accumulate(iters: u64) -> u64 {
        if iters == 0 {
            return 0;
        }
        // SAFETY: register-only arithmetic on clobbered vector registers; the caller
        // guarantees the feature.
        unsafe {
            asm!(
                "vpcmpeqd ymm12, ymm12, ymm12",
                "vpcmpeqd ymm13, ymm13, ymm13",
                "2:",
                "vpmaddwd ymm14, ymm12, ymm13",
                "vpaddd ymm0, ymm0, ymm14",
                "vpmaddwd ymm15, ymm12, ymm13",
                "vpaddd ymm1, ymm1, ymm15",
                "vpmaddwd ymm14, ymm12, ymm13",
                "vpaddd ymm2, ymm2, ymm14",
                "vpmaddwd ymm15, ymm12, ymm13",
                "vpaddd ymm3, ymm3, ymm15",
                "vpmaddwd ymm14, ymm12, ymm13",
                "vpaddd ymm4, ymm4, ymm14",
                "vpmaddwd ymm15, ymm12, ymm13",
                "vpaddd ymm5, ymm5, ymm15",
                "vpmaddwd ymm14, ymm12, ymm13",
                "vpaddd ymm6, ymm6, ymm14",
                "vpmaddwd ymm15, ymm12, ymm13",
                "vpaddd ymm7, ymm7, ymm15",
                "vpmaddwd ymm14, ymm12, ymm13",
                "vpaddd ymm8, ymm8, ymm14",
                "vpmaddwd ymm15, ymm12, ymm13",
                "vpaddd ymm9, ymm9, ymm15",
                "vpmaddwd ymm14, ymm12, ymm13",
                "vpaddd ymm10, ymm10, ymm14",
                "vpmaddwd ymm15, ymm12, ymm13",
                "vpaddd ymm11, ymm11, ymm15",
                "dec {n}",
                "jnz 2b",
                n = inout(reg) iters => _,
                out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
                out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
                out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _,
                out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
                options(nomem, nostack),
            );
        }
        iters * 12 * 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every supported kernel's probe stays within what a core can issue at the clock
    /// measured around it (the bound itself, not a speed).
    #[test]
    fn the_peak_probe_never_exceeds_what_the_core_can_issue() {
        for kernel in Kernel::all_supported() {
            let peak = mac_peak(kernel);
            for peak in [peak, accumulate_peak(kernel, peak)] {
                let peak = peak.expect("plausible peak");
                assert!(peak.macs_per_second > 0.0 && peak.clock_hz > 0.0);
                assert!(peak.per_cycle() <= max_per_cycle(kernel) * CLOCK_TOLERANCE);
            }
        }
    }
}

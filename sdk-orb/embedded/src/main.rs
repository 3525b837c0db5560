//! Firmware test image for a Cortex-M7 (QEMU `mps2-an500`): replays sdk-orb's conformance
//! families on the target, seals the fixture person of `envelope_sealing` vector 1 under
//! measurement, and reports over semihosting; built with the `steps` feature it counts the
//! instructions of each step of the seal instead of running the checks. The last line is
//! `N passed, M failed`; the semihosting exit status is non-zero on any failure.
#![no_std]
#![no_main]
// Failure messages are carried inline (there is no allocator); their size does not matter in a
// test harness.
#![allow(clippy::result_large_err)]
// The step build runs no checks, so most of them go unused there.
#![cfg_attr(feature = "steps", allow(dead_code))]

mod cases;
mod checks;
mod measure;
mod runtime;
#[cfg(feature = "steps")]
mod steps;

use cortex_m_rt::entry;
use cortex_m_semihosting::hprintln;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use sdk_orb::envelope::{seal_envelope, MAX_ENVELOPE_LEN};
use sdk_orb::shamir::PartyShares;

use cases::{Case, CASES};
use checks::{Buffers, Check};

#[entry]
fn main() -> ! {
    let (Some(envelope), Some(scratch), Some(shares)) = (
        cortex_m::singleton!(: [u8; MAX_ENVELOPE_LEN + 3] = [0; MAX_ENVELOPE_LEN + 3]),
        cortex_m::singleton!(: [u8; 80 * 1024] = [0; 80 * 1024]),
        cortex_m::singleton!(: PartyShares = PartyShares::zero()),
    ) else {
        finish(0, 1)
    };
    let mut buf = Buffers {
        envelope,
        scratch,
        shares,
    };
    let (mut passed, mut failed) = (0u32, 0u32);
    let mut tally = |family: &str, id: u32, result: Check| match result {
        Ok(()) => passed += 1,
        Err(e) => {
            failed += 1;
            hprintln!("FAIL {} {}: {}", family, id, e.0.as_str());
        }
    };
    #[cfg(not(feature = "steps"))]
    {
        for v in CASES {
            tally(v.family, v.id, checks::run(v, &mut buf));
        }
        tally("measured seal", 1, measured_seal(&mut buf));
    }
    #[cfg(feature = "steps")]
    {
        // The steps read the fixture envelope the measured seal writes.
        tally("measured seal", 1, measured_seal(&mut buf));
        tally("measured steps", 1, steps::measure(&mut buf));
    }
    finish(passed, failed)
}

/// The fixture person: `envelope_sealing` vector 1.
pub fn fixture() -> Result<&'static cases::Seal, checks::Fail> {
    CASES
        .iter()
        .find_map(|v| match v.case {
            Case::Seal(s) if v.id == 1 => Some(s),
            _ => None,
        })
        .ok_or_else(|| checks::Fail::msg("no envelope_sealing vector 1"))
}

/// Seals `envelope_sealing` vector 1 with the stack painted and the timer running, prints
/// the figures, and checks the bytes.
fn measured_seal(buf: &mut Buffers) -> Check {
    let s = fixture()?;
    let (_, public, orb) = checks::keys(&s.keys)?;
    let left = template(&s.left);
    let right = template(&s.right);
    let mut rng = ChaCha20Rng::from_seed(s.rng_seed);
    buf.envelope.fill(0xA5);
    let out = &mut buf.envelope[..];

    let counter = measure::Counter::start();
    measure::paint_stack();
    let sp = cortex_m::register::msp::read() as usize;
    let start = measure::timer_now();
    let sealed = seal_envelope(&mut rng, &s.request, &left, &right, &public, &orb, out);
    let ticks = start.wrapping_sub(measure::timer_now());
    let stack = measure::stack_used_below(sp);

    let insns = counter.instructions(ticks);
    hprintln!("seal_envelope stack bytes: {}", stack);
    hprintln!(
        "seal_envelope timer ticks: {} (calibration: {} ticks for {} instructions)",
        ticks,
        counter.loop_ticks,
        2 * measure::CALIBRATION_ITERATIONS
    );
    hprintln!("seal_envelope instructions: {}", insns);
    let n = match sealed {
        Ok(n) => n,
        Err(e) => {
            let mut s = heapless::String::new();
            let _ = core::fmt::Write::write_fmt(&mut s, format_args!("seal: {e:?}"));
            return Err(checks::Fail(s));
        }
    };
    checks::check_sealed(s, &buf.envelope[..], n)
}

pub fn template(p: &cases::Packed) -> sdk_orb::IrisTemplate {
    // The vector templates are valid; a failure shows as a byte mismatch in check_sealed.
    sdk_orb::IrisTemplate::new(
        sdk_orb::IrisBits::from_packed(p.code),
        sdk_orb::IrisBits::from_packed(p.mask),
        sdk_orb::template::DEFAULT_VERSION,
        &sdk_orb::TemplatePolicy { min_usable_bits: 0 },
    )
    .unwrap_or_else(|_| panic!("vector template invalid"))
}

fn finish(passed: u32, failed: u32) -> ! {
    hprintln!("{} passed, {} failed", passed, failed);
    runtime::exit(failed == 0)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    hprintln!("panic: {}", info);
    runtime::exit(false)
}

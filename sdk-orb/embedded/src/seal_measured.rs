//! The seal-only image with the seal measured: stack painted and timer running, printing
//! `seal_envelope v2 stack bytes: N` and `seal_envelope v2 instructions: N`. These are the
//! figures of an orb's image, which seals and never opens: in the test image the version 2
//! opening checks are a second caller of ML-KEM's encryption, which LLVM then keeps out of
//! line with a frame about three times the inlined one's.
#![no_std]
#![no_main]

mod measure;
mod person;
mod runtime;

use cortex_m_rt::entry;
use cortex_m_semihosting::hprintln;
use sdk_orb::envelope::v2::seal_envelope_v2;

use runtime::exit;

#[entry]
fn main() -> ! {
    let Some((out, mut p)) = person::setup() else {
        exit(false)
    };
    let counter = measure::Counter::start();
    let (sealed, insns) = counter.count(|| {
        seal_envelope_v2(
            &mut p.rng, &p.meta, &p.left, &p.right, &p.nodes, &p.orb, out,
        )
    });
    hprintln!("seal_envelope v2 stack bytes: {}", counter.last_stack());
    hprintln!("seal_envelope v2 instructions: {}", insns);
    core::hint::black_box(&out[..]);
    exit(sealed.is_ok())
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    hprintln!("panic: {}", info);
    exit(false)
}

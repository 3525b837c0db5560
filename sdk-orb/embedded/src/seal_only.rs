//! Firmware image that seals one person with the SDK (envelope version 2, X-Wing to each node)
//! and does nothing else, so its flash is the SDK's own (with the runtime, the RNG and the exit
//! call) apart from any test data. Exits through semihosting: success if the envelope was
//! sealed.
#![no_std]
#![no_main]

mod person;
mod runtime;

use cortex_m_rt::entry;
use sdk_orb::envelope::v2::seal_envelope_v2;

use runtime::exit;

#[entry]
fn main() -> ! {
    let Some((out, mut p)) = person::setup() else {
        exit(false)
    };
    let sealed = seal_envelope_v2(
        &mut p.rng, &p.meta, &p.left, &p.right, &p.nodes, &p.orb, out,
    );
    core::hint::black_box(&out[..]);
    exit(sealed.is_ok())
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    exit(false)
}

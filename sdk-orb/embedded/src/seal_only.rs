//! Firmware image that seals one person with the SDK and does nothing else, so its flash is the
//! SDK's own (with the runtime, the RNG and the exit call) apart from any test data. The person
//! and the keys are drawn from fixed seeds at start-up. Exits through semihosting: success if
//! the envelope was sealed.
#![no_std]
#![no_main]

mod runtime;

use cortex_m_rt::entry;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore as _, SeedableRng as _};
use sdk_orb::envelope::{seal_envelope, RequestMeta, MAX_ENVELOPE_LEN};
use sdk_orb::keys::{NodePublicKeys, NodeSecretKey, OrbSigningKey};
use sdk_orb::template::{IrisBits, IrisTemplate, TemplatePolicy, DEFAULT_VERSION, PACKED_BYTES};
use sdk_orb::{RequestId, RequestType};

use runtime::exit;

#[entry]
fn main() -> ! {
    let Some(out) = cortex_m::singleton!(: [u8; MAX_ENVELOPE_LEN] = [0; MAX_ENVELOPE_LEN]) else {
        exit(false)
    };
    let mut rng = ChaCha20Rng::from_seed([7; 32]);
    let (Some(left), Some(right)) = (template(&mut rng), template(&mut rng)) else {
        exit(false)
    };
    let node = |seed: u8| NodeSecretKey::from_bytes(&[seed; 32]).map(|k| k.public_key());
    let (Ok(a), Ok(b), Ok(c)) = (node(1), node(2), node(3)) else {
        exit(false)
    };
    let nodes = NodePublicKeys([a, b, c]);
    let orb = OrbSigningKey::from_bytes(&[4; 32]);
    let meta = RequestMeta {
        request_id: RequestId::random(&mut rng),
        request_type: RequestType::Uniqueness,
        timestamp_ms: 1_700_000_000_000,
        serial_id: 0,
        or_policy: false,
    };
    let sealed = seal_envelope(&mut rng, &meta, &left, &right, &nodes, &orb, out);
    core::hint::black_box(&out[..]);
    exit(sealed.is_ok())
}

/// A template with random code bits and every bit usable.
fn template(rng: &mut ChaCha20Rng) -> Option<IrisTemplate> {
    let mut code = [0u8; PACKED_BYTES];
    rng.fill_bytes(&mut code);
    let policy = TemplatePolicy { min_usable_bits: 0 };
    IrisTemplate::new(
        IrisBits::from_packed(&code),
        IrisBits::ones(),
        DEFAULT_VERSION,
        &policy,
    )
    .ok()
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    exit(false)
}

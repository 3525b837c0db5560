//! Firmware image that seals one person with the SDK (envelope version 2, X-Wing to each node)
//! and does nothing else, so its flash is the
//! SDK's own (with the runtime, the RNG and the exit call) apart from any test data. The person
//! and the keys are drawn from fixed seeds at start-up. Exits through semihosting: success if
//! the envelope was sealed.
#![no_std]
#![no_main]

mod runtime;

use cortex_m_rt::entry;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore as _, SeedableRng as _};
use sdk_orb::envelope::v2::{seal_envelope_v2, MAX_ENVELOPE_LEN_V2};
use sdk_orb::envelope::RequestMeta;
use sdk_orb::keys::{NodeHybridPublicKeys, NodeHybridSecretKey, OrbSigningKey};
use sdk_orb::template::{IrisBits, IrisTemplate, TemplatePolicy, DEFAULT_VERSION, PACKED_BYTES};
use sdk_orb::{RequestId, RequestType};

use runtime::exit;

#[entry]
fn main() -> ! {
    let Some(out) = cortex_m::singleton!(: [u8; MAX_ENVELOPE_LEN_V2] = [0; MAX_ENVELOPE_LEN_V2])
    else {
        exit(false)
    };
    let mut rng = ChaCha20Rng::from_seed([7; 32]);
    let (Some(left), Some(right)) = (template(&mut rng), template(&mut rng)) else {
        exit(false)
    };
    let nodes = NodeHybridPublicKeys(core::array::from_fn(|p| {
        NodeHybridSecretKey::from_seed(&[p as u8 + 1; 32]).public_key()
    }));
    let orb = OrbSigningKey::from_bytes(&[4; 32]);
    let meta = RequestMeta {
        request_id: RequestId::random(&mut rng),
        request_type: RequestType::Uniqueness,
        timestamp_ms: 1_700_000_000_000,
        serial_id: 0,
        or_policy: false,
    };
    let sealed = seal_envelope_v2(&mut rng, &meta, &left, &right, &nodes, &orb, out);
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

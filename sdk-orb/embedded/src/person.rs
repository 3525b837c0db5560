//! The one person and keys the seal-only images seal: drawn from fixed seeds at start-up.

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore as _, SeedableRng as _};
use sdk_orb::envelope::v2::MAX_ENVELOPE_LEN_V2;
use sdk_orb::envelope::RequestMeta;
use sdk_orb::keys::{NodeHybridPublicKeys, NodeHybridSecretKey, OrbSigningKey};
use sdk_orb::template::{IrisBits, IrisTemplate, TemplatePolicy, DEFAULT_VERSION, PACKED_BYTES};
use sdk_orb::{RequestId, RequestType};

/// What a seal takes besides the output buffer.
pub struct Person {
    pub rng: ChaCha20Rng,
    pub meta: RequestMeta,
    pub left: IrisTemplate,
    pub right: IrisTemplate,
    pub nodes: NodeHybridPublicKeys,
    pub orb: OrbSigningKey,
}

/// The envelope buffer (taken once) and the person.
pub fn setup() -> Option<(&'static mut [u8; MAX_ENVELOPE_LEN_V2], Person)> {
    let out = cortex_m::singleton!(: [u8; MAX_ENVELOPE_LEN_V2] = [0; MAX_ENVELOPE_LEN_V2])?;
    Some((out, person()?))
}

fn person() -> Option<Person> {
    let mut rng = ChaCha20Rng::from_seed([7; 32]);
    let left = template(&mut rng)?;
    let right = template(&mut rng)?;
    let nodes = NodeHybridPublicKeys(core::array::from_fn(|p| {
        NodeHybridSecretKey::from_seed(&[p as u8 + 1; 32]).public_key()
    }));
    let meta = RequestMeta {
        request_id: RequestId::random(&mut rng),
        request_type: RequestType::Uniqueness,
        timestamp_ms: 1_700_000_000_000,
        serial_id: 0,
        or_policy: false,
    };
    Some(Person {
        rng,
        meta,
        left,
        right,
        nodes,
        orb: OrbSigningKey::from_bytes(&[4; 32]),
    })
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

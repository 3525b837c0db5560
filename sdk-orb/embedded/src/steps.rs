//! The instructions and the stack of each step of `seal_envelope` on the fixture person:
//! `step <name> instructions: N` and `step <name> stack bytes: N`, then the instructions' sum. Each step runs alone over the data the seal
//! gives it, so the sum differs from the whole seal by the glue between the steps. Last, the
//! version 2 seal's own steps: the seed's keystream, the payload plaintexts (keystream,
//! extraction, sharing, share bytes), the digest, and each party's payload sealed as the seal
//! seals it (X-Wing, key schedule, AEAD).

use chacha20::cipher::{KeyIvInit as _, StreamCipher as _};
use cortex_m_semihosting::hprintln;
use poly1305::universal_hash::{KeyInit as _, UniversalHash as _};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use sdk_orb::envelope::v2::payload_len_v2;
use sdk_orb::envelope::{payload_len, EnvelopeError, V1, V2};
use sdk_orb::keys::{NodeHybridPublicKeys, NodeHybridSecretKey};
use sdk_orb::ring::GaloisRingElement;
use sdk_orb::shamir::seeded::{seeded_party, ShareSeed};
use sdk_orb::steps;
use sdk_orb::PartyId;

use crate::checks::{self, Buffers, Check};
use crate::measure::Counter;

/// Counts and prints every step; the envelope buffer must hold the sealed fixture envelope.
pub fn measure(buf: &mut Buffers) -> Check {
    let s = crate::fixture()?;
    let (_, public, orb) = checks::keys(&s.keys)?;
    let left = crate::template(&s.left);
    let right = crate::template(&s.right);
    let mut rng = ChaCha20Rng::from_seed(s.rng_seed);
    let counter = Counter::start();
    let mut total = 0u64;
    let mut report = |name: &str, n: u64| {
        total += n;
        hprintln!("step {} instructions: {}", name, n);
        hprintln!("step {} stack bytes: {}", name, counter.last_stack());
    };

    let (d, insns) =
        counter.count(|| steps::envelope_digest::<V1>(&s.request, &orb, &mut buf.envelope[..]));
    report("digest", insns);
    let (sig, insns) = counter.count(|| steps::signature(&orb, &d));
    report("signature", insns);
    if sig != s.signature || d.0 != s.digest {
        return Err(checks::Fail::msg(
            "digest or signature differs from the vector",
        ));
    }

    let (sum, insns) = counter.count(|| steps::coefficients(&left) ^ steps::coefficients(&right));
    report("coefficients", insns);
    core::hint::black_box(sum);
    let (sum, insns) = counter.count(|| steps::randomness(&mut rng) ^ steps::randomness(&mut rng));
    report("randomness", insns);
    core::hint::black_box(sum);
    let bytes = core::hint::black_box([0x5Au8; 512]);
    let plain = core::hint::black_box([1u16, 0xFFFF, 0, 1]);
    let (sum, insns) =
        counter.count(|| steps::sharing(&plain, &bytes) + steps::sharing(&plain, &bytes));
    report("sharing", insns);
    core::hint::black_box(sum);
    let shares = core::hint::black_box([GaloisRingElement([1, 2, 3, 4]); 3]);
    let ((), insns) = counter.count(|| steps::payload(&s.request, &shares, &mut buf.envelope[..]));
    report("payload", insns);

    let mut rng = ChaCha20Rng::from_seed(s.rng_seed);
    for party in PartyId::ALL {
        let mut enc = [0u8; 32];
        let (ctx, insns) =
            counter.count(|| steps::kem(&mut rng, &s.request, &public, party, &mut enc));
        report(KEM[party.index()], insns);
        let mut ctx = ctx.map_err(seal_error)?;
        let len = payload_len(party);
        let payload = &mut buf.scratch[..len];
        let (tag, insns) = counter.count(|| steps::aead(&mut ctx, &s.request, &orb, payload));
        report(AEAD[party.index()], insns);
        core::hint::black_box(tag.map_err(seal_error)?);
    }
    hprintln!("steps total instructions: {}", total);

    // The AEAD of party 0's payload split into its cipher and its MAC, apart from the total.
    let payload = &mut buf.scratch[..payload_len(PartyId::ALL[0])];
    let ((), insns) = counter.count(|| {
        let mut cipher = chacha20::ChaCha20::new(&[1; 32].into(), &[2; 12].into());
        cipher.apply_keystream(payload);
    });
    hprintln!("step aead-party0-chacha20 instructions: {}", insns);
    let (tag, insns) = counter.count(|| {
        let mut mac = poly1305::Poly1305::new(&[3; 32].into());
        mac.update_padded(payload);
        mac.finalize()
    });
    core::hint::black_box(tag);
    hprintln!("step aead-party0-poly1305 instructions: {}", insns);

    // Envelope version 2: each party's payload sealed by the seal's own function (the X-Wing
    // encapsulation, the key schedule and the AEAD), apart from the total above. The seeded
    // party's payload is the seed alone.
    let nodes = NodeHybridPublicKeys(core::array::from_fn(|p| {
        NodeHybridSecretKey::from_seed(&[0x58 + p as u8; 32]).public_key()
    }));
    let seeded = seeded_party(&s.request.request_id);
    let seed = ShareSeed([0x5E; 32]);
    let (sum, insns) = counter.count(|| steps::keystream_v2(&seed));
    core::hint::black_box(sum);
    report_v2("v2-keystream", insns, &counter);
    let ((), insns) = counter.count(|| {
        steps::payloads_v2(
            &s.request,
            &orb,
            &seed,
            &left,
            &right,
            &mut buf.envelope[..],
        )
    });
    report_v2("v2-payloads", insns, &counter);
    let (d, insns) =
        counter.count(|| steps::envelope_digest::<V2>(&s.request, &orb, &mut buf.envelope[..]));
    core::hint::black_box(d);
    report_v2("v2-digest", insns, &counter);
    for party in PartyId::ALL {
        let len = payload_len_v2(party, seeded);
        let payload = &mut buf.envelope[..len];
        let (sealed, insns) = counter
            .count(|| steps::seal_payload_v2(&mut rng, &s.request, &nodes, &orb, party, payload));
        sealed.map_err(seal_error)?;
        hprintln!(
            "step xwing-seal-party{} instructions: {} (payload {} bytes)",
            party.get(),
            insns,
            len
        );
        hprintln!(
            "step xwing-seal-party{} stack bytes: {}",
            party.get(),
            counter.last_stack()
        );
    }
    Ok(())
}

/// Prints a version 2 step apart from the version 1 steps' total.
fn report_v2(name: &str, insns: u64, counter: &Counter) {
    hprintln!("step {} instructions: {}", name, insns);
    hprintln!("step {} stack bytes: {}", name, counter.last_stack());
}

const KEM: [&str; 3] = ["kem-party0", "kem-party1", "kem-party2"];
const AEAD: [&str; 3] = ["aead-party0", "aead-party1", "aead-party2"];

fn seal_error(e: EnvelopeError) -> checks::Fail {
    let mut s = heapless::String::new();
    let _ = core::fmt::Write::write_fmt(&mut s, format_args!("step: {e:?}"));
    checks::Fail(s)
}

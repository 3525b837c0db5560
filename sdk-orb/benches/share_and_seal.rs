//! Sharing plus sealing one person (two eyes) into a complete signed envelope, and the
//! node-side opening of one party's payload.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use sdk_orb::envelope::{envelope_len, open_payload, seal_envelope, EnvelopeView, RequestMeta};
use sdk_orb::keys::{NodePublicKeys, NodeSecretKey, OrbSigningKey};
use sdk_orb::shamir::{share_eye, EyeShares};
use sdk_orb::{template, PartyId, RequestId, RequestType};

fn bench(c: &mut Criterion) {
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let nodes: [NodeSecretKey; 3] = core::array::from_fn(|_| NodeSecretKey::generate(&mut rng));
    let public = NodePublicKeys(core::array::from_fn(|i| nodes[i].public_key()));
    let orb = OrbSigningKey::generate(&mut rng);
    let left = template::random(&mut rng, 0.15);
    let right = template::random(&mut rng, 0.15);
    let meta = RequestMeta {
        request_id: RequestId([1; 16]),
        request_type: RequestType::Uniqueness,
        timestamp_ms: 1_790_000_000_000,
        serial_id: 0,
        or_policy: false,
    };
    let mut out = vec![0u8; envelope_len(&meta)];

    let mut group = c.benchmark_group("person");
    group.throughput(Throughput::Elements(1));
    group.bench_function("share_and_seal", |b| {
        b.iter(|| {
            seal_envelope(&mut rng, &meta, &left, &right, &public, &orb, &mut out).expect("seals")
        })
    });
    let mut shares = Box::new([EyeShares::zero(), EyeShares::zero(), EyeShares::zero()]);
    group.bench_function("share_only", |b| {
        b.iter(|| {
            share_eye(&mut rng, &left, &mut shares);
            share_eye(&mut rng, &right, &mut shares);
        })
    });
    let view_bytes = out.clone();
    group.bench_function("verify_and_open_one_party", |b| {
        b.iter(|| {
            let view = EnvelopeView::parse(&view_bytes).expect("parses");
            view.verify_signature().expect("verifies");
            open_payload(&view, PartyId::ALL[1], &nodes[1]).expect("opens")
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! The database passes' dot products by engine call (`Backend::dot_db_prepared`), one
//! thread, with each supported kernel: a batch of 64 requests with their mirrored queries
//! (128 prepared queries) against 2,048 enrolled people, in calls of 132 rows (one pass at
//! the default `max_pass_comparisons`), 528 (the pipeline's span of four such passes) and
//! 2,048. What `pipeline::DOT_SPAN_ROWS` was chosen from.
//!
//! `cargo bench -p ocelli-mpc --bench dot_span`. Throughput is in comparisons (query
//! rotations times rows) of one eye, code and mask.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ocelli_cpu::{CpuEngine, Kernel};
use ocelli_mpc::scratch::ScratchPool;
use ocelli_mpc::{synthetic, Backend, Eye, MatchDb, Part};
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use sdk_orb::rotation::ROTATION_COUNT;

const QUERIES: usize = 128;
const ENROLLED: usize = 2048;

fn bench(c: &mut Criterion) {
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let mut db = MatchDb::new().with_storage_advice(ocelli_os::advise_huge_pages::<u16>);
    for serial in 1..=ENROLLED as u64 {
        db.push(serial, &synthetic::random_shares(&mut rng));
    }
    let rows = QUERIES * ROTATION_COUNT;
    let mut out = vec![0u16; rows * ENROLLED];
    let mut group = c.benchmark_group("dot_span");
    group.sample_size(10);
    group.throughput(Throughput::Elements((rows * ENROLLED) as u64));
    for kernel in Kernel::all_supported() {
        if kernel == Kernel::Scalar {
            continue;
        }
        let engine = CpuEngine::with(kernel, 1).expect("one thread starts");
        let prepared = [Part::Code, Part::Mask].map(|part| {
            let mut queries = ScratchPool::default().zeroed(QUERIES * part.coefs());
            queries.iter_mut().for_each(|v| *v = rng.next_u32() as u16);
            (part, engine.prepare_rotations(queries, part.coefs()))
        });
        for per_call in [132, 528, ENROLLED] {
            group.bench_function(BenchmarkId::new(kernel.name(), per_call), |b| {
                b.iter(|| {
                    for start in (0..ENROLLED).step_by(per_call) {
                        let span = start..(start + per_call).min(ENROLLED);
                        let out = &mut out[..rows * span.len()];
                        for (part, queries) in &prepared {
                            engine.dot_db_prepared(
                                queries,
                                &db,
                                Eye::Left,
                                *part,
                                span.clone(),
                                out,
                            );
                        }
                    }
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

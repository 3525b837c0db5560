//! Laying out a batch's queries for the database passes (`Backend::prepare_rotations`),
//! one thread, with each supported kernel: the fixed cost per query that small passes
//! (few database rows per pass, as in a node's early batches) pay in full.
//!
//! `cargo bench -p ocelli-mpc --bench prepare`. A base is one query vector (an eye's code or
//! mask); a batch of 64 requests with mirror detection is 256 of each.

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use ocelli_cpu::{CpuEngine, Kernel};
use ocelli_mpc::scratch::ScratchPool;
use ocelli_mpc::Backend;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use sdk_orb::{CODE_COEFS, MASK_COEFS};

fn bench(c: &mut Criterion) {
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let mut group = c.benchmark_group("prepare_rotations");
    group.sample_size(20);
    for kernel in Kernel::all_supported() {
        let engine = CpuEngine::with(kernel, 1).expect("one thread starts");
        for bases in [16usize, 256] {
            let queries = [CODE_COEFS, MASK_COEFS].map(|len| {
                let raw: Vec<u16> = (0..bases * len).map(|_| rng.next_u32() as u16).collect();
                (len, raw)
            });
            group.throughput(Throughput::Elements(bases as u64));
            group.bench_with_input(
                BenchmarkId::new(kernel.name(), bases),
                &queries,
                |b, queries| {
                    let pool = ScratchPool::default();
                    // The copies into scratch buffers are set up outside the timing; the
                    // prepared layout is dropped (zeroized) inside it.
                    b.iter_batched(
                        || {
                            queries.clone().map(|(len, raw)| {
                                let mut q = pool.zeroed(raw.len());
                                q.copy_from_slice(&raw);
                                (len, q)
                            })
                        },
                        |scratch| {
                            for (len, q) in scratch {
                                drop(engine.prepare_rotations(q, len));
                            }
                        },
                        BatchSize::PerIteration,
                    )
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

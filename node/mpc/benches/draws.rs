//! Drawing from a pairwise ChaCha12 stream (`randomness::fill_stream`), one thread, with each
//! keystream version this CPU runs: the comparison phase draws tens of megabytes per pass
//! (two bits per AND gate, the split's and the cross term's masks).
//!
//! `cargo bench -p ocelli-mpc --bench draws`. Every version writes the same bytes.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ocelli_mpc::randomness::{fill_stream, Keystream};
use rand_chacha::ChaCha12Rng;
use rand_core::SeedableRng;

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("draws");
    group.sample_size(20);
    // A 16 KB piece (an AND round's zero sharing folds the previous stream in such pieces)
    // and a 1 MiB draw (a pass's masks).
    for bytes in [16 << 10, 1 << 20] {
        group.throughput(Throughput::Bytes(bytes as u64));
        for version in Keystream::supported() {
            let mut rng = ChaCha12Rng::from_seed([7; 32]);
            let mut out = vec![0u8; bytes];
            group.bench_function(BenchmarkId::new(version.name(), bytes), |b| {
                b.iter(|| fill_stream(version, &mut rng, &mut out))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

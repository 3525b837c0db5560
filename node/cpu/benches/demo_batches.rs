//! The demo's enrolment batches in one process: batches of 64 new people, each matched with
//! mirror detection against the database and the batch's earlier requests, the database
//! growing by 64 after each, as `ocelli-node demo` enrols its 2,000 people. The three parties
//! run on threads over the in-memory network, one engine thread each; rates come from the
//! process's CPU time per party-core, as `ocelli-node bench` reports its pipeline. Set against
//! the bench's pipeline (4 queries, 2,048 people, one pass), the difference is what the
//! demo's batch shapes cost before any node work; set against the demo, what the nodes add.
//!
//! `cargo bench -p ocelli-mpc --bench demo_batches` (the fastest kernel; `OCELLI_KERNEL`
//! names another, `OCELLI_BATCHES` the number of batches, 33 by default). Prints each
//! batch, the whole run, and a least-squares line through the batches: CPU seconds per
//! batch plus a rate.

use ocelli_cpu::{CpuEngine, Kernel};
use ocelli_mpc::local::run_three_unrecorded;
use ocelli_mpc::pipeline::{evaluate, PairRules, PipelineConfig, PipelineRequest, Target};
use ocelli_mpc::scratch::ScratchPool;
use ocelli_mpc::{synthetic, MatchDb};
use ocelli_os::{cpu_seconds, tune_malloc};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use sdk_orb::plaintext::DEFAULT_THRESHOLD;
use sdk_orb::rotation::ROTATION_COUNT;

const BATCH: usize = 64;

fn main() {
    tune_malloc();
    let kernel = match std::env::var("OCELLI_KERNEL") {
        Ok(name) => Kernel::by_name(&name).expect("a kernel this CPU runs"),
        Err(_) => Kernel::detect(),
    };
    let batches: usize =
        std::env::var("OCELLI_BATCHES").map_or(33, |n| n.parse().expect("a number of batches"));
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let people: Vec<_> = (0..batches * BATCH)
        .map(|_| {
            let (left, right) = (synthetic::eye(&mut rng), synthetic::eye(&mut rng));
            synthetic::share_person(&mut rng, &left, &right)
        })
        .collect();
    let engines: Vec<CpuEngine> = (0..3)
        .map(|_| CpuEngine::with(kernel, 1).expect("one thread starts"))
        .collect();
    let config = PipelineConfig::with_threshold(DEFAULT_THRESHOLD);
    let scratch: [ScratchPool; 3] = Default::default();
    let mut dbs: Vec<MatchDb> = (0..3)
        .map(|_| MatchDb::new().with_storage_advice(ocelli_os::advise_huge_pages::<u16>))
        .collect();
    println!("kernel {}, {batches} batches of {BATCH}", kernel.name());
    // (comparisons, CPU seconds) per batch.
    let mut runs = Vec::with_capacity(batches);
    for (b, batch) in people.chunks_exact(BATCH).enumerate() {
        let enrolled = dbs[0].len();
        let started = cpu_seconds();
        run_three_unrecorded(b as u64, |s| {
            let party = s.party().index();
            let requests: Vec<PipelineRequest<'_>> = batch
                .iter()
                .map(|person| PipelineRequest {
                    shares: &person[party],
                    target: Target::Database,
                    against_earlier: true,
                    candidate: true,
                    or_policy: false,
                    rules: PairRules {
                        mirror: true,
                        ..PairRules::default()
                    },
                })
                .collect();
            evaluate(
                s,
                &engines[party],
                &dbs[party],
                &requests,
                &config,
                &scratch[party],
            )
            .expect("in-memory network")
        });
        let cpu = cpu_seconds() - started;
        // Each request against every enrolled person, plain and mirrored, and against the
        // batch's earlier requests; 31 rotations of two eyes each, as the nodes count them.
        let pairs = 2 * enrolled * BATCH + BATCH * (BATCH - 1) / 2;
        let comparisons = (pairs * 2 * ROTATION_COUNT) as f64;
        println!(
            "batch {b:>3}: {enrolled:>5} enrolled, {comparisons:>10} comparisons, {cpu:.3} s CPU, \
             {:.2} M/s per party-core",
            3.0 * comparisons / cpu / 1e6
        );
        runs.push((comparisons, cpu));
        for (party, db) in dbs.iter_mut().enumerate() {
            for (k, person) in batch.iter().enumerate() {
                db.push((b * BATCH + k + 1) as u64, &person[party]);
            }
        }
    }
    let comparisons: f64 = runs.iter().map(|r| r.0).sum();
    let cpu: f64 = runs.iter().map(|r| r.1).sum();
    println!(
        "all batches: {comparisons} comparisons, {cpu:.1} s CPU, {:.2} M/s per party-core",
        3.0 * comparisons / cpu / 1e6
    );
    if runs.len() > 1 {
        let n = runs.len() as f64;
        let (mc, ms) = (comparisons / n, cpu / n);
        let slope = runs.iter().map(|&(c, s)| (c - mc) * (s - ms)).sum::<f64>()
            / runs.iter().map(|&(c, _)| (c - mc).powi(2)).sum::<f64>();
        println!(
            "per batch: {:.3} s CPU plus {:.2} M/s per party-core",
            ms - slope * mc,
            3.0 / slope / 1e6
        );
    }
}

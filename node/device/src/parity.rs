//! The device parity suite: the comparison phase's kernels on a [`KernelDevice`] against the
//! host path, bit for bit: the streams, every value and message of the comparison phase, the
//! OR trees and opening, the whole pipeline's results. The host-run kernels pass it in CI
//! (`tests.rs`); a GPU passes it where one is present (`ocelli-gpu`'s tests).

use std::sync::Arc;

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use sdk_orb::plaintext::{threshold_coefficient, DEFAULT_THRESHOLD};

use super::*;
use ocelli_mpc::compare::{compare, or_blocks};
use ocelli_mpc::local::{additive_u16, open_bits, run_three};
use ocelli_mpc::randomness::CorrelatedRandomness;
use ocelli_mpc::share::Replicated;

/// Draws on the device interleave with draws on the host exactly as host draws alone do:
/// runs of every length from every offset within a block, u16 runs of odd length included.
pub fn device_streams_equal_the_host_streams<D: KernelDevice>(dev: Arc<D>) {
    let seeds = ocelli_mpc::local::pair_seeds(9);
    let mut on_host = CorrelatedRandomness::from_seeds(&seeds[0], &seeds[2]);
    let mut mixed = CorrelatedRandomness::from_seeds(&seeds[0], &seeds[2]);
    let mut transports = ocelli_mpc::network::in_memory_network();
    let mut session = Session::new(PartyId::ALL[0], &mut transports[0], &mut mixed);
    let mut circuit = DeviceCircuit::new(&mut session, dev);
    for (step, n) in [0usize, 1, 3, 5, 16, 17, 31, 33, 64, 1000, 7]
        .iter()
        .enumerate()
    {
        let which = if step % 3 == 2 {
            Neighbour::Prev
        } else {
            Neighbour::Next
        };
        let expected = match which {
            Neighbour::Next => on_host.next_u16(*n),
            Neighbour::Prev => on_host.prev_u16(*n),
        };
        let drawn = circuit.draw_u16(which, *n).to_u16();
        assert_eq!(drawn[..*n], expected[..], "u16 run {step} of {n}");
        let expected = on_host.next_bits(*n);
        let drawn = circuit.draw(Neighbour::Next, 2 * n).to_u64();
        assert_eq!(drawn, expected, "u64 run {step} of {n}");
        // A host draw between device draws stays in step.
        let session = &mut *circuit.session;
        assert_eq!(session.randomness().prev_bits(3), on_host.prev_bits(3));
    }
}

/// Genuine `(cd, md)` pairs as additive shares, with the edges of the domain.
fn shared_pairs(rng: &mut ChaCha20Rng, n: usize) -> ([Vec<u16>; 3], [Vec<u16>; 3]) {
    let edges = [
        (0i32, 0u32),
        (1, 1),
        (-1, 1),
        (12_800, 12_800),
        (-12_800, 12_800),
    ];
    let mut cd = Vec::new();
    let mut md = Vec::new();
    for e in 0..n {
        let (c, m) = edges.get(e).copied().unwrap_or_else(|| {
            let m = rng.next_u32() % 12_801;
            let c = (rng.next_u32() % (2 * m + 1)) as i32 - m as i32;
            (c, m)
        });
        cd.push(c as u16);
        md.push(m as u16);
    }
    (additive_u16(rng, &cd), additive_u16(rng, &md))
}

/// Every value of the comparison phase, every message and every round, on the device and
/// on the host, at lengths that are not whole words, and none and one.
pub fn the_comparison_phase_on_the_device_equals_the_host_path<D: KernelDevice>(dev: Arc<D>) {
    let a = threshold_coefficient(DEFAULT_THRESHOLD);
    let mut rng = ChaCha20Rng::seed_from_u64(0xc0);
    for n in [0usize, 1, 5, 63, 64, 65, 130, 1_000] {
        let (cd, md) = shared_pairs(&mut rng, n);
        let seed = 40 + n as u64;
        let on_host = run_three(seed, |s| {
            let i = s.party().index();
            compare(s, &cd[i], &md[i], a).expect("compare")
        });
        let on_device = run_three(seed, |s| {
            let i = s.party().index();
            let c = DeviceCircuit::new(s, dev.clone())
                .compare(&cd[i], &md[i], a)
                .expect("compare");
            (
                c.cd.to_u16(),
                c.md.to_u16(),
                c.cross.to_u16(),
                c.x.to_u32(),
                c.matches.to_replicated(),
            )
        });
        for (party, ((h, h_traffic, h_view), (d, d_traffic, d_view))) in
            on_host.iter().zip(&on_device).enumerate()
        {
            let what = format!("party {party}, {n} comparisons");
            assert_eq!(h.cd, d.0, "{what}: cd part");
            assert_eq!(h.md, d.1, "{what}: md part");
            assert_eq!(h.cross, d.2, "{what}: cross term");
            assert_eq!(h.x, d.3, "{what}: x");
            assert!(h.matches == d.4, "{what}: match bits");
            assert_eq!(h_traffic, d_traffic, "{what}: rounds and bytes");
            assert!(h_view == d_view, "{what}: every received message");
        }
    }
}

/// The OR tree over rotations, an AND, a gather and the opening, on device bits.
pub fn or_trees_and_opening_on_the_device_equal_the_host_path<D: KernelDevice>(dev: Arc<D>) {
    let mut rng = ChaCha20Rng::seed_from_u64(0x0b);
    for (groups, w) in [(31usize, 1usize), (31, 3), (5, 2), (1, 4), (2, 1)] {
        let n = groups * w;
        let comps: [Vec<u64>; 3] =
            core::array::from_fn(|_| (0..n).map(|_| rng.next_u64() & rng.next_u64()).collect());
        let share = |i: usize| Replicated::new(comps[i].clone(), comps[(i + 2) % 3].clone());
        let positions: Vec<Option<usize>> = (0..70)
            .map(|k| (k % 3 != 0).then_some((k * 7) % (64 * w)))
            .collect();
        let mask: Vec<u64> = (0..w).map(|_| rng.next_u64()).collect();
        let on_host = run_three(7, |s| {
            let x = share(s.party().index());
            let ored = or_blocks(s, &x, groups).expect("or");
            let both = Circuit::and(s, &ored, &ored.and_public(&mask)).expect("and");
            let picked = SharedBits::gather(&both, &positions);
            (
                s.open_bits(&ored).expect("open"),
                s.open_bits(&picked).expect("open"),
            )
        });
        let on_device = run_three(7, |s| {
            let x = share(s.party().index());
            let mut c = DeviceCircuit::new(s, dev.clone());
            let x = DeviceBits::new(
                DeviceVec::from_u64(&dev, &x.own),
                DeviceVec::from_u64(&dev, &x.prev),
            );
            let ored = or_blocks(&mut c, &x, groups).expect("or");
            let both = c.and(&ored, &ored.and_public(&mask)).expect("and");
            let picked = both.gather(&positions);
            (c.open(&ored).expect("open"), c.open(&picked).expect("open"))
        });
        for party in 0..3 {
            assert_eq!(on_host[party].0, on_device[party].0, "{groups} x {w}");
            assert!(
                on_host[party].2 == on_device[party].2,
                "{groups} x {w}: messages"
            );
        }
        let opened = open_bits([
            &Replicated::new(comps[0].clone(), comps[2].clone()),
            &Replicated::new(comps[1].clone(), comps[0].clone()),
            &Replicated::new(comps[2].clone(), comps[1].clone()),
        ]);
        let expected: Vec<u64> = (0..w)
            .map(|k| (0..groups).fold(0, |acc, g| acc | opened[g * w + k]))
            .collect();
        assert_eq!(on_device[0].0 .0, expected, "{groups} x {w}: the OR");
    }
}

/// The whole pipeline with its comparison phase on the device opens exactly what it opens on
/// the host, for databases of 37, 6, one and no entries.
pub fn pipeline_results_equal_with_the_comparison_phase_on_the_device<D: KernelDevice>(
    dev: Arc<D>,
) {
    let cpu = ocelli_cpu::CpuEngine::new();
    for enrolled in [37, 6, 1, 0] {
        let on_host = ocelli_cpu::parity::pipeline_outcomes_with(
            [&cpu, &cpu, &cpu],
            enrolled,
            |s, engine, db, requests, config| {
                let scratch = ocelli_mpc::scratch::ScratchPool::default();
                ocelli_mpc::pipeline::evaluate(s, engine, db, requests, config, &scratch)
            },
        );
        let on_device = ocelli_cpu::parity::pipeline_outcomes_with(
            [&cpu, &cpu, &cpu],
            enrolled,
            |s, engine, db, requests, config| {
                let mut circuit = DeviceCircuit::new(s, dev.clone());
                let scratch = ocelli_mpc::scratch::ScratchPool::default();
                ocelli_mpc::pipeline::evaluate(&mut circuit, engine, db, requests, config, &scratch)
            },
        );
        assert_eq!(on_host, on_device, "{enrolled} enrolled");
        if enrolled == 37 {
            assert!(on_device[0].iter().any(|r| r.any), "the batch has matches");
        }
    }
}

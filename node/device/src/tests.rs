//! The kernels' exact sources run on the host ([`HostDevice`]): the device parity suite
//! ([`super::parity`]), and the dot-product shares through the `combine` kernel.

use std::sync::Arc;

use super::host::HostDevice;
use super::parity;
use super::*;
use crate::split::{length_term, ReferenceProducts};
use ocelli_mpc::backend::{RowBackend, RowDot};
use ocelli_mpc::local::{additive_u16, run_three};
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use sdk_orb::plaintext::{threshold_coefficient, DEFAULT_THRESHOLD};

fn host() -> Arc<HostDevice> {
    Arc::new(HostDevice::default())
}

#[test]
fn device_streams_equal_the_host_streams() {
    parity::device_streams_equal_the_host_streams(host());
}

#[test]
fn the_comparison_phase_on_the_device_equals_the_host_path() {
    parity::the_comparison_phase_on_the_device_equals_the_host_path(host());
}

#[test]
fn or_trees_and_opening_on_the_device_equal_the_host_path() {
    parity::or_trees_and_opening_on_the_device_equal_the_host_path(host());
}

#[test]
fn pipeline_results_equal_with_the_comparison_phase_on_the_device() {
    parity::pipeline_results_equal_with_the_comparison_phase_on_the_device(host());
}

/// The GPU engine's arithmetic with its `combine` kernel run on the host: the byte split,
/// the three i8 GEMMs with i32 accumulation (computed here, where cuBLAS runs them on the
/// GPU) in cuBLAS's column-major layout with padded rows, then the kernel.
struct HostCombine(Arc<HostDevice>);

impl RowDot for HostCombine {
    fn name(&self) -> String {
        "combine-on-host".into()
    }

    fn dot(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]) {
        let r = ReferenceProducts::of(queries, db, len);
        let (n, m) = (r.c_query.len(), r.c_db.len());
        // cuBLAS's layout: column-major m_pad x n.
        let m_pad = m.div_ceil(4) * 4;
        let (mut ll, mut cross) = (vec![0u32; m_pad * n], vec![0u32; m_pad * n]);
        for q in 0..n {
            for d in 0..m {
                ll[q * m_pad + d] = r.ll[q * m + d] as u32;
                cross[q * m_pad + d] = r.cross[q * m + d] as u32;
            }
        }
        let dev = &self.0;
        let bufs = (
            DeviceVec::from_u32(dev, &ll),
            DeviceVec::from_u32(dev, &cross),
            DeviceVec::from_u16(dev, &r.c_db),
            DeviceVec::from_u16(dev, &r.c_query),
            DeviceVec::zeroed(dev, 2 * n * m),
        );
        if n * m > 0 {
            let args = [
                bufs.0.arg(),
                bufs.1.arg(),
                bufs.2.arg(),
                bufs.3.arg(),
                bufs.4.arg(),
                Arg::U32(m as u32),
                Arg::U32(m_pad as u32),
                Arg::U32(n as u32),
                Arg::U32(u32::from(length_term(len))),
            ];
            // The GPU engine's grid: blocks of 256 database rows, queries along y (fewer
            // y-blocks than queries here, so the kernel's stride loop runs too).
            let grid = ((m as u32).div_ceil(256), (n as u32).div_ceil(2));
            dev.launch("combine", grid, 256, &args);
        }
        out.copy_from_slice(&bufs.4.to_u16());
    }
}

/// Device memory per pass is bounded as host memory is: the most a party holds at once in the
/// comparison phase and the OR over rotations, per comparison.
#[test]
fn device_memory_per_comparison_is_bounded() {
    let a = threshold_coefficient(DEFAULT_THRESHOLD);
    let n = 31 * 2 * 64 * 25;
    let mut rng = ChaCha20Rng::seed_from_u64(0x3e);
    let md: Vec<u16> = (0..n).map(|_| (rng.next_u32() % 12_801) as u16).collect();
    let cd: Vec<u16> = md.iter().map(|&m| m / 2).collect();
    let (cd, md) = (additive_u16(&mut rng, &cd), additive_u16(&mut rng, &md));
    let devices: [Arc<HostDevice>; 3] = core::array::from_fn(|_| host());
    run_three(3, |s| {
        let i = s.party().index();
        let mut c = DeviceCircuit::new(s, devices[i].clone());
        let bits = c.match_bits(&cd[i], &md[i], a).expect("compare");
        ocelli_mpc::compare::or_blocks(&mut c, &bits, 31).expect("or");
    });
    for (party, dev) in devices.iter().enumerate() {
        let per_comparison = dev.peak_bytes() as f64 / n as f64;
        println!("party {party}: {per_comparison:.1} device bytes per comparison at the peak");
        assert!(per_comparison < 64.0, "party {party}: {per_comparison}");
    }
}

#[test]
fn the_combine_kernel_passes_the_parity_suite() {
    ocelli_cpu::parity::check_engine(&RowBackend(HostCombine(host())));
}

/// Every kernel named in [`KERNEL_NAMES`] is one the host build has.
#[test]
fn the_host_build_has_every_kernel() {
    for name in KERNEL_NAMES {
        assert!(
            KERNELS_CU.contains(&format!("KERNEL {name}(")),
            "{name} in the sources"
        );
    }
    let count = KERNELS_CU.matches("\nKERNEL ").count();
    assert_eq!(count, KERNEL_NAMES.len(), "every kernel is listed");
}

/// The well-formedness check on the device circuit sends what the host path sends and decides
/// the same: honest people pass, a random sharing (no template) fails.
#[test]
fn the_well_formedness_check_on_the_device_equals_the_host_path() {
    use ocelli_mpc::wellformed::well_formed;
    let mut rng = ChaCha20Rng::seed_from_u64(0x3f);
    let mut honest = || {
        let (l, r) = (
            ocelli_mpc::synthetic::eye(&mut rng),
            ocelli_mpc::synthetic::eye(&mut rng),
        );
        ocelli_mpc::synthetic::share_person(&mut rng, &l, &r)
    };
    let (a, b) = (honest(), honest());
    let mut rng = ChaCha20Rng::seed_from_u64(0x40);
    let noise: Vec<sdk_orb::shamir::PartyShares> = (0..3)
        .map(|_| *ocelli_mpc::synthetic::random_shares(&mut rng))
        .collect();
    let people = [&a, &noise, &b];
    let mine = |i: usize| people.map(|p| &p[i]);
    let on_host = run_three(11, |s| {
        well_formed(s, &mine(s.party().index())).expect("in-memory network")
    });
    let devices: [Arc<HostDevice>; 3] = core::array::from_fn(|_| host());
    let on_device = run_three(11, |s| {
        let i = s.party().index();
        let mut c = DeviceCircuit::new(s, devices[i].clone());
        well_formed(&mut c, &mine(i)).expect("in-memory network")
    });
    for ((host, host_traffic, _), (device, device_traffic, _)) in on_host.iter().zip(&on_device) {
        assert_eq!(host, &vec![true, false, true]);
        assert_eq!(device, host);
        assert_eq!(device_traffic, host_traffic, "the same rounds and bytes");
    }
}

//! The kernels' exact sources run on the host ([`HostDevice`]): the device parity suite
//! ([`super::parity`]), and the dot-product shares through the `combine` kernel.

use std::sync::Arc;

use super::host::HostDevice;
use super::parity;
use super::*;
use crate::dot::DotEngine;
use crate::engine::split::{length_term, ReferenceProducts};

fn host() -> Arc<HostDevice> {
    Arc::new(HostDevice)
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

impl DotEngine for HostCombine {
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

#[test]
fn the_combine_kernel_passes_the_parity_suite() {
    crate::engine::parity::check_engine(&HostCombine(host()));
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

//! The kernels' exact sources run on the host ([`HostDevice`]): the device parity suite
//! ([`super::parity`]), and the dot-product shares through the `combine` kernel.

use std::sync::Arc;

use super::host::HostDevice;
use super::parity;
use super::*;
use crate::dot::DotEngine;
use crate::engine::split::{length_term, split_bytes};

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
        let split = |v: &[u16]| {
            v.chunks_exact(len)
                .map(|row| {
                    let (mut lo, mut hi) = (vec![0i8; len], vec![0i8; len]);
                    let c = split_bytes(row, &mut lo, &mut hi);
                    (lo, hi, c)
                })
                .collect::<Vec<_>>()
        };
        let (q, d) = (split(queries), split(db));
        let (n, m) = (q.len(), d.len());
        let m_pad = m.div_ceil(4) * 4;
        let i8_dot = |a: &[i8], b: &[i8]| -> i32 {
            a.iter()
                .zip(b)
                .map(|(&x, &y)| i32::from(x) * i32::from(y))
                .sum()
        };
        let (mut ll, mut cross) = (vec![0u32; m_pad * n], vec![0u32; m_pad * n]);
        for (qi, (q_lo, q_hi, _)) in q.iter().enumerate() {
            for (di, (d_lo, d_hi, _)) in d.iter().enumerate() {
                ll[qi * m_pad + di] = i8_dot(d_lo, q_lo) as u32;
                cross[qi * m_pad + di] = i8_dot(d_lo, q_hi).wrapping_add(i8_dot(d_hi, q_lo)) as u32;
            }
        }
        let dev = &self.0;
        let c_db: Vec<u16> = d.iter().map(|r| r.2).collect();
        let c_q: Vec<u16> = q.iter().map(|r| r.2).collect();
        let bufs = (
            DeviceVec::from_u32(dev, &ll),
            DeviceVec::from_u32(dev, &cross),
            DeviceVec::from_u16(dev, &c_db),
            DeviceVec::from_u16(dev, &c_q),
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

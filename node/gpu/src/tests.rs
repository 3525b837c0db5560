use ocelli_mpc::synthetic::random_shares;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};

use super::blas::{compile_kernels, COMBINE_KERNEL};
use super::*;
use cudarc::nvrtc::CompileError;
use ocelli_cpu::CpuEngine;

/// The engine, or `None` after printing why GPU tests skip here.
fn engine_or_skip(test: &str) -> Option<GpuEngine> {
    match GpuEngine::new(0) {
        Ok(e) => Some(e),
        Err(e) => {
            println!("{test}: SKIPPED, no usable GPU: {e}");
            None
        }
    }
}

/// The kernel sources compile as each device compiles them at start, and for the
/// architectures the engine is run on (A100, H100 and H200), with every entry point the
/// device loads. NVRTC needs no driver or device, so this runs wherever libnvrtc loads: CI
/// installs it from the `nvidia-cuda-nvrtc-cu12` wheel.
#[test]
fn kernels_compile_with_nvrtc() {
    // SAFETY: this only tries to open the shared library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("kernels_compile_with_nvrtc: SKIPPED, {}", GpuError::NoNvrtc);
        return;
    }
    for arch in [None, Some("compute_80"), Some("compute_90")] {
        let ptx = compile_kernels(arch)
            .unwrap_or_else(|e| panic!("{arch:?}: {e:?}"))
            .to_src();
        for name in ocelli_device::KERNEL_NAMES.iter().chain([&COMBINE_KERNEL]) {
            assert!(
                ptx.contains(&format!(".entry {name}(")),
                "{arch:?}: no {name} entry point in\n{ptx}"
            );
        }
        println!(
            "kernels_compile_with_nvrtc: {}, {} bytes of PTX",
            arch.unwrap_or("NVRTC's default architecture"),
            ptx.len()
        );
    }
}

/// The kernels assembled for sm_90 (H100, H200) by ptxas inside NVRTC, with a register spill
/// an error: a kernel that spills to local memory runs at a fraction of its speed, and a
/// change that makes one spill should fail here rather than on a device. A register cap low
/// enough to force spills must fail the same check, or the check checks nothing.
#[test]
fn kernels_assemble_for_sm_90_without_register_spills() {
    // SAFETY: this only tries to open the shared library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!(
            "kernels_assemble_for_sm_90_without_register_spills: SKIPPED, {}",
            GpuError::NoNvrtc
        );
        return;
    }
    let assemble = |maxrregcount: Option<usize>| {
        let opts = cudarc::nvrtc::CompileOptions {
            arch: Some("sm_90"),
            maxrregcount,
            options: vec![
                "--ptxas-options=--warn-on-spills".into(),
                "--ptxas-options=--warning-as-error".into(),
            ],
            ..Default::default()
        };
        match cudarc::nvrtc::compile_ptx_with_opts(ocelli_device::KERNELS_CU, opts) {
            // For a real architecture NVRTC keeps the assembled binary, not the PTX: asking
            // for PTX afterwards is the only error a clean assembly gives.
            Ok(_) | Err(CompileError::GetPtxError(_)) => Ok(()),
            Err(CompileError::CompileError { log, .. }) => Err(log.to_string_lossy().into_owned()),
            Err(e) => panic!("NVRTC: {e:?}"),
        }
    };
    if let Err(log) = assemble(None) {
        panic!("a kernel spills registers on sm_90:\n{log}");
    }
    let forced = assemble(Some(24)).expect_err("24 registers (sm_90's least) force a spill");
    assert!(forced.contains("spill"), "{forced}");
}

#[test]
fn gpu_engine_passes_the_parity_suite() {
    let Some(gpu) = engine_or_skip("gpu_engine_passes_the_parity_suite") else {
        return;
    };
    println!("{}", gpu.name());
    ocelli_cpu::parity::check_engine(&gpu);

    // Queries another engine made resident are read from their rows, not its devices.
    let other = GpuEngine::new(0).expect("device 0");
    let mut rng = ChaCha20Rng::seed_from_u64(0x6e1);
    let mut db = MatchDb::new();
    for serial in 1..=9u64 {
        db.push(serial, &random_shares(&mut rng));
    }
    let len = Part::Mask.coefs();
    let mut rows = ocelli_mpc::scratch::ScratchPool::default().zeroed(5 * len);
    rows.iter_mut().for_each(|c| *c = rng.next_u32() as u16);
    let mut expected = vec![0u16; 5 * 9];
    CpuEngine::new().dot_db(&rows, &db, Eye::Right, Part::Mask, 0..9, &mut expected);
    let prepared = other.prepare_queries(rows, len);
    for engine in [&gpu, &other] {
        let mut out = vec![0xA5A5u16; 5 * 9];
        engine.dot_db_prepared(&prepared, &db, Eye::Right, Part::Mask, 0..9, &mut out);
        assert!(out == expected, "{}", engine.name());
    }
}

/// The resident database equals the CPU engine's view of the host database, bit for bit,
/// through appends, out-of-order inserts, replacements and deletions, at sizes that are
/// not multiples of the padding, the load chunk or the move chunk; on one shard and on
/// three.
#[test]
fn resident_database_matches_the_cpu_engine_through_changes() {
    let Some(one) = engine_or_skip("resident_database_matches_the_cpu_engine") else {
        return;
    };
    // Three shards on one device exercise the multi-GPU path on a single GPU.
    let sharded = GpuEngine::with_devices(&[0, 0, 0]).expect("device 0");
    for gpu in [one, sharded] {
        println!("{}", gpu.name());
        resident_database_matches(&gpu);
    }
}

fn resident_database_matches(gpu: &GpuEngine) {
    let cpu = CpuEngine::new();
    let mut rng = ChaCha20Rng::seed_from_u64(0x6e0);
    let mut db = MatchDb::new();
    let queries: Vec<Vec<u16>> = [Part::Code, Part::Mask]
        .iter()
        .map(|p| (0..7 * p.coefs()).map(|_| rng.next_u32() as u16).collect())
        .collect();
    let check = |db: &MatchDb, what: &str| {
        for eye in Eye::BOTH {
            for (part, q) in [Part::Code, Part::Mask].into_iter().zip(&queries) {
                for rows in [0..db.len(), db.len() / 3..db.len(), 0..db.len().min(1)] {
                    let n = q.len() / part.coefs() * rows.len();
                    let (mut g, mut c) = (vec![0xA5A5u16; n], vec![0u16; n]);
                    gpu.dot_db(q, db, eye, part, rows.clone(), &mut g);
                    cpu.dot_db(q, db, eye, part, rows.clone(), &mut c);
                    assert!(g == c, "{what}: {eye:?} {part:?} rows {rows:?}");
                    // The same queries resident on every shard's device.
                    let mut copy = ocelli_mpc::scratch::ScratchPool::default().zeroed(q.len());
                    copy.copy_from_slice(q);
                    let prepared = gpu.prepare_queries(copy, part.coefs());
                    g.fill(0xA5A5);
                    gpu.dot_db_prepared(&prepared, db, eye, part, rows.clone(), &mut g);
                    assert!(g == c, "{what}: resident, {eye:?} {part:?} rows {rows:?}");
                }
            }
        }
    };
    check(&db, "empty");
    for serial in 1..=1_100u64 {
        db.push(serial * 10, &random_shares(&mut rng));
    }
    check(&db, "loaded");
    for k in 0..40u64 {
        db.insert(k * 271 + 5, &random_shares(&mut rng));
        let row = (rng.next_u32() as usize) % db.len();
        db.replace(row, &random_shares(&mut rng));
        let row = (rng.next_u32() as usize) % db.len();
        db.remove(row);
    }
    check(&db, "after changes");
    while db.len() > 1 {
        db.remove(0);
    }
    check(&db, "one entry");
    db.remove(0);
    check(&db, "emptied");
}

/// Three parties' pipelines on GPU engines open exactly what they open on CPU engines:
/// database passes, intra-batch pairs, single-entry targets, both eye policies.
#[test]
fn pipeline_results_equal_on_gpu_and_cpu() {
    let Some(first) = engine_or_skip("pipeline_results_equal_on_gpu_and_cpu") else {
        return;
    };
    let gpus = [
        first,
        GpuEngine::new(0).expect("device 0"),
        GpuEngine::new(0).expect("device 0"),
    ];
    let cpu = CpuEngine::new();
    let on_gpu = ocelli_cpu::parity::pipeline_outcomes([&gpus[0], &gpus[1], &gpus[2]]);
    let on_cpu = ocelli_cpu::parity::pipeline_outcomes([&cpu, &cpu, &cpu]);
    assert_eq!(on_gpu, on_cpu);
}

/// The device parity suite (the comparison phase's kernels against the host path) on the
/// GPU: the same checks the host-run kernels pass in CI.
#[test]
fn the_comparison_phase_on_the_gpu_passes_the_device_parity_suite() {
    let Some(gpu) =
        engine_or_skip("the_comparison_phase_on_the_gpu_passes_the_device_parity_suite")
    else {
        return;
    };
    use ocelli_device::parity;
    parity::device_streams_equal_the_host_streams(gpu.kernels());
    parity::the_comparison_phase_on_the_device_equals_the_host_path(gpu.kernels());
    parity::or_trees_and_opening_on_the_device_equal_the_host_path(gpu.kernels());
    parity::pipeline_results_equal_with_the_comparison_phase_on_the_device(gpu.kernels());
}

/// A GEMM or grid size past 32 bits is an error, not a wrapped count.
#[test]
fn sizes_past_32_bits_are_refused() {
    assert_eq!(GpuError::fits_i32("GEMM rows", 12_800).ok(), Some(12_800));
    let err = GpuError::fits_i32("GEMM rows", 1 << 31).expect_err("2^31 is no C int");
    assert_eq!(
        err.to_string(),
        "GEMM rows of 2147483648 exceeds the device's 32-bit limit"
    );
    assert!(GpuError::fits_u32("product rows", u32::MAX as usize).is_ok());
    assert!(GpuError::fits_u32("product rows", u32::MAX as usize + 1).is_err());
}

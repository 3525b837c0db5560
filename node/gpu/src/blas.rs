//! The cuBLAS int8 GEMM and the NVRTC-compiled `combine` kernel.

use std::ffi::c_void;

use cudarc::cublas::result::gemm_ex;
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::cublas::CudaBlas;
use cudarc::nvrtc::CompileError;

use super::error::GpuError;
use ocelli_device::KERNELS_CU;

/// `C = A^T B + beta C` in column-major storage: `A` is `k x m` (one database vector per
/// column), op T makes it `m x k`; `B` is `k x n` (one query per column); `C` is `m x n`, i32.
pub(super) fn int8_gemm(
    blas: &CudaBlas,
    (m, n, k): (usize, usize, usize),
    (a, b, c): (u64, u64, u64),
    beta: i32,
) -> Result<(), GpuError> {
    let alpha = 1i32;
    // cuBLAS takes its sizes as C ints; a size past that is refused, never wrapped.
    let (m, n, k) = (
        GpuError::fits_i32("GEMM rows", m)?,
        GpuError::fits_i32("GEMM columns", n)?,
        GpuError::fits_i32("GEMM depth", k)?,
    );
    // SAFETY: callers pass live device allocations of at least these sizes on the handle's
    // stream; alpha and beta are host i32 scalars, as CUBLAS_COMPUTE_32I requires in the
    // default pointer mode.
    unsafe {
        gemm_ex(
            *blas.handle(),
            cublasOperation_t::CUBLAS_OP_T,
            cublasOperation_t::CUBLAS_OP_N,
            m,
            n,
            k,
            (&alpha as *const i32).cast::<c_void>(),
            a as *const c_void,
            cudaDataType::CUDA_R_8I,
            k,
            b as *const c_void,
            cudaDataType::CUDA_R_8I,
            k,
            (&beta as *const i32).cast::<c_void>(),
            c as *mut c_void,
            cudaDataType::CUDA_R_32I,
            m,
            cublasComputeType_t::CUBLAS_COMPUTE_32I,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }?;
    Ok(())
}

/// The entry point in [`KERNELS_CU`] that [`Device`] loads.
pub(super) const COMBINE_KERNEL: &str = "combine";

/// [`KERNELS_CU`] as PTX: for NVRTC's default virtual architecture, as each device compiles
/// it at start, or for `arch`.
pub(super) fn compile_kernels(
    arch: Option<&'static str>,
) -> Result<cudarc::nvrtc::Ptx, CompileError> {
    let opts = cudarc::nvrtc::CompileOptions {
        arch,
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(KERNELS_CU, opts)
}

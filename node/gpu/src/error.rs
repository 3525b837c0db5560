//! Why the GPU engine cannot run.

use cudarc::cublas::result::CublasError;
use cudarc::driver::DriverError;
use cudarc::nvrtc::CompileError;

/// Why the GPU engine cannot run.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No CUDA driver library.
    #[error("no CUDA driver library (libcuda.so) could be loaded: no NVIDIA driver here")]
    NoDriver,
    /// No NVRTC library.
    #[error(
        "no NVRTC library (libnvrtc.so or libnvrtc.so.12 on the loader path; for CUDA 13, a link \
         named libnvrtc.so to libnvrtc.so.13)"
    )]
    NoNvrtc,
    /// No cuBLAS library.
    #[error(
        "no cuBLAS library (libcublas.so or libcublas.so.12 on the loader path; for CUDA 13, a \
         link named libcublas.so to libcublas.so.13)"
    )]
    NoCublas,
    /// The driver sees no such device.
    #[error("no CUDA device {ordinal} ({count} present)")]
    NoDevice {
        /// The device asked for.
        ordinal: usize,
        /// Devices present.
        count: i32,
    },
    /// A driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(#[from] DriverError),
    /// A cuBLAS call failed.
    #[error("cuBLAS: {0}")]
    Blas(#[from] CublasError),
    /// A size past what the device API takes (a 32-bit count).
    #[error("{what} of {value} exceeds the device's 32-bit limit")]
    TooLarge {
        /// Which size.
        what: &'static str,
        /// Its value.
        value: usize,
    },
    /// The kernels did not compile.
    #[error("NVRTC: {0}")]
    Compile(#[from] CompileError),
}

impl GpuError {
    /// `value` as a C int, or [`GpuError::TooLarge`].
    pub(super) fn fits_i32(what: &'static str, value: usize) -> Result<i32, GpuError> {
        i32::try_from(value).map_err(|_| GpuError::TooLarge { what, value })
    }

    /// `value` as a u32, or [`GpuError::TooLarge`].
    pub(super) fn fits_u32(what: &'static str, value: usize) -> Result<u32, GpuError> {
        u32::try_from(value).map_err(|_| GpuError::TooLarge { what, value })
    }
}

//! Device buffers: split share planes, their uploads and moves, and the scratch space a
//! product reuses.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, DriverError, ValidAsZeroBits};
use zeroize::Zeroize;

use ocelli_device::split::split_bytes;

/// GEMM dimensions are padded to this: cuBLAS's int8 tensor-core kernels want multiples of 4.
pub(super) const PAD: usize = 4;
/// Rows moved per copy when a deletion or an out-of-order insertion shifts the database.
pub(super) const MOVE_CHUNK: usize = 1024;
/// Rows split on the host and uploaded per copy when loading.
pub(super) const LOAD_CHUNK: usize = 1024;

pub(super) fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Reallocates `buf` (contents lost) when it holds fewer than `n` elements. Every buffer here
/// holds shares or products of shares: the old one is zeroed before it is freed.
pub(super) fn ensure<T: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    buf: &mut CudaSlice<T>,
    n: usize,
) -> Result<(), DriverError> {
    if buf.len() < n {
        stream.memset_zeros(buf)?;
        *buf = stream.alloc_zeros(round_up(n, 1 << 20))?;
    }
    Ok(())
}

/// Host-side split of `rows` vectors of `len`, ready to upload.
pub(super) struct Split {
    pub(super) lo: Vec<i8>,
    pub(super) hi: Vec<i8>,
    pub(super) corrections: Vec<u16>,
}

impl Split {
    pub(super) fn of(vectors: &[u16], len: usize) -> Split {
        let n = vectors.len();
        let mut s = Split {
            lo: vec![0; n],
            hi: vec![0; n],
            corrections: Vec::with_capacity(n / len),
        };
        for ((v, lo), hi) in vectors
            .chunks_exact(len)
            .zip(s.lo.chunks_exact_mut(len))
            .zip(s.hi.chunks_exact_mut(len))
        {
            s.corrections.push(split_bytes(v, lo, hi));
        }
        s
    }
}

impl Drop for Split {
    fn drop(&mut self) {
        self.lo.zeroize();
        self.hi.zeroize();
    }
}

/// Split vectors of one length on the device, `rows` of them in use and room for more.
pub(super) struct Plane {
    pub(super) len: usize,
    pub(super) lo: CudaSlice<i8>,
    pub(super) hi: CudaSlice<i8>,
    pub(super) corrections: CudaSlice<u16>,
}

impl Plane {
    pub(super) fn new(
        stream: &Arc<CudaStream>,
        len: usize,
        capacity: usize,
    ) -> Result<Plane, DriverError> {
        Ok(Plane {
            len,
            lo: stream.alloc_zeros(capacity * len)?,
            hi: stream.alloc_zeros(capacity * len)?,
            corrections: stream.alloc_zeros(capacity)?,
        })
    }

    /// Rows of the current length that fit.
    pub(super) fn capacity(&self) -> usize {
        self.corrections.len().min(self.lo.len() / self.len)
    }

    /// Uploads `split` as rows `row..`.
    pub(super) fn upload(
        &mut self,
        stream: &Arc<CudaStream>,
        row: usize,
        split: &Split,
    ) -> Result<(), DriverError> {
        let n = split.corrections.len();
        let at = row * self.len..(row + n) * self.len;
        stream.memcpy_htod(&split.lo, &mut self.lo.slice_mut(at.clone()))?;
        stream.memcpy_htod(&split.hi, &mut self.hi.slice_mut(at))?;
        stream.memcpy_htod(
            &split.corrections,
            &mut self.corrections.slice_mut(row..row + n),
        )
    }

    /// Zeroes the whole allocation.
    pub(super) fn wipe(&mut self, stream: &Arc<CudaStream>) -> Result<(), DriverError> {
        stream.memset_zeros(&mut self.lo)?;
        stream.memset_zeros(&mut self.hi)?;
        stream.memset_zeros(&mut self.corrections)
    }

    pub(super) fn zero_rows(
        &mut self,
        stream: &Arc<CudaStream>,
        rows: core::ops::Range<usize>,
    ) -> Result<(), DriverError> {
        let at = rows.start * self.len..rows.end * self.len;
        stream.memset_zeros(&mut self.lo.slice_mut(at.clone()))?;
        stream.memset_zeros(&mut self.hi.slice_mut(at))?;
        stream.memset_zeros(&mut self.corrections.slice_mut(rows))
    }
}

/// Moves rows `from..from + count` of `buf` (rows of `row_len`) to start at row `to`, through
/// `temp`: device-to-device copies must not overlap.
pub(super) fn move_rows<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    buf: &mut CudaSlice<T>,
    temp: &mut CudaSlice<T>,
    row_len: usize,
    (from, to, count): (usize, usize, usize),
) -> Result<(), DriverError> {
    let chunk = (temp.len() / row_len).max(1);
    let starts: Vec<usize> = (0..count).step_by(chunk).collect();
    // Moving down, copy the last chunk first; moving up, the first: never read a row already
    // overwritten.
    let order: Box<dyn Iterator<Item = &usize>> = if to > from {
        Box::new(starts.iter().rev())
    } else {
        Box::new(starts.iter())
    };
    for &s in order {
        let n = chunk.min(count - s);
        let src = (from + s) * row_len..(from + s + n) * row_len;
        let dst = (to + s) * row_len..(to + s + n) * row_len;
        stream.memcpy_dtod(&buf.slice(src), &mut temp.slice_mut(0..n * row_len))?;
        stream.memcpy_dtod(&temp.slice(0..n * row_len), &mut buf.slice_mut(dst))?;
    }
    Ok(())
}

/// Query vectors split and uploaded once for many products ([`ocelli_mpc::Backend::prepare_queries`]):
/// one plane per device of the engine `engine`, in its device order, padded to whole [`PAD`]
/// rows. Wiped when dropped: they are shares.
pub(super) struct ResidentQueries {
    pub(super) engine: u64,
    pub(super) planes: Vec<(Arc<CudaStream>, Plane)>,
}

impl Drop for ResidentQueries {
    fn drop(&mut self) {
        // Best effort, as for the database.
        for (stream, plane) in &mut self.planes {
            let _ = plane.wipe(stream);
        }
    }
}

/// GEMM outputs and the combined result.
pub(super) struct Outputs {
    pub(super) ll: CudaSlice<i32>,
    pub(super) cross: CudaSlice<i32>,
    pub(super) out: CudaSlice<u16>,
}

/// Device buffers reused across calls; grown on demand.
pub(super) struct Scratch {
    /// Queries, padded to whole [`PAD`] rows.
    pub(super) q: Plane,
    /// Database vectors passed from the host ([`Backend::dot`]), padded likewise.
    pub(super) d: Plane,
    pub(super) outputs: Outputs,
}

impl Scratch {
    pub(super) fn new(stream: &Arc<CudaStream>) -> Result<Scratch, DriverError> {
        Ok(Scratch {
            q: Plane::new(stream, 64, 1)?,
            d: Plane::new(stream, 64, 1)?,
            outputs: Outputs {
                ll: stream.alloc_zeros(1)?,
                cross: stream.alloc_zeros(1)?,
                out: stream.alloc_zeros(1)?,
            },
        })
    }
}

/// Uploads `vectors` into `plane` as `rows_pad` rows of `len`, the padding zero.
pub(super) fn stage(
    stream: &Arc<CudaStream>,
    plane: &mut Plane,
    vectors: &[u16],
    len: usize,
    rows_pad: usize,
) -> Result<(), DriverError> {
    plane.len = len;
    if plane.capacity() < rows_pad {
        plane.wipe(stream)?;
        *plane = Plane::new(stream, len, round_up(rows_pad, 256))?;
    }
    let rows = vectors.len() / len;
    plane.upload(stream, 0, &Split::of(vectors, len))?;
    if rows_pad > rows {
        plane.zero_rows(stream, rows..rows_pad)?;
    }
    Ok(())
}

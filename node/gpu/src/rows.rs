//! The resident database on one device: one split plane per eye and part, kept equal to the
//! [`MatchDb`] by the mirror.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DriverError};

use super::buffers::*;
use crate::mirror::RowStore;
use ocelli_mpc::db::{Eye, MatchDb, Part};

/// One party's enrolled database on the device: code and trimmed-mask planes of both eyes,
/// rows in the [`MatchDb`]'s order, with `PAD` spare rows so padded GEMMs stay in bounds.
pub(super) struct DeviceDb {
    pub(super) stream: Arc<CudaStream>,
    /// `[eye * 2 + (0 code | 1 mask)]`.
    pub(super) planes: [Plane; 4],
    pub(super) rows: usize,
    temp_i8: CudaSlice<i8>,
    temp_u16: CudaSlice<u16>,
}

pub(super) fn plane_index(eye: Eye, part: Part) -> usize {
    eye.index() * 2 + usize::from(part == Part::Mask)
}

impl DeviceDb {
    pub(super) fn new(stream: Arc<CudaStream>) -> Result<DeviceDb, DriverError> {
        let capacity = LOAD_CHUNK + PAD;
        let plane = |part: Part| Plane::new(&stream, part.coefs(), capacity);
        let planes = [
            plane(Part::Code)?,
            plane(Part::Mask)?,
            plane(Part::Code)?,
            plane(Part::Mask)?,
        ];
        Ok(DeviceDb {
            temp_i8: stream.alloc_zeros(MOVE_CHUNK * Part::Code.coefs())?,
            temp_u16: stream.alloc_zeros(MOVE_CHUNK)?,
            planes,
            rows: 0,
            stream,
        })
    }

    /// Makes room for `rows` rows (plus padding), keeping the rows in use.
    pub(super) fn reserve(&mut self, rows: usize) -> Result<(), DriverError> {
        let needed = rows + PAD;
        if self.planes[0].capacity() >= needed {
            return Ok(());
        }
        let capacity = needed.max(self.planes[0].capacity() * 2);
        for plane in &mut self.planes {
            let mut grown = Plane::new(&self.stream, plane.len, capacity)?;
            let used = self.rows * plane.len;
            self.stream
                .memcpy_dtod(&plane.lo.slice(0..used), &mut grown.lo.slice_mut(0..used))?;
            self.stream
                .memcpy_dtod(&plane.hi.slice(0..used), &mut grown.hi.slice_mut(0..used))?;
            self.stream.memcpy_dtod(
                &plane.corrections.slice(0..self.rows),
                &mut grown.corrections.slice_mut(0..self.rows),
            )?;
            // The old allocation is freed on drop; zero it first, shares must not linger.
            plane.wipe(&self.stream)?;
            *plane = grown;
        }
        Ok(())
    }

    /// Moves rows `from..self.rows` to start at `to`.
    pub(super) fn shift(&mut self, from: usize, to: usize) -> Result<(), DriverError> {
        let count = self.rows - from;
        for plane in &mut self.planes {
            let moved = (from, to, count);
            for bytes in [&mut plane.lo, &mut plane.hi] {
                move_rows(&self.stream, bytes, &mut self.temp_i8, plane.len, moved)?;
            }
            move_rows(
                &self.stream,
                &mut plane.corrections,
                &mut self.temp_u16,
                1,
                moved,
            )?;
        }
        Ok(())
    }
}

impl Drop for DeviceDb {
    fn drop(&mut self) {
        // Best effort: a failing device cannot be zeroed, and its memory goes with it.
        for plane in &mut self.planes {
            let _ = plane.wipe(&self.stream);
        }
        let _ = self.stream.synchronize();
    }
}

impl RowStore for DeviceDb {
    type Error = DriverError;

    fn load(&mut self, db: &MatchDb, rows: core::ops::Range<usize>) -> Result<(), DriverError> {
        if self.rows > 0 {
            for plane in &mut self.planes {
                plane.zero_rows(&self.stream, 0..self.rows)?;
            }
        }
        self.rows = 0;
        self.reserve(rows.len())?;
        for start in rows.clone().step_by(LOAD_CHUNK) {
            let end = (start + LOAD_CHUNK).min(rows.end);
            for eye in Eye::BOTH {
                for part in [Part::Code, Part::Mask] {
                    let split = Split::of(db.vectors(eye, part, start..end), part.coefs());
                    let plane = &mut self.planes[plane_index(eye, part)];
                    plane.upload(&self.stream, start - rows.start, &split)?;
                }
            }
        }
        self.rows = rows.len();
        self.stream.synchronize()
    }

    fn rows(&self) -> usize {
        self.rows
    }

    fn insert_gap(&mut self, row: usize) -> Result<(), DriverError> {
        self.reserve(self.rows + 1)?;
        self.shift(row, row + 1)?;
        self.rows += 1;
        Ok(())
    }

    fn remove(&mut self, row: usize) -> Result<(), DriverError> {
        self.shift(row + 1, row)?;
        self.rows -= 1;
        let last = self.rows;
        for plane in &mut self.planes {
            plane.zero_rows(&self.stream, last..last + 1)?;
        }
        Ok(())
    }

    fn write(&mut self, row: usize, db: &MatchDb, from: Option<usize>) -> Result<(), DriverError> {
        for eye in Eye::BOTH {
            for part in [Part::Code, Part::Mask] {
                let plane = &mut self.planes[plane_index(eye, part)];
                match from {
                    Some(f) => {
                        let split = Split::of(db.vectors(eye, part, f..f + 1), part.coefs());
                        plane.upload(&self.stream, row, &split)?;
                    }
                    None => plane.zero_rows(&self.stream, row..row + 1)?,
                }
            }
        }
        // The host split buffers are dropped (and zeroed) on return: finish the copies first.
        self.stream.synchronize()
    }
}

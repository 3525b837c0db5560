//! The GPU backend: u16 dot products mod 2^16 as int8 tensor-core GEMMs through cuBLAS
//! (`cublasGemmEx`, i8 inputs, i32 accumulation), with the enrolled database resident in
//! device memory.
//!
//! Every vector is stored split into shifted low and high bytes with its correction term (see
//! [`ocelli_device::split`]). One product block is three GEMMs, `DB_lo^T Q_lo` into one i32 buffer and
//! `DB_lo^T Q_hi + DB_hi^T Q_lo` into another, then the `combine` kernel (compiled at run time
//! with NVRTC) adds the corrections and writes u16 results in the engine's layout.
//!
//! cudarc loads libcuda, libnvrtc and libcublas when the engine is created, so the node builds
//! and runs without them; [`GpuEngine::new`] says which is missing.

#![deny(missing_docs, clippy::unwrap_used)]
#![allow(unsafe_code)]

mod blas;
mod buffers;
pub mod busy;
pub mod circuit;
mod datasheet;
mod device;
pub mod error;
mod mirror;
mod rows;

pub use busy::BusyClock;
pub use circuit::CudaKernels;
pub use datasheet::int8_dense_peak;
pub use error::GpuError;

use std::sync::Mutex;

use cudarc::driver::CudaContext;

use self::buffers::*;
use self::device::Device;
use self::rows::{plane_index, DeviceDb};
use crate::mirror::{Mirror, Sharded};
use ocelli_device::DeviceCircuit;
use ocelli_mpc::backend::{Backend, BackendError};
use ocelli_mpc::db::{Eye, MatchDb, Part};
use ocelli_mpc::network::Transport;
use ocelli_mpc::scratch::ScratchVec;
use ocelli_mpc::Session;

struct State {
    /// One per shard of the database, in shard order.
    devices: Vec<Device>,
    mirror: Mirror<Sharded<DeviceDb>>,
    /// Times every call on the devices' streams, where a bench asked ([`GpuEngine::time_busy`]).
    busy: Option<std::sync::Arc<BusyClock>>,
}

/// The GPU dot-product engine: one device, or several holding contiguous shards of the
/// enrolled database (rows in the [`MatchDb`]'s order across them). Each device computes its
/// shard's block of a product; the host places the blocks, which it receives anyway, so the
/// devices have nothing to combine among themselves.
pub struct GpuEngine {
    name: String,
    /// Tells this engine's [`ResidentQueries`] from another's.
    id: u64,
    state: Mutex<State>,
}

impl core::fmt::Debug for GpuEngine {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GpuEngine")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl GpuEngine {
    /// Whether a GPU engine can be created on device `ordinal`, and if not, why.
    ///
    /// # Errors
    /// The reason, for the skip message of tests and the error of the node's start.
    pub fn probe(ordinal: usize) -> Result<(), GpuError> {
        // SAFETY: these only try to open the shared libraries.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(GpuError::NoDriver);
        }
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(GpuError::NoNvrtc);
        }
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(GpuError::NoCublas);
        }
        let count = CudaContext::device_count()?;
        if ordinal >= count.max(0) as usize {
            return Err(GpuError::NoDevice { ordinal, count });
        }
        Ok(())
    }

    /// An engine on device `ordinal`, with its own stream, cuBLAS handle and (empty)
    /// resident database.
    ///
    /// # Errors
    /// See [`GpuEngine::probe`]; also a failed kernel compilation or allocation.
    pub fn new(ordinal: usize) -> Result<GpuEngine, GpuError> {
        Self::with_devices(&[ordinal])
    }

    /// An engine sharding the database over `ordinals`, one shard per entry (an ordinal may
    /// repeat: two shards on one device).
    ///
    /// # Errors
    /// As [`GpuEngine::new`], for any of the devices.
    ///
    /// # Panics
    /// If `ordinals` is empty.
    pub fn with_devices(ordinals: &[usize]) -> Result<GpuEngine, GpuError> {
        assert!(!ordinals.is_empty());
        let mut devices = Vec::new();
        let mut shards = Vec::new();
        for &ordinal in ordinals {
            Self::probe(ordinal)?;
            let device = Device::new(ordinal)?;
            shards.push(DeviceDb::new(device.stream.clone())?);
            devices.push(device);
        }
        let ctx = &devices[0].ctx;
        let (major, minor) = ctx.compute_capability()?;
        let list: Vec<String> = ordinals.iter().map(usize::to_string).collect();
        let name = format!("gpu:{} {} (sm_{major}{minor})", list.join(","), ctx.name()?);
        let state = State {
            devices,
            mirror: Mirror::new(Sharded::new(shards)),
            busy: None,
        };
        static ENGINES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Ok(GpuEngine {
            name,
            id: ENGINES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            state: Mutex::new(state),
        })
    }

    /// The first device's name as the driver reports it.
    ///
    /// # Errors
    /// The driver call failed.
    pub fn device_name(&self) -> Result<String, GpuError> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        Ok(state.devices[0].ctx.name()?)
    }

    /// The comparison-phase kernels of the first device, where a node on this engine runs
    /// its comparison phase ([`ocelli_device::DeviceCircuit`]).
    pub fn kernels(&self) -> std::sync::Arc<CudaKernels> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.devices[0].kernels.clone()
    }

    /// Has `clock` time this engine's calls and its kernels' from now on (a bench's
    /// device-busy fraction).
    pub fn time_busy(&self, clock: &std::sync::Arc<BusyClock>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.busy = Some(clock.clone());
        for device in &state.devices {
            device.kernels.time_busy(clock);
        }
    }

    /// Brings the resident database to `db` now (at start, after loading the store), rather
    /// than at the first batch.
    ///
    /// # Errors
    /// A device allocation or copy failed.
    pub fn sync(&self, db: &MatchDb) -> Result<(), GpuError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        Ok(state.mirror.sync(db)?)
    }

    /// Int8 operations per second (two per multiply-add) the engine's GEMM calls sustain on
    /// the first device, on `m x k` by `k x n` operands already there: the three GEMMs of a
    /// product block, `repeats` times, without transfers or the combine kernel.
    ///
    /// # Errors
    /// A device allocation or cuBLAS call failed.
    pub fn gemm_ops_per_second(
        &self,
        m: usize,
        n: usize,
        k: usize,
        repeats: usize,
    ) -> Result<f64, GpuError> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.devices[0].gemm_ops_per_second((m, n, k), repeats)
    }

    fn run(&self, f: impl FnOnce(&mut State) -> Result<(), GpuError>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let ran = match state.busy.clone() {
            Some(clock) => {
                let streams: Vec<_> = state.devices.iter().map(|d| d.stream.clone()).collect();
                let streams: Vec<_> = streams.iter().collect();
                clock.span(&streams, || f(&mut state))
            }
            None => f(&mut state),
        };
        // The engine trait has no error path: a failing device ends the batch, whose
        // evaluation runs on its own task, and the node reports it.
        if let Err(e) = ran {
            panic!("{}: {e}", self.name);
        }
    }

    /// This engine's device copy of `queries`, if it made one (not another GPU engine).
    fn resident<'q>(&self, queries: &'q GpuQueries) -> Option<&'q ResidentQueries> {
        let resident = queries.resident.as_ref()?;
        (resident.engine == self.id).then_some(resident)
    }

    fn dot_with(
        &self,
        queries: &[u16],
        resident: Option<&ResidentQueries>,
        db: &[u16],
        len: usize,
        out: &mut [u16],
    ) {
        assert!(
            len.is_multiple_of(64)
                && queries.len().is_multiple_of(len)
                && db.len().is_multiple_of(len)
        );
        let (n, m) = (queries.len() / len, db.len() / len);
        assert_eq!(out.len(), n * m);
        if n == 0 || m == 0 {
            return;
        }
        self.run(|state| {
            let device = &mut state.devices[0];
            device.ctx.bind_to_thread()?;
            let stream = device.stream.clone();
            stage(&stream, &mut device.scratch.d, db, len, round_up(m, PAD))?;
            let resident = resident.map(|r| &r.planes[0].1);
            device.product(queries, resident, None, 0, m, out)
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn dot_db_with(
        &self,
        queries: &[u16],
        resident: Option<&ResidentQueries>,
        db: &MatchDb,
        eye: Eye,
        part: Part,
        rows: core::ops::Range<usize>,
        out: &mut [u16],
    ) {
        let len = part.coefs();
        assert!(queries.len().is_multiple_of(len) && rows.end <= db.len());
        let (n, m) = (queries.len() / len, rows.len());
        assert_eq!(out.len(), n * m);
        if n == 0 || m == 0 {
            return;
        }
        let resident = |k: usize| resident.map(|r| &r.planes[k].1);
        self.run(|state| {
            let State {
                devices, mirror, ..
            } = state;
            mirror.sync(db)?;
            let store = mirror.store();
            let pieces = store.pieces(rows.clone());
            let plane = |k: usize| &store.shards()[k].planes[plane_index(eye, part)];
            if let [(k, local, _)] = pieces.as_slice() {
                let device = &mut devices[*k];
                return device.product(queries, resident(*k), Some(plane(*k)), local.start, m, out);
            }
            // Several shards: each device computes its block on its own thread.
            let blocks = std::thread::scope(|scope| {
                let mut handles = Vec::new();
                for (device_index, device) in devices.iter_mut().enumerate() {
                    let Some((k, local, offset)) =
                        pieces.iter().find(|p| p.0 == device_index).cloned()
                    else {
                        continue;
                    };
                    let (plane, resident) = (plane(k), resident(k));
                    handles.push(scope.spawn(move || {
                        let mut block = vec![0u16; n * local.len()];
                        let width = local.len();
                        device
                            .product(
                                queries,
                                resident,
                                Some(plane),
                                local.start,
                                width,
                                &mut block,
                            )
                            .map(|()| (offset, width, block))
                    }));
                }
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a device thread panicked"))
                    .collect::<Result<Vec<_>, GpuError>>()
            })?;
            for (offset, width, block) in blocks {
                for q in 0..n {
                    out[q * m + offset..q * m + offset + width]
                        .copy_from_slice(&block[q * width..(q + 1) * width]);
                }
            }
            Ok(())
        });
    }
}

/// Query vectors as the GPU engine holds them: on the host, and split and resident on every
/// device for the batch's passes. Wiped and freed when dropped.
pub struct GpuQueries {
    rows: usize,
    data: ScratchVec,
    resident: Option<ResidentQueries>,
}

impl core::fmt::Debug for GpuQueries {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GpuQueries")
            .field("rows", &self.rows)
            .field("resident", &self.resident.is_some())
            .finish_non_exhaustive()
    }
}

impl Backend for GpuEngine {
    type Prepared = GpuQueries;
    type Circuit<'s, 'n: 's, T: Transport + 'n> = DeviceCircuit<'s, 'n, CudaKernels, T>;

    fn name(&self) -> String {
        self.name.clone()
    }

    /// The comparison phase on the first device, beside the dot products it reads.
    fn circuit<'s, 'n: 's, T: Transport + 'n>(
        &'s self,
        session: &'s mut Session<'n, T>,
    ) -> DeviceCircuit<'s, 'n, CudaKernels, T> {
        DeviceCircuit::new(session, self.kernels())
    }

    /// The dot products and the comparison rounds share the device: one after the other.
    fn overlaps_passes(&self) -> bool {
        false
    }

    fn prepared_rows(queries: &GpuQueries) -> usize {
        queries.rows
    }

    fn prepare(&self, db: &MatchDb) -> Result<(), BackendError> {
        let started = std::time::Instant::now();
        self.sync(db).map_err(|e| BackendError {
            backend: self.name.clone(),
            source: Box::new(e),
        })?;
        tracing::info!(
            engine = %self.name,
            entries = db.len(),
            seconds = started.elapsed().as_secs_f64(),
            "enrolled shares resident on the GPU"
        );
        Ok(())
    }

    fn dot(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]) {
        self.dot_with(queries, None, db, len, out);
    }

    fn dot_db(
        &self,
        queries: &[u16],
        db: &MatchDb,
        eye: Eye,
        part: Part,
        rows: core::ops::Range<usize>,
        out: &mut [u16],
    ) {
        self.dot_db_with(queries, None, db, eye, part, rows, out);
    }

    /// Splits the queries and uploads them to every device once: a batch's passes reuse them.
    fn prepare_queries(&self, queries: ScratchVec, len: usize) -> GpuQueries {
        let rows = queries.len() / len;
        let mut resident = None;
        if rows > 0 {
            self.run(|state| {
                // Split once on the host; every device gets the same rows (its padding rows
                // are zero from the allocation).
                let split = Split::of(&queries, len);
                let mut planes = Vec::with_capacity(state.devices.len());
                for device in &state.devices {
                    device.ctx.bind_to_thread()?;
                    let mut plane = Plane::new(&device.stream, len, round_up(rows, PAD))?;
                    plane.upload(&device.stream, 0, &split)?;
                    planes.push((device.stream.clone(), plane));
                }
                resident = Some(ResidentQueries {
                    engine: self.id,
                    planes,
                });
                Ok(())
            });
        }
        GpuQueries {
            rows,
            data: queries,
            resident,
        }
    }

    fn dot_prepared(&self, queries: &GpuQueries, db: &[u16], len: usize, out: &mut [u16]) {
        self.dot_with(&queries.data, self.resident(queries), db, len, out);
    }

    /// Computes every prepared row and keeps the first `rows`: the device copy is of them all.
    fn dot_prepared_rows(
        &self,
        queries: &GpuQueries,
        rows: usize,
        db: &[u16],
        len: usize,
        out: &mut [u16],
    ) {
        assert!(rows <= queries.rows, "more rows than were prepared");
        assert_eq!(out.len(), rows * (db.len() / len));
        if rows == queries.rows {
            return self.dot_prepared(queries, db, len, out);
        }
        let mut all = vec![0u16; queries.rows * (db.len() / len)];
        self.dot_prepared(queries, db, len, &mut all);
        out.copy_from_slice(&all[..out.len()]);
        zeroize::Zeroize::zeroize(&mut all[..]);
    }

    fn dot_db_prepared(
        &self,
        queries: &GpuQueries,
        db: &MatchDb,
        eye: Eye,
        part: Part,
        rows: core::ops::Range<usize>,
        out: &mut [u16],
    ) {
        let resident = self.resident(queries);
        self.dot_db_with(&queries.data, resident, db, eye, part, rows, out);
    }
}

#[cfg(test)]
mod tests;

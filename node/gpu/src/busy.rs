//! How much of a stretch of wall time the device was busy: timing events recorded on the
//! streams around every engine call and every kernel-device call, their intervals merged and
//! measured against the wall time. A bench measure only; off unless started.
//!
//! An engine call's interval runs from its first enqueued operation to its last, so it
//! includes any gap the host leaves between them: the fraction is an upper bound.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream};

use super::error::GpuError;

/// Timing events of one measured stretch, shared by the engines of a bench run.
pub struct BusyClock {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    on: AtomicBool,
    reference: Mutex<Option<CudaEvent>>,
    spans: Mutex<Vec<(CudaEvent, CudaEvent)>>,
    /// Set when an event could not be made or recorded: the stretch has no figure.
    broken: AtomicBool,
}

impl core::fmt::Debug for BusyClock {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BusyClock")
            .field("on", &self.on.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl BusyClock {
    /// A clock on device `ordinal` (the primary context, which every engine on it shares).
    ///
    /// # Errors
    /// The context or a stream could not be made.
    pub fn new(ordinal: usize) -> Result<Arc<BusyClock>, GpuError> {
        let ctx = CudaContext::new(ordinal)?;
        let stream = ctx.new_stream()?;
        Ok(Arc::new(BusyClock {
            ctx,
            stream,
            on: AtomicBool::new(false),
            reference: Mutex::new(None),
            spans: Mutex::new(Vec::new()),
            broken: AtomicBool::new(false),
        }))
    }

    fn timing_event(&self) -> Result<CudaEvent, GpuError> {
        Ok(self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?)
    }

    /// Starts a stretch: what is enqueued from now on is timed.
    ///
    /// # Errors
    /// The reference event could not be recorded.
    pub fn start(&self) -> Result<(), GpuError> {
        let reference = self.timing_event()?;
        reference.record(&self.stream)?;
        *self
            .reference
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(reference);
        self.spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.broken.store(false, Ordering::Relaxed);
        self.on.store(true, Ordering::Release);
        Ok(())
    }

    /// Runs `f`, which enqueues work on `streams`, between a start and an end event on each.
    pub(super) fn span<R>(&self, streams: &[&Arc<CudaStream>], f: impl FnOnce() -> R) -> R {
        if !self.on.load(Ordering::Acquire) {
            return f();
        }
        let record = |stream: &Arc<CudaStream>| -> Option<CudaEvent> {
            let event = self.timing_event().ok()?;
            event.record(stream).ok()?;
            Some(event)
        };
        let starts: Vec<Option<CudaEvent>> = streams.iter().map(|s| record(s)).collect();
        let r = f();
        let mut spans = self.spans.lock().unwrap_or_else(PoisonError::into_inner);
        for (stream, start) in streams.iter().zip(starts) {
            match (start, record(stream)) {
                (Some(start), Some(end)) => spans.push((start, end)),
                _ => self.broken.store(true, Ordering::Relaxed),
            }
        }
        r
    }

    /// Ends the stretch: the fraction of `wall_seconds` some timed interval covered; `None`
    /// if an event failed or nothing was started.
    pub fn stop(&self, wall_seconds: f64) -> Option<f64> {
        self.on.store(false, Ordering::Release);
        let reference = self
            .reference
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()?;
        let spans = std::mem::take(&mut *self.spans.lock().unwrap_or_else(PoisonError::into_inner));
        if self.broken.load(Ordering::Relaxed) || wall_seconds <= 0.0 {
            return None;
        }
        let mut intervals = Vec::with_capacity(spans.len());
        for (start, end) in &spans {
            let from = f64::from(reference.elapsed_ms(start).ok()?);
            let to = f64::from(reference.elapsed_ms(end).ok()?);
            intervals.push((from, to.max(from)));
        }
        Some(union_ms(&mut intervals) / 1e3 / wall_seconds)
    }
}

/// The length of the union of `intervals`.
fn union_ms(intervals: &mut [(f64, f64)]) -> f64 {
    intervals.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut total = 0.0;
    let mut current: Option<(f64, f64)> = None;
    for &(from, to) in intervals.iter() {
        current = match current {
            Some((a, b)) if from <= b => Some((a, b.max(to))),
            Some((a, b)) => {
                total += b - a;
                Some((from, to))
            }
            None => Some((from, to)),
        };
    }
    total + current.map_or(0.0, |(a, b)| b - a)
}

#[cfg(test)]
mod tests {
    use super::union_ms;

    #[test]
    fn overlapping_intervals_count_once() {
        let mut v = [(5.0, 7.0), (0.0, 2.0), (1.0, 3.0), (6.0, 6.5), (10.0, 10.0)];
        assert_eq!(union_ms(&mut v), 5.0);
        assert_eq!(union_ms(&mut []), 0.0);
    }
}

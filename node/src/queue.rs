//! The in-memory view of pending requests: arrival order, digest, and which
//! batch proposal (if any) reserved each one. The durable copy is the store.

use std::collections::{BTreeMap, HashMap};

use crate::ids::{EnvelopeDigest, RequestId};

#[derive(Clone, Copy, Debug)]
struct Entry {
    seq: u64,
    digest: EnvelopeDigest,
    received_ms: u64,
    reserved: Option<u64>,
}

/// A pending request as the batch logic sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Request id.
    pub id: RequestId,
    /// Envelope digest.
    pub digest: EnvelopeDigest,
    /// Local arrival time, ms since the epoch.
    pub received_ms: u64,
}

/// Pending requests in arrival order.
#[derive(Debug, Default)]
pub struct PendingQueue {
    order: BTreeMap<u64, RequestId>,
    entries: HashMap<RequestId, Entry>,
    next_seq: u64,
}

impl PendingQueue {
    /// Adds a request (no-op if present).
    pub fn push(&mut self, id: RequestId, digest: EnvelopeDigest, received_ms: u64) {
        if self.entries.contains_key(&id) {
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.insert(seq, id);
        self.entries.insert(
            id,
            Entry {
                seq,
                digest,
                received_ms,
                reserved: None,
            },
        );
    }

    /// Removes a request.
    pub fn remove(&mut self, id: &RequestId) {
        if let Some(e) = self.entries.remove(id) {
            self.order.remove(&e.seq);
        }
    }

    /// Whether `id` is pending.
    pub fn contains(&self, id: &RequestId) -> bool {
        self.entries.contains_key(id)
    }

    /// The digest of a pending request.
    pub fn digest(&self, id: &RequestId) -> Option<EnvelopeDigest> {
        self.entries.get(id).map(|e| e.digest)
    }

    /// Number pending.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Up to `max` oldest requests.
    pub fn oldest(&self, max: usize) -> Vec<Candidate> {
        self.order
            .values()
            .filter_map(|id| {
                self.entries.get(id).map(|e| Candidate {
                    id: *id,
                    digest: e.digest,
                    received_ms: e.received_ms,
                })
            })
            .take(max)
            .collect()
    }

    /// Reserves `id` for proposal `batch` (dropping every reservation of an
    /// older proposal first is the caller's job: see [`Self::release_all_but`]).
    pub fn reserve(&mut self, id: &RequestId, batch: u64) -> bool {
        match self.entries.get_mut(id) {
            Some(e) => {
                e.reserved = Some(batch);
                true
            }
            None => false,
        }
    }

    /// Drops reservations of proposals other than `batch`.
    pub fn release_all_but(&mut self, batch: Option<u64>) {
        for e in self.entries.values_mut() {
            if e.reserved != batch {
                e.reserved = None;
            }
        }
    }

    /// Unreserved requests received before `cutoff_ms`.
    pub fn expired(&self, cutoff_ms: u64) -> Vec<Candidate> {
        self.order
            .values()
            .filter_map(|id| self.entries.get(id).map(|e| (id, e)))
            .filter(|(_, e)| e.reserved.is_none() && e.received_ms < cutoff_ms)
            .map(|(id, e)| Candidate {
                id: *id,
                digest: e.digest,
                received_ms: e.received_ms,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_reservation_expiry() {
        let mut q = PendingQueue::default();
        for i in 0..5u8 {
            q.push(RequestId([i; 16]), EnvelopeDigest([i; 32]), u64::from(i));
        }
        q.push(RequestId([0; 16]), EnvelopeDigest([9; 32]), 100);
        assert_eq!(q.len(), 5);
        assert_eq!(q.digest(&RequestId([0; 16])), Some(EnvelopeDigest([0; 32])));
        let o = q.oldest(2);
        assert_eq!(o[1].id, RequestId([1; 16]));
        assert!(q.reserve(&RequestId([0; 16]), 7));
        assert_eq!(q.expired(3).len(), 2);
        q.release_all_but(None);
        assert_eq!(q.expired(3).len(), 3);
        q.remove(&RequestId([0; 16]));
        assert_eq!(q.oldest(10).len(), 4);
    }
}

//! The in-memory view of pending requests: arrival order, digest, which
//! batch proposal (if any) reserved each one, and, for a bounded number of
//! them, this party's shares as the intake opened them. The durable copy is
//! the store, which holds the sealed envelope.

use std::collections::{BTreeMap, HashMap};

use crate::ids::{EnvelopeDigest, RequestId};
use crate::shares::StoredShares;

#[derive(Debug)]
struct Entry {
    seq: u64,
    digest: EnvelopeDigest,
    received_ms: u64,
    reserved: Option<u64>,
    /// A peer voted it missing in the last proposal that named it: it waits behind requests
    /// the peers hold.
    unacknowledged: bool,
    /// Proposals a peer voted it missing in: among such requests, the least proposed go first.
    missing_votes: u32,
    /// Opened at intake, so evaluating and applying the request need not open its envelope
    /// again; zeroized when the request leaves the queue.
    opened: Option<StoredShares>,
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
    /// Most entries that keep their opened shares (0: none; see [`Self::keeping_opened`]).
    opened_limit: usize,
    opened_count: usize,
}

impl PendingQueue {
    /// A queue that keeps the opened shares of up to `limit` pending requests (about 77 KB
    /// each); requests beyond that are opened again from the store when a batch runs them.
    pub fn keeping_opened(limit: usize) -> Self {
        Self {
            opened_limit: limit,
            ..Self::default()
        }
    }

    /// Adds a request (no-op if present), keeping `opened` while fewer than the limit are kept.
    pub fn push(
        &mut self,
        id: RequestId,
        digest: EnvelopeDigest,
        received_ms: u64,
        opened: Option<StoredShares>,
    ) {
        if self.entries.contains_key(&id) {
            return;
        }
        let opened = opened.filter(|_| self.opened_count < self.opened_limit);
        self.opened_count += usize::from(opened.is_some());
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
                unacknowledged: false,
                missing_votes: 0,
                opened,
            },
        );
    }

    /// Removes a request (its kept shares are zeroized as they drop).
    pub fn remove(&mut self, id: &RequestId) {
        if let Some(e) = self.entries.remove(id) {
            self.order.remove(&e.seq);
            self.opened_count -= usize::from(e.opened.is_some());
        }
    }

    /// A copy of the shares kept for pending request `id`, if any.
    pub fn opened(&self, id: &RequestId) -> Option<StoredShares> {
        self.entries.get(id).and_then(|e| e.opened.clone())
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

    /// What party 0 proposes next, in arrival order: the `max` oldest requests no peer voted
    /// missing when last proposed, and `max` of those a peer did, the least often voted
    /// missing first (then the oldest). Requests only party 0 received (a gateway that submits
    /// to it alone) so never take the slots of requests all three hold, and take turns among
    /// themselves, so one that merely reached the peers late is proposed again soon.
    pub fn to_propose(&self, max: usize) -> Vec<Candidate> {
        let mut acknowledged = Vec::new();
        let mut unacknowledged = Vec::new();
        for (seq, id) in &self.order {
            if let Some(e) = self.entries.get(id) {
                if !e.unacknowledged {
                    if acknowledged.len() < max {
                        acknowledged.push((*seq, *id, e));
                    }
                } else {
                    unacknowledged.push((*seq, *id, e));
                }
            }
        }
        unacknowledged.sort_by_key(|(seq, _, e)| (e.missing_votes, *seq));
        unacknowledged.truncate(max);
        acknowledged.extend(unacknowledged);
        acknowledged.sort_by_key(|(seq, _, _)| *seq);
        acknowledged
            .into_iter()
            .map(|(_, id, e)| Candidate {
                id,
                digest: e.digest,
                received_ms: e.received_ms,
            })
            .collect()
    }

    /// Records how the peers voted on proposed request `id`: `missing` if any peer lacks it
    /// (see [`Self::to_propose`]).
    pub fn record_vote(&mut self, id: &RequestId, missing: bool) {
        if let Some(e) = self.entries.get_mut(id) {
            e.unacknowledged = missing;
            e.missing_votes += u32::from(missing);
        }
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
            q.push(
                RequestId([i; 16]),
                EnvelopeDigest([i; 32]),
                u64::from(i),
                None,
            );
        }
        q.push(RequestId([0; 16]), EnvelopeDigest([9; 32]), 100, None);
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

    #[test]
    fn requests_a_peer_lacks_wait_behind_the_others_and_take_turns() {
        let mut q = PendingQueue::default();
        let id = |i: u8| RequestId([i; 16]);
        for i in 0..6u8 {
            q.push(id(i), EnvelopeDigest([i; 32]), u64::from(i), None);
        }
        let ids = |c: Vec<Candidate>| c.into_iter().map(|c| c.id.0[0]).collect::<Vec<_>>();
        assert_eq!(ids(q.to_propose(2)), vec![0, 1]);
        // 0 and 1 reached party 0 alone.
        for i in [0, 1] {
            q.record_vote(&id(i), true);
        }
        assert_eq!(ids(q.to_propose(2)), vec![0, 1, 2, 3]);
        // 2 had not reached a peer yet either; then it has.
        q.record_vote(&id(2), true);
        q.record_vote(&id(3), false);
        q.record_vote(&id(0), true);
        // The least often missing go first among those a peer lacked: 1 and 2, not 0.
        assert_eq!(ids(q.to_propose(2)), vec![1, 2, 3, 4]);
        q.record_vote(&id(2), false);
        assert_eq!(ids(q.to_propose(2)), vec![0, 1, 2, 3]);
    }

    fn shares(byte: u8) -> StoredShares {
        StoredShares::try_from(&vec![byte; crate::shares::ENTRY_BYTES][..]).expect("entry length")
    }

    #[test]
    fn opened_shares_are_kept_up_to_the_limit_and_leave_with_their_request() {
        let mut q = PendingQueue::keeping_opened(2);
        for i in 0..3u8 {
            q.push(
                RequestId([i; 16]),
                EnvelopeDigest([i; 32]),
                0,
                Some(shares(i)),
            );
        }
        assert!(q.opened(&RequestId([0; 16])) == Some(shares(0)));
        assert!(q.opened(&RequestId([1; 16])) == Some(shares(1)));
        assert!(q.opened(&RequestId([2; 16])).is_none(), "over the limit");
        // A request already queued keeps what it has.
        q.push(
            RequestId([2; 16]),
            EnvelopeDigest([2; 32]),
            0,
            Some(shares(2)),
        );
        assert!(q.opened(&RequestId([2; 16])).is_none());
        q.remove(&RequestId([0; 16]));
        assert!(q.opened(&RequestId([0; 16])).is_none());
        q.push(
            RequestId([3; 16]),
            EnvelopeDigest([3; 32]),
            0,
            Some(shares(3)),
        );
        assert!(
            q.opened(&RequestId([3; 16])) == Some(shares(3)),
            "room again"
        );
        q.push(
            RequestId([4; 16]),
            EnvelopeDigest([4; 32]),
            0,
            Some(shares(4)),
        );
        assert!(q.opened(&RequestId([4; 16])).is_none());
        assert!(PendingQueue::default()
            .opened(&RequestId([0; 16]))
            .is_none());
    }
}

//! Finding the request that makes a batch fail, and setting it aside. A batch whose
//! evaluation fails deterministically at some node (a panic, an evaluator breaking its
//! contract; never a network fault or a peer's death, see
//! [`crate::batch::ApplyError::is_deterministic`]) makes all its requests suspects. Batches of
//! the requests that are not suspects then alternate with batches of one suspect alone, so the
//! cluster keeps serving while the suspects are tried one by one. A request that fails alone
//! is counted against it, durably, by party 0; once it has failed
//! `batch.max_failed_attempts` times it is quarantined: the next commit finalises it as
//! quarantined at all three nodes, with nothing evaluated or changed.
//!
//! The decisions are pure; the coordinator keeps a [`Suspects`] for its run and does the I/O.
//! After a restart the suspects are found again by the next failing batch, while the counts
//! of failed attempts survive in the store.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::RequestId;

/// Party 0's suspects and the requests it is to quarantine.
#[derive(Debug, Default)]
pub struct Suspects {
    ids: BTreeSet<RequestId>,
    /// Failed `batch.max_failed_attempts` times alone: quarantined by the next commit, with
    /// the reporter bits of the nodes whose evaluation failed last.
    doomed: BTreeMap<RequestId, u32>,
    /// The next batch that could run a suspect runs one alone.
    alone_next: bool,
}

impl Suspects {
    /// Takes the requests to quarantine out of `run` (the request ids a commit is to run, in
    /// order) and returns them with their reporter bits; then, if `run` holds suspects,
    /// leaves in it either one suspect alone or only the requests that are not suspects,
    /// turn about.
    pub fn select(&mut self, run: &mut Vec<Vec<u8>>) -> Vec<(Vec<u8>, u32)> {
        let mut quarantined = Vec::new();
        run.retain(|raw| match self.doomed_bits(raw) {
            Some(bits) => {
                quarantined.push((raw.clone(), bits));
                false
            }
            None => true,
        });
        let suspect =
            |raw: &Vec<u8>| RequestId::from_slice(raw).is_some_and(|id| self.ids.contains(&id));
        if let Some(first) = run.iter().find(|r| suspect(r)).cloned() {
            if self.alone_next || run.iter().all(suspect) {
                *run = vec![first];
                self.alone_next = false;
            } else {
                run.retain(|r| !suspect(r));
                self.alone_next = true;
            }
        }
        quarantined
    }

    /// Records that the evaluation of `ran` failed deterministically. A request that ran
    /// alone is returned, to be counted against it; the requests of a larger batch all become
    /// suspects.
    pub fn failed(&mut self, ran: &[RequestId]) -> Option<RequestId> {
        self.ids.extend(ran.iter().copied());
        match ran {
            [alone] => Some(*alone),
            _ => None,
        }
    }

    /// Marks `id` for quarantine at the next commit that proposes it; `reported_by` names the
    /// nodes whose evaluation failed last (bit p for party p).
    pub fn quarantine(&mut self, id: RequestId, reported_by: u32) {
        self.doomed.insert(id, reported_by);
    }

    /// Forgets the requests a committed batch ran or quarantined.
    pub fn committed<'a>(&mut self, ids: impl IntoIterator<Item = &'a [u8]>) {
        for id in ids.into_iter().filter_map(RequestId::from_slice) {
            self.ids.remove(&id);
            self.doomed.remove(&id);
        }
    }

    fn doomed_bits(&self, raw: &[u8]) -> Option<u32> {
        self.doomed.get(&RequestId::from_slice(raw)?).copied()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn id(n: u8) -> RequestId {
        RequestId([n; 16])
    }

    fn raw(ns: &[u8]) -> Vec<Vec<u8>> {
        ns.iter().map(|n| id(*n).0.to_vec()).collect()
    }

    #[test]
    fn suspects_run_alone_turn_about_with_the_others() {
        let mut s = Suspects::default();
        let mut run = raw(&[1, 2, 3]);
        assert!(s.select(&mut run).is_empty());
        assert_eq!(
            run,
            raw(&[1, 2, 3]),
            "no suspect: the batch is left as it is"
        );
        assert_eq!(
            s.failed(&[id(1), id(2), id(3)]),
            None,
            "nobody is blamed in a batch of three"
        );

        let mut run = raw(&[1, 2, 3, 4, 5]);
        s.select(&mut run);
        assert_eq!(run, raw(&[4, 5]), "the others go on without the suspects");
        let mut run = raw(&[1, 2, 3, 6]);
        s.select(&mut run);
        assert_eq!(run, raw(&[1]), "then one suspect alone");
        s.committed(run.iter().map(Vec::as_slice));
        let mut run = raw(&[2, 3, 6]);
        s.select(&mut run);
        assert_eq!(run, raw(&[6]));
        let mut run = raw(&[2, 3]);
        s.select(&mut run);
        assert_eq!(run, raw(&[2]), "only suspects left: one alone");
        assert_eq!(s.failed(&[id(2)]), Some(id(2)), "alone, it is blamed");
    }

    #[test]
    fn a_quarantined_request_leaves_the_batch_and_is_forgotten_once_committed() {
        let mut s = Suspects::default();
        s.failed(&[id(7)]);
        s.quarantine(id(7), 0b110);
        let mut run = raw(&[7, 8]);
        assert_eq!(s.select(&mut run), vec![(id(7).0.to_vec(), 0b110)]);
        assert_eq!(run, raw(&[8]));
        s.committed([&id(7).0[..]]);
        let mut run = raw(&[7, 8]);
        assert!(s.select(&mut run).is_empty());
        assert_eq!(run, raw(&[7, 8]));
    }
}

//! The plaintext reference of the `requests` family: whom each request is compared with,
//! the comparison values, and the outcomes, from the templates alone.

use sdk_orb::plaintext::dot_products;
use sdk_orb::rotation::rotations;
use sdk_orb::template::IrisTemplate;

use super::{Batch, Comparison, Outcome, Person, With};
use crate::envelope::RequestKind;
use crate::format::HexU32;

/// Each eye of a query, in all 31 rotations (index `k + 15`).
fn all_rotations(person: &Person) -> [Vec<IrisTemplate>; 2] {
    [&person.0, &person.1].map(|eye| rotations().map(|k| eye.rotated(k)).collect())
}

/// One eye against another: `x_k = A md_k - 2^16 cd_k` per rotation (as u32), and whether
/// `2^16 cd > A md` at some rotation.
fn compare_eye(rotated: &[IrisTemplate], other: &IrisTemplate, a: u32) -> (HexU32, bool) {
    let mut matches = false;
    let x = rotated
        .iter()
        .map(|q| {
            let d = dot_products(q, other);
            matches |= d.matches(a);
            // In i32 for every genuine pair: md <= 12,800 and A <= 2^16 (checked in decode).
            (i64::from(a) * i64::from(d.md) - (i64::from(d.cd) << 16)) as i32 as u32
        })
        .collect();
    (HexU32(x), matches)
}

/// What the plaintext reference computes for a batch.
pub(super) struct Plain {
    pub(super) comparisons: Vec<Vec<Comparison>>,
    pub(super) outcomes: Vec<Outcome>,
    /// Some request matches an earlier one (known here even in the privacy-max mode).
    pub(super) intra_batch: bool,
}

/// Whom request `j` is compared with: a uniqueness request or check with every enrolled
/// person, then the batch's earlier uniqueness requests (the enrolment candidates); a
/// re-authentication with its serial id if enrolled; deletions and resets with nobody.
pub(super) fn others(batch: &Batch, j: usize) -> Vec<(With, Option<&Person>)> {
    let q = &batch.requests[j];
    match q.kind {
        RequestKind::Uniqueness | RequestKind::UniquenessCheck => batch
            .database
            .iter()
            .map(|e| (With::Entry(e.serial_id), Some(&e.person)))
            .chain(
                batch.requests[..j]
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.kind == RequestKind::Uniqueness)
                    .map(|(k, r)| (With::Request(k), r.person.as_ref())),
            )
            .collect(),
        RequestKind::Reauth => batch
            .database
            .iter()
            .filter(|e| e.serial_id == q.serial_id)
            .map(|e| (With::Entry(e.serial_id), Some(&e.person)))
            .collect(),
        RequestKind::Deletion | RequestKind::Reset => Vec::new(),
    }
}

/// Whether a person matches whose eyes match as `eyes`: both, or either under the OR policy.
fn person_matches(or_policy: bool, [left, right]: [bool; 2]) -> bool {
    if or_policy {
        left || right
    } else {
        left && right
    }
}

/// The outcome of a request of type `kind` whose comparisons matched as `matched` (per
/// comparison, per eye) under the policy `or_policy`.
fn outcome(
    kind: RequestKind,
    matched: &[(With, [bool; 2])],
    or_policy: bool,
    privacy_max: bool,
) -> Outcome {
    let hits = matched
        .iter()
        .filter(|(_, eyes)| person_matches(or_policy, *eyes))
        .map(|(with, _)| *with);
    match kind {
        RequestKind::Uniqueness | RequestKind::UniquenessCheck => {
            let (mut entries, mut earlier) = (Vec::new(), Vec::new());
            for with in hits {
                match with {
                    With::Entry(s) => entries.push(s),
                    With::Request(k) => earlier.push(k),
                }
            }
            if entries.is_empty() && earlier.is_empty() {
                Outcome::Unique
            } else if privacy_max {
                Outcome::Match {
                    entries: vec![],
                    earlier: vec![],
                }
            } else {
                Outcome::Match { entries, earlier }
            }
        }
        RequestKind::Reauth => Outcome::Reauth(hits.count() > 0),
        RequestKind::Deletion | RequestKind::Reset => Outcome::Apply,
    }
}

/// The comparisons and outcomes from the templates alone, written from the request-type
/// semantics (docs/design.md section 5): a person matches if both eyes do (either eye under
/// the OR policy); matching sees the database as it was before the batch.
///
/// # Errors
/// A request compared with someone without a template, or an `or_policy` of true that does
/// not change the outcome (its one form is false).
pub(super) fn plaintext(batch: &Batch) -> Result<Plain, String> {
    let a = batch.threshold_a;
    let mut plain = Plain {
        comparisons: Vec::new(),
        outcomes: Vec::new(),
        intra_batch: false,
    };
    for (j, q) in batch.requests.iter().enumerate() {
        let others = others(batch, j);
        let mut comparisons = Vec::new();
        let mut matched = Vec::new();
        if !others.is_empty() {
            let query = q
                .person
                .as_ref()
                .map(all_rotations)
                .ok_or(format!("requests[{j}]: compared, but holds no template"))?;
            for (with, other) in others {
                let other = other.ok_or(format!("requests[{j}]: {with:?} holds no template"))?;
                let (left, l) = compare_eye(&query[0], &other.0, a);
                let (right, r) = compare_eye(&query[1], &other.1, a);
                comparisons.push(Comparison { with, left, right });
                matched.push((with, [l, r]));
            }
        }
        let got = outcome(q.kind, &matched, q.or_policy, batch.privacy_max);
        if q.or_policy && got == outcome(q.kind, &matched, false, batch.privacy_max) {
            return Err(format!(
                "requests[{j}].or_policy: true, but the outcome is the same under the AND \
                 policy (then it must be false)"
            ));
        }
        plain.intra_batch |= matched.iter().any(|(with, eyes)| {
            matches!(with, With::Request(_)) && person_matches(q.or_policy, *eyes)
        });
        plain.comparisons.push(comparisons);
        plain.outcomes.push(got);
    }
    Ok(plain)
}

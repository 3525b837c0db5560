//! From a batch's requests to the pipeline and back: what each request type is matched
//! against, and the outcome the opened bits mean. Request types, target serial ids and eye
//! policies are public, so the three parties build the same pipeline requests and read the
//! same outcomes from the same opened bits.

use sdk_orb::rotation::ROTATION_COUNT;
use sdk_orb::shamir::PartyShares;
use sdk_orb::RequestType;

use crate::circuit::Circuit;
use crate::db::MatchDb;
use crate::network::NetworkError;
use crate::pipeline::{MatchResult, PairRules, PipelineRequest, Target};
use crate::wellformed::{well_formed, CHECKS_PER_PERSON};

/// An enrolment serial id (assigned identically by the three nodes, from 1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct SerialId(pub u64);

/// What the three parties know of a request in the clear.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicRequest {
    /// Request type.
    pub request_type: RequestType,
    /// Target serial id (deletion, re-authentication, reset).
    pub serial_id: SerialId,
    /// Either eye suffices for a match.
    pub or_policy: bool,
    /// Enrolled serial ids this uniqueness request is compared with under the OR rule.
    pub or_serial_ids: Vec<SerialId>,
}

/// Node-wide matching rules; identical on the three nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatchRules {
    /// Mirror-attack detection for uniqueness requests and checks.
    pub mirror: bool,
    /// The N most recently enrolled people are compared under the OR rule (0: off).
    pub lookback: usize,
}

/// What was decided for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing was computed: the request is answered "not evaluated".
    NotEvaluated,
    /// No match (uniqueness: enrol; uniqueness check: report).
    Unique,
    /// Matched: these enrolled entries and these earlier requests of the batch (by position
    /// among the batch's requests). Both empty in the privacy-max mode, where only the fact
    /// of a match is opened.
    Match {
        /// Matched enrolled entries.
        entries: Vec<SerialId>,
        /// Matched earlier requests of the batch.
        earlier: Vec<usize>,
    },
    /// The mirrored query matched an enrolled entry: never enrolled. `matched` says whether the
    /// plain query matched too (then `entries` and `earlier` as for [`Outcome::Match`]).
    MirrorAttack {
        /// The plain query matched as well.
        matched: bool,
        /// Matched enrolled entries (plain query).
        entries: Vec<SerialId>,
        /// Matched earlier requests of the batch (plain query).
        earlier: Vec<usize>,
    },
    /// Re-authentication matched / did not match.
    Reauth(bool),
    /// Carry out a deletion or reset.
    Apply,
    /// The shares do not encode iris templates ([`crate::wellformed`]): refused, nothing is
    /// stored.
    Malformed,
}

/// The pair rules of a uniqueness request or check: mirror detection, the lookback window
/// (the last `lookback` rows, and the batch's earlier candidates, which are more recent still)
/// and the rows of the serial ids it names (ids no longer enrolled name nothing).
fn pair_rules(r: &PublicRequest, db: &MatchDb, rules: &MatchRules) -> PairRules {
    let mut or_rows: Vec<usize> = r
        .or_serial_ids
        .iter()
        .filter_map(|s| db.row_of(s.0))
        .collect();
    or_rows.sort_unstable();
    or_rows.dedup();
    PairRules {
        mirror: rules.mirror,
        or_from_row: (rules.lookback > 0).then(|| db.len().saturating_sub(rules.lookback)),
        or_rows,
        or_earlier: rules.lookback > 0,
    }
}

/// What a request of each type is matched against: `(target, against earlier candidates,
/// is a candidate itself)`.
fn role(r: &PublicRequest, db: &MatchDb) -> (Target, bool, bool) {
    match r.request_type {
        RequestType::Uniqueness => (Target::Database, true, true),
        RequestType::UniquenessCheck => (Target::Database, true, false),
        RequestType::Reauth => match db.row_of(r.serial_id.0) {
            Some(row) => (Target::Entry(row), false, false),
            None => (Target::Nothing, false, false),
        },
        RequestType::Deletion | RequestType::Reset => (Target::Nothing, false, false),
    }
}

/// The pipeline's view of a batch: one [`PipelineRequest`] per request, in order, with
/// `shares[j]` as request `j`'s shares. Uniqueness requests are matched against the database
/// and the batch's earlier uniqueness requests, and are enrolment candidates themselves;
/// uniqueness checks likewise but are never candidates; a re-authentication against its
/// serial id's row (nothing if it is not enrolled); deletions and resets against nothing.
/// Uniqueness requests and checks get the node's `rules` (mirror detection, lookback) and
/// their own named OR-rule serial ids.
///
/// # Panics
/// If `shares` and `requests` differ in length.
pub fn pipeline_requests<'a>(
    requests: &[PublicRequest],
    shares: &'a [Box<PartyShares>],
    db: &MatchDb,
    rules: &MatchRules,
) -> Vec<PipelineRequest<'a>> {
    assert_eq!(requests.len(), shares.len());
    requests
        .iter()
        .zip(shares)
        .map(|(r, s)| {
            let (target, against_earlier, candidate) = role(r, db);
            let rules = match r.request_type {
                RequestType::Uniqueness | RequestType::UniquenessCheck => pair_rules(r, db, rules),
                _ => PairRules::default(),
            };
            PipelineRequest {
                shares: s,
                target,
                against_earlier,
                candidate,
                or_policy: r.or_policy,
                rules,
            }
        })
        .collect()
}

/// Each request's outcome from what [`crate::pipeline::evaluate`] opened for it (`results`,
/// for the batch's [`pipeline_requests`]), with database rows reported as serial ids.
/// Identical on the three parties.
///
/// # Panics
/// If the three lists differ in length.
pub fn outcomes(
    requests: &[PublicRequest],
    pipeline_requests: &[PipelineRequest<'_>],
    results: Vec<MatchResult>,
    db: &MatchDb,
) -> Vec<Outcome> {
    assert_eq!(requests.len(), pipeline_requests.len());
    assert_eq!(requests.len(), results.len());
    let serial_of = |row: usize| SerialId(db.serial_ids()[row]);
    requests
        .iter()
        .zip(results)
        .zip(pipeline_requests)
        .map(|((r, m), p)| match r.request_type {
            RequestType::Uniqueness | RequestType::UniquenessCheck if m.mirror => {
                Outcome::MirrorAttack {
                    matched: m.any,
                    entries: m.entries.iter().map(|&row| serial_of(row)).collect(),
                    earlier: m.earlier,
                }
            }
            RequestType::Uniqueness | RequestType::UniquenessCheck if m.any => Outcome::Match {
                entries: m.entries.iter().map(|&row| serial_of(row)).collect(),
                earlier: m.earlier,
            },
            RequestType::Uniqueness | RequestType::UniquenessCheck => Outcome::Unique,
            RequestType::Reauth => Outcome::Reauth(p.target != Target::Nothing && m.any),
            RequestType::Deletion | RequestType::Reset => Outcome::Apply,
        })
        .collect()
}

/// Whether a request's shares are checked with [`refuse_malformed`] before anything uses them:
/// those that may be stored (a uniqueness request may enrol, a reset replaces its serial's
/// shares) and those whose match is a credential (a re-authentication: malformed shares would
/// match the serial they name whatever its iris).
pub fn shares_checked(r: &PublicRequest) -> bool {
    matches!(
        r.request_type,
        RequestType::Uniqueness | RequestType::Reset | RequestType::Reauth
    )
}

/// Runs the well-formedness check ([`well_formed`]) on the shares of every request that
/// [`shares_checked`], in batch order, and neutralises each request that fails: matched against
/// nothing, no enrolment candidate. Returns which requests were refused; [`mark_malformed`]
/// gives them their outcome. Every party calls it with the same requests, so all run the same
/// rounds and refuse the same requests. Runs no round when no request's shares are checked.
/// The people are checked in runs of at most `max_pass_comparisons` comparisons (at least one
/// person a run), as a pipeline pass is bounded, so memory and message sizes stay within the
/// pipeline's bound whatever the batch size.
///
/// # Errors
/// Transport failures; then no result of the batch may be used.
pub fn refuse_malformed<C: Circuit>(
    circuit: &mut C,
    requests: &[PublicRequest],
    pipeline_requests: &mut [PipelineRequest<'_>],
    max_pass_comparisons: usize,
) -> Result<Vec<bool>, NetworkError> {
    assert_eq!(requests.len(), pipeline_requests.len());
    let checked: Vec<usize> = (0..requests.len())
        .filter(|&j| shares_checked(&requests[j]))
        .collect();
    let people: Vec<&PartyShares> = checked
        .iter()
        .map(|&j| pipeline_requests[j].shares)
        .collect();
    let per_run = (max_pass_comparisons / CHECKS_PER_PERSON).max(1);
    let mut passed = Vec::with_capacity(people.len());
    for run in people.chunks(per_run) {
        passed.extend(well_formed(circuit, run)?);
    }
    let mut refused = vec![false; requests.len()];
    for (&j, ok) in checked.iter().zip(passed) {
        if !ok {
            refused[j] = true;
            let p = &mut pipeline_requests[j];
            p.target = Target::Nothing;
            p.against_earlier = false;
            p.candidate = false;
        }
    }
    Ok(refused)
}

/// Replaces the outcome of every request [`refuse_malformed`] refused with
/// [`Outcome::Malformed`].
///
/// # Panics
/// If the two lists differ in length.
pub fn mark_malformed(outcomes: &mut [Outcome], refused: &[bool]) {
    assert_eq!(outcomes.len(), refused.len());
    for (o, &r) in outcomes.iter_mut().zip(refused) {
        if r {
            *o = Outcome::Malformed;
        }
    }
}

/// Whether any request of the batch needs the comparison phase (otherwise the parties need
/// not open a session, unless a request [`shares_checked`] and must be checked).
pub fn needs_mpc(requests: &[PipelineRequest<'_>]) -> bool {
    requests
        .iter()
        .any(|r| r.target != Target::Nothing || r.against_earlier)
}

/// (query rotation, enrolled iris) pairs a batch compares.
pub fn comparisons(requests: &[PipelineRequest<'_>], db_len: usize) -> u64 {
    let mut pairs = 0usize;
    for (j, r) in requests.iter().enumerate() {
        pairs += match r.target {
            Target::Database if r.rules.mirror => 2 * db_len,
            Target::Database => db_len,
            Target::Entry(_) => 1,
            Target::Nothing => 0,
        };
        if r.against_earlier {
            pairs += requests[..j].iter().filter(|e| e.candidate).count();
        }
    }
    (pairs * ROTATION_COUNT * 2) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::run_three;
    use crate::synthetic;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    /// Runs of one person refuse what one run refuses: a random sharing (no template) among
    /// honest ones, and a deletion, whose shares are not checked.
    #[test]
    fn the_check_refuses_the_same_requests_in_runs_of_any_size() {
        let mut rng = ChaCha20Rng::seed_from_u64(40);
        let mut honest = || {
            let (l, r) = (synthetic::eye(&mut rng), synthetic::eye(&mut rng));
            synthetic::share_person(&mut rng, &l, &r)
        };
        let (a, b) = (honest(), honest());
        let mut rng = ChaCha20Rng::seed_from_u64(41);
        let noise: Vec<PartyShares> = (0..3)
            .map(|_| *synthetic::random_shares(&mut rng))
            .collect();
        let people = [&a, &noise, &b, &noise];
        let public: Vec<PublicRequest> = [
            RequestType::Uniqueness,
            RequestType::Reset,
            RequestType::Reauth,
            RequestType::Deletion,
        ]
        .into_iter()
        .map(|request_type| PublicRequest {
            request_type,
            serial_id: SerialId(1),
            or_policy: false,
            or_serial_ids: Vec::new(),
        })
        .collect();
        for max_pass_comparisons in [1, CHECKS_PER_PERSON, 1 << 20] {
            let out = run_three(7, |s| {
                let i = s.party().index();
                let mut requests: Vec<PipelineRequest<'_>> = people
                    .iter()
                    .map(|p| PipelineRequest::against_database(&p[i]))
                    .collect();
                let refused = refuse_malformed(s, &public, &mut requests, max_pass_comparisons)
                    .expect("in-memory network");
                (refused, requests[1].target)
            });
            for (decided, _, _) in &out {
                assert_eq!(decided.0, vec![false, true, false, false]);
                assert_eq!(
                    decided.1,
                    Target::Nothing,
                    "a refused request matches nothing"
                );
            }
        }
    }
}

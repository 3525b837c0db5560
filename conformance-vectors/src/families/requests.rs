//! `requests`: whole batches through the node's matching. Vector 1 is a database of enrolled
//! people; every other vector is a batch of requests against it, with the outcome of each
//! request as the node reports it. Replay shares every person from its seed, runs the batch as
//! the three parties through `ocelli_mpc` (the request-type mapping, pipeline and outcome
//! mapping a node's evaluator runs, CPU engine, in-memory network) and checks the
//! outcomes against the vector and against a plaintext reference built on `sdk_orb::plaintext`.

use serde::{Deserialize, Serialize};

use ocelli_mpc::backend::{Reference, RowBackend};
use ocelli_mpc::local::run_three_seeded;
use ocelli_mpc::pipeline::{evaluate, PipelineConfig};
use ocelli_mpc::requests::{
    outcomes, pipeline_requests, MatchRules, Outcome as NodeOutcome, PublicRequest, SerialId,
};
use ocelli_mpc::scratch::ScratchPool;
use ocelli_mpc::MatchDb;
use sdk_orb::plaintext::dot_products;
use sdk_orb::rotation::rotations;
use sdk_orb::shamir::share_eye;
use sdk_orb::template::IrisTemplate;
use sdk_orb::{EyeShares, PartyShares, PARTIES};

use crate::common::{rng, PackedTemplate};
use crate::envelope::RequestKind;
use crate::format::{expect_eq, Flag, Hex, Vector};
use crate::{Family, Sources};

mod generate;

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// A requests vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// The enrolled people, in increasing serial id order.
    Database {
        /// The people.
        people: Vec<Enrolled>,
    },
    /// One batch against a database.
    Batch {
        /// Id of the `database` vector.
        database: u32,
        /// `A = floor((1 - 2t) 2^16)`: an eye pair matches if `2^16 cd > A md` at some rotation.
        threshold_a: u32,
        /// Open only whether each request matched, not which entries or requests.
        privacy_max: bool,
        /// The pairwise PRF seeds: `prf_seeds[i]` is shared by parties `i` and `i+1`.
        prf_seeds: Vec<Hex>,
        /// The requests, in batch order.
        requests: Vec<Request>,
        /// The outcome of each request.
        outcomes: Vec<Outcome>,
    },
}

/// An enrolled person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Enrolled {
    /// The serial id.
    pub serial_id: u64,
    /// Left eye.
    pub left: PackedTemplate,
    /// Right eye.
    pub right: PackedTemplate,
    /// ChaCha20 seed of the share randomness: the left eye, then the right eye.
    pub share_seed: Hex,
}

/// A request of a batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The request type.
    pub request_type: RequestKind,
    /// Target serial id (deletion, reauth, reset), 0 if none.
    pub serial_id: u64,
    /// Either eye suffices instead of both.
    pub or_policy: bool,
    /// Left eye.
    pub left: PackedTemplate,
    /// Right eye.
    pub right: PackedTemplate,
    /// ChaCha20 seed of the share randomness: the left eye, then the right eye.
    pub share_seed: Hex,
}

/// What the nodes answer for one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Outcome {
    /// Uniqueness or uniqueness check: nothing matched.
    Unique,
    /// Uniqueness or uniqueness check: something matched.
    Match {
        /// Matching enrolled serial ids, increasing (empty in the privacy-max mode).
        entries: Vec<u64>,
        /// Matching earlier uniqueness requests of the batch, by index in `requests`
        /// (empty in the privacy-max mode).
        earlier: Vec<usize>,
    },
    /// Re-authentication: whether the request matches its serial id (false if that serial
    /// id is not enrolled).
    Reauth(bool),
    /// Deletion or reset: carried out; nothing is matched.
    Apply,
}

/// A person's two eyes.
type Person = (IrisTemplate, IrisTemplate);

/// The three parties' shares of a person from `share_seed`: `share_eye` on the left eye, then
/// on the right eye, with one ChaCha20 stream (as `seal_envelope` draws them).
fn shares_of(person: &Person, share_seed: &[u8; 32]) -> Vec<PartyShares> {
    let mut stream = rng(share_seed);
    let mut left: Box<[EyeShares; PARTIES]> = Box::new(core::array::from_fn(|_| EyeShares::zero()));
    let mut right: Box<[EyeShares; PARTIES]> =
        Box::new(core::array::from_fn(|_| EyeShares::zero()));
    share_eye(&mut stream, &person.0, &mut left);
    share_eye(&mut stream, &person.1, &mut right);
    (0..PARTIES)
        .map(|p| PartyShares {
            left: left[p].clone(),
            right: right[p].clone(),
        })
        .collect()
}

fn outcome_of(o: &NodeOutcome) -> Result<Outcome, String> {
    Ok(match o {
        NodeOutcome::Unique => Outcome::Unique,
        NodeOutcome::Match { entries, earlier } => Outcome::Match {
            entries: entries.iter().map(|s| s.0).collect(),
            earlier: earlier.clone(),
        },
        NodeOutcome::Reauth(m) => Outcome::Reauth(*m),
        NodeOutcome::Apply => Outcome::Apply,
        NodeOutcome::NotEvaluated => return Err("the node did not evaluate a request".into()),
        // The vectors pin the plain rules; mirror detection is off in their replay.
        NodeOutcome::MirrorAttack { .. } => return Err("mirror detection is off here".into()),
        NodeOutcome::Malformed => return Err("the vectors hold well-formed shares only".into()),
    })
}

/// An enrolled person, decoded.
struct Entry {
    serial_id: u64,
    person: Person,
    share_seed: [u8; 32],
}

/// A request, decoded.
struct Query {
    kind: RequestKind,
    serial_id: u64,
    or_policy: bool,
    person: Person,
    share_seed: [u8; 32],
}

/// A batch with its people decoded.
struct Batch {
    database: Vec<Entry>,
    requests: Vec<Query>,
    threshold_a: u32,
    privacy_max: bool,
    prf_seeds: [[u8; 32]; PARTIES],
}

/// Runs the batch as the three parties the way a node's evaluator does: each party stores its
/// shares of the database, builds the pipeline requests from the request types, runs the
/// pipeline and maps the opened bits to outcomes. The parties must agree.
fn run_nodes(batch: &Batch) -> Result<Vec<Outcome>, String> {
    let mut dbs: Vec<MatchDb> = (0..PARTIES).map(|_| MatchDb::new()).collect();
    for e in &batch.database {
        for (db, shares) in dbs.iter_mut().zip(shares_of(&e.person, &e.share_seed)) {
            db.insert(e.serial_id, &shares);
        }
    }
    let public: Vec<PublicRequest> = batch
        .requests
        .iter()
        .map(|q| PublicRequest {
            request_type: q.kind.sdk(),
            serial_id: SerialId(q.serial_id),
            or_policy: q.or_policy,
            or_serial_ids: Vec::new(),
        })
        .collect();
    let mut shares: Vec<Vec<Box<PartyShares>>> = (0..PARTIES).map(|_| Vec::new()).collect();
    for q in &batch.requests {
        for (party, s) in shares.iter_mut().zip(shares_of(&q.person, &q.share_seed)) {
            party.push(Box::new(s));
        }
    }
    let config = PipelineConfig {
        threshold_a: batch.threshold_a,
        privacy_max: batch.privacy_max,
        // Two entries per pass: the replay covers several database passes per batch.
        chunk_entries: 2,
        max_pass_comparisons: 1 << 20,
    };
    let engine = RowBackend(Reference);
    let out = run_three_seeded(&batch.prf_seeds, |s| {
        let i = s.party().index();
        let pipeline = pipeline_requests(&public, &shares[i], &dbs[i], &MatchRules::default());
        let results = evaluate(
            s,
            &engine,
            &dbs[i],
            &pipeline,
            &config,
            &ScratchPool::default(),
        )
        .map_err(|e| format!("party {i}: {e}"))?;
        Ok::<_, String>(outcomes(&public, &pipeline, results, &dbs[i]))
    });
    let mut per_party = Vec::new();
    for (result, _, _) in out {
        per_party.push(
            result?
                .iter()
                .map(outcome_of)
                .collect::<Result<Vec<_>, _>>()?,
        );
    }
    for p in 1..PARTIES {
        if per_party[p] != per_party[0] {
            return Err(format!("party {p} opened other outcomes than party 0"));
        }
    }
    Ok(per_party.swap_remove(0))
}

/// Each eye of a query, in all 31 rotations (index `k + 15`).
fn all_rotations(person: &Person) -> [Vec<IrisTemplate>; 2] {
    [&person.0, &person.1].map(|eye| rotations().map(|k| eye.rotated(k)).collect())
}

/// The plaintext rule: an eye matches if `2^16 cd > A md` at some rotation of the query; a
/// person matches if both eyes do (either eye under the OR policy).
fn person_matches(query: &[Vec<IrisTemplate>; 2], other: &Person, or_policy: bool, a: u32) -> bool {
    let eye = |rotated: &[IrisTemplate], e: &IrisTemplate| {
        rotated.iter().any(|q| dot_products(q, e).matches(a))
    };
    let (l, r) = (eye(&query[0], &other.0), eye(&query[1], &other.1));
    if or_policy {
        l || r
    } else {
        l && r
    }
}

/// The outcomes from the templates alone, written from the request-type semantics
/// (docs/design.md section 5): uniqueness and uniqueness checks match against every enrolled person and
/// the batch's earlier uniqueness requests (the enrolment candidates); a re-authentication
/// against its serial id only; deletions and resets are carried out unmatched. Matching sees
/// the database as it was before the batch. Also says whether some request matches an
/// earlier one (known here even in the privacy-max mode).
fn plaintext_outcomes(batch: &Batch) -> (Vec<Outcome>, bool) {
    let a = batch.threshold_a;
    let rotated: Vec<[Vec<IrisTemplate>; 2]> = batch
        .requests
        .iter()
        .map(|q| all_rotations(&q.person))
        .collect();
    let mut intra_batch = false;
    let outcomes = batch
        .requests
        .iter()
        .enumerate()
        .map(|(j, q)| match q.kind {
            RequestKind::Uniqueness | RequestKind::UniquenessCheck => {
                let entries: Vec<u64> = batch
                    .database
                    .iter()
                    .filter(|e| person_matches(&rotated[j], &e.person, q.or_policy, a))
                    .map(|e| e.serial_id)
                    .collect();
                let earlier: Vec<usize> = (0..j)
                    .filter(|&k| batch.requests[k].kind == RequestKind::Uniqueness)
                    .filter(|&k| {
                        person_matches(&rotated[j], &batch.requests[k].person, q.or_policy, a)
                    })
                    .collect();
                intra_batch |= !earlier.is_empty();
                if entries.is_empty() && earlier.is_empty() {
                    Outcome::Unique
                } else if batch.privacy_max {
                    Outcome::Match {
                        entries: vec![],
                        earlier: vec![],
                    }
                } else {
                    Outcome::Match { entries, earlier }
                }
            }
            RequestKind::Reauth => Outcome::Reauth(
                batch
                    .database
                    .iter()
                    .find(|e| e.serial_id == q.serial_id)
                    .is_some_and(|e| person_matches(&rotated[j], &e.person, q.or_policy, a)),
            ),
            RequestKind::Deletion | RequestKind::Reset => Outcome::Apply,
        })
        .collect();
    (outcomes, intra_batch)
}

/// Runs the nodes and the plaintext reference; they must agree. Returns the outcomes and
/// whether some request matches an earlier one.
fn evaluate_batch(batch: &Batch) -> Result<(Vec<Outcome>, bool), String> {
    let nodes = run_nodes(batch)?;
    let (reference, intra_batch) = plaintext_outcomes(batch);
    expect_eq(
        "node outcomes vs the plaintext reference",
        &nodes,
        &reference,
    )?;
    Ok((nodes, intra_batch))
}

fn person_of(left: &PackedTemplate, right: &PackedTemplate) -> Result<Person, String> {
    Ok((left.template()?, right.template()?))
}

fn seed32(h: &Hex, what: &str) -> Result<[u8; 32], String> {
    h.array::<32>(what)
}

/// The batch a vector describes, read from its fields (the generator reads its own output
/// back the same way).
fn decode(
    database: &[Enrolled],
    threshold_a: u32,
    privacy_max: bool,
    prf_seeds: &[Hex],
    requests: &[Request],
) -> Result<Batch, String> {
    let seeds: [Hex; PARTIES] = prf_seeds
        .to_vec()
        .try_into()
        .map_err(|_| format!("prf_seeds: {} seeds, expected 3", prf_seeds.len()))?;
    Ok(Batch {
        database: database
            .iter()
            .map(|e| {
                Ok(Entry {
                    serial_id: e.serial_id,
                    person: person_of(&e.left, &e.right)?,
                    share_seed: seed32(&e.share_seed, "share_seed")?,
                })
            })
            .collect::<Result<_, String>>()?,
        requests: requests
            .iter()
            .map(|r| {
                Ok(Query {
                    kind: r.request_type,
                    serial_id: r.serial_id,
                    or_policy: r.or_policy,
                    person: person_of(&r.left, &r.right)?,
                    share_seed: seed32(&r.share_seed, "share_seed")?,
                })
            })
            .collect::<Result<_, String>>()?,
        threshold_a,
        privacy_max,
        prf_seeds: [
            seed32(&seeds[0], "prf_seeds[0]")?,
            seed32(&seeds[1], "prf_seeds[1]")?,
            seed32(&seeds[2], "prf_seeds[2]")?,
        ],
    })
}

/// Serial ids of the database: positive and increasing.
fn check_database(people: &[Enrolled]) -> Result<(), String> {
    if people.is_empty() {
        return Err("an empty database".to_string());
    }
    let mut last = 0;
    for p in people {
        if p.serial_id <= last {
            return Err(format!(
                "serial id {} after {last}: serial ids must be positive and increasing",
                p.serial_id
            ));
        }
        last = p.serial_id;
    }
    Ok(())
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::Requests;
    const DESCRIPTION: &'static str = "Whole batches through the node's matching, run as the \
        three parties: a database of enrolled people (vector 1) and batches of requests of \
        every type under both eye policies, with the outcome of each request. People are \
        shared with the SDK from their seeds; the outcomes are semantic and equal the \
        plaintext reference (2^16 cd > A md at some rotation, per eye, AND or OR over the \
        eyes).";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        generate::vectors()
    }

    fn check_file(vectors: &[Vector<Case>]) -> Result<(), String> {
        for v in vectors {
            if let Case::Batch { database, .. } = &v.case {
                let target = vectors.iter().find(|x| x.id == *database);
                if !matches!(target.map(|t| &t.case), Some(Case::Database { .. })) {
                    return Err(format!(
                        "vector {}: database {database} is not a database vector",
                        v.id
                    ));
                }
            }
        }
        Ok(())
    }

    fn verify(vector: &Vector<Case>, all: &[Vector<Case>]) -> Result<(), String> {
        match &vector.case {
            Case::Database { people } => {
                check_database(people)?;
                for p in people {
                    person_of(&p.left, &p.right)?;
                    seed32(&p.share_seed, "share_seed")?;
                }
                Ok(())
            }
            Case::Batch {
                database,
                threshold_a,
                privacy_max,
                prf_seeds,
                requests,
                outcomes,
            } => {
                let Some(Case::Database { people }) =
                    all.iter().find(|x| x.id == *database).map(|x| &x.case)
                else {
                    return Err(format!("database {database} is not a database vector"));
                };
                check_database(people)?;
                let batch = decode(people, *threshold_a, *privacy_max, prf_seeds, requests)?;
                let (got, intra_batch) = evaluate_batch(&batch)?;
                expect_eq("outcomes", &got, outcomes)?;
                expect_eq(
                    "intra_batch flag",
                    &vector.flags.contains(&Flag::IntraBatch),
                    &intra_batch,
                )
            }
        }
    }
}

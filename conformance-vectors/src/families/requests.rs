//! `requests`: whole batches through the node's matching. Vector 1 is a database of enrolled
//! people; every other vector is a batch of requests against it, with the comparison values
//! each request's outcome is computed from and the outcome as the node reports it. Replay
//! shares every person with a seed derived from the vector id and its position, runs the batch
//! as the three parties through `ocelli_mpc` (the request-type mapping, pipeline and outcome
//! mapping a node's evaluator runs, CPU engine, in-memory network, PRF seeds derived from the
//! vector id) and checks the outcomes against the vector and against a plaintext reference
//! built on `sdk_orb::plaintext`, which also gives the comparison values.
//!
//! Every field reaches a check (prose aside, and a target serial id that nothing compares:
//! docs/conformance.md, `requests`): nothing the outcomes cannot depend on is stored
//! (the seeds are derived; a request compared with nothing has no template), and what could
//! change without changing an outcome has one canonical form (code bits 0 where the mask is
//! 0, `or_policy` false unless it changes the outcome, `serial_id` 0 exactly where the request
//! type names none) or is recorded (the comparison values, which every usable bit and
//! `threshold_a` move).

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use ocelli_mpc::backend::{Reference, RowBackend};
use ocelli_mpc::local::run_three_seeded;
use ocelli_mpc::pipeline::{evaluate, PipelineConfig};
use ocelli_mpc::requests::{
    outcomes, pipeline_requests, MatchRules, Outcome as NodeOutcome, PublicRequest, SerialId,
};
use ocelli_mpc::scratch::ScratchPool;
use ocelli_mpc::MatchDb;
use sdk_orb::shamir::share_eye;
use sdk_orb::template::{IrisBits, IrisTemplate, TemplatePolicy, DEFAULT_VERSION};
use sdk_orb::{EyeShares, PartyShares, CODE_BITS, PARTIES};

use crate::common::{rng, PackedTemplate};
use crate::envelope::RequestKind;
use crate::format::{expect_eq, Flag, HexU32, Vector};
use crate::{Family, Sources};

mod generate;
mod plaintext;

use plaintext::{plaintext, Plain};

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
        /// The requests, in batch order.
        requests: Vec<Request>,
        /// For each request, what it is compared with and the comparison values: entries in
        /// database order, then earlier uniqueness requests in batch order.
        comparisons: Vec<Vec<Comparison>>,
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
}

/// A request of a batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The request type.
    pub request_type: RequestKind,
    /// Target serial id (deletion, reauth, reset); 0 for uniqueness requests and checks.
    pub serial_id: u64,
    /// Either eye suffices instead of both; true only where that changes the outcome.
    pub or_policy: bool,
    /// Left eye; null exactly when the request is compared with nothing.
    pub left: Option<PackedTemplate>,
    /// Right eye; null exactly when the request is compared with nothing.
    pub right: Option<PackedTemplate>,
}

/// Who a request is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum With {
    /// The enrolled person with this serial id.
    Entry(u64),
    /// The earlier request of the batch at this index.
    Request(usize),
}

/// One comparison of a request, per eye: `x_k = A md_k - 2^16 cd_k` for the request's
/// template rotated by `k = -15..=15` against the other's (i32 values, as u32). The eye
/// matches iff some `x_k < 0`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Comparison {
    /// The other side.
    pub with: With,
    /// Left eyes, 31 values.
    pub left: HexU32,
    /// Right eyes, 31 values.
    pub right: HexU32,
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

const SHARE_SEED_LABEL: &[u8] = b"ocelli/vectors/requests/share-seed";
const PRF_SEED_LABEL: &[u8] = b"ocelli/vectors/requests/prf-seed";

/// The share seed of the person at `position` in `people` or `requests` of vector `id`:
/// `SHA-256(label || u32_le(id) || u32_le(position))`.
fn share_seed(id: u32, position: usize) -> Result<[u8; 32], String> {
    let position = u32::try_from(position).map_err(|_| "more than 2^32 people".to_string())?;
    Ok(Sha256::new()
        .chain_update(SHARE_SEED_LABEL)
        .chain_update(id.to_le_bytes())
        .chain_update(position.to_le_bytes())
        .finalize()
        .into())
}

/// The PRF seeds of batch `id`: `prf_seeds[i] = SHA-256(label || u32_le(id) || u8(i))`.
fn prf_seeds(id: u32) -> [[u8; 32]; PARTIES] {
    core::array::from_fn(|i| {
        Sha256::new()
            .chain_update(PRF_SEED_LABEL)
            .chain_update(id.to_le_bytes())
            .chain_update([i as u8])
            .finalize()
            .into()
    })
}

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

/// The template the nodes get for a request that carries none: every bit 0, nothing usable.
fn empty_person() -> Result<Person, String> {
    let t = IrisTemplate::new(
        IrisBits::zero(),
        IrisBits::zero(),
        DEFAULT_VERSION,
        &TemplatePolicy { min_usable_bits: 0 },
    )
    .map_err(|e| format!("the empty template: {e}"))?;
    Ok((t.clone(), t))
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
    /// `None` for a request compared with nothing.
    person: Option<Person>,
    share_seed: [u8; 32],
}

/// A batch with its people decoded and its seeds derived.
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
    let empty = empty_person()?;
    let mut shares: Vec<Vec<Box<PartyShares>>> = (0..PARTIES).map(|_| Vec::new()).collect();
    for q in &batch.requests {
        let person = q.person.as_ref().unwrap_or(&empty);
        for (party, s) in shares.iter_mut().zip(shares_of(person, &q.share_seed)) {
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

/// Runs the nodes and the plaintext reference; their outcomes must agree.
fn evaluate_batch(batch: &Batch) -> Result<Plain, String> {
    let plain = plaintext(batch)?;
    let nodes = run_nodes(batch)?;
    expect_eq(
        "node outcomes vs the plaintext reference",
        &nodes,
        &plain.outcomes,
    )?;
    Ok(plain)
}

/// A template as the vectors hold it: valid, and with every code bit 0 where the mask is 0
/// (those bits change nothing the nodes compute, so they have one form).
fn template_of(t: &PackedTemplate, what: &str) -> Result<IrisTemplate, String> {
    let template = t.template().map_err(|e| format!("{what}: {e}"))?;
    if let Some(i) = (0..CODE_BITS).find(|&i| template.code().get(i) && !template.mask().get(i)) {
        return Err(format!(
            "{what}.code: bit {i} is 1 where the mask is 0 (must be 0)"
        ));
    }
    Ok(template)
}

fn person_of(left: &PackedTemplate, right: &PackedTemplate, what: &str) -> Result<Person, String> {
    Ok((
        template_of(left, &format!("{what}.left"))?,
        template_of(right, &format!("{what}.right"))?,
    ))
}

/// The batch a vector describes, read from its fields, with the seeds derived from the ids
/// (the generator reads its own output back the same way).
fn decode(
    database: (u32, &[Enrolled]),
    batch_id: u32,
    threshold_a: u32,
    privacy_max: bool,
    requests: &[Request],
) -> Result<Batch, String> {
    if threshold_a > 1 << 16 {
        return Err(format!("threshold_a: {threshold_a}, above 2^16"));
    }
    let (database_id, people) = database;
    let database = people
        .iter()
        .enumerate()
        .map(|(i, e)| {
            Ok(Entry {
                serial_id: e.serial_id,
                person: person_of(&e.left, &e.right, &format!("database people[{i}]"))?,
                share_seed: share_seed(database_id, i)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let enrolled: Vec<u64> = database.iter().map(|e| e.serial_id).collect();
    let requests = requests
        .iter()
        .enumerate()
        .map(|(j, r)| {
            let what = format!("requests[{j}]");
            let names_serial = !matches!(
                r.request_type,
                RequestKind::Uniqueness | RequestKind::UniquenessCheck
            );
            if names_serial != (r.serial_id != 0) {
                return Err(format!(
                    "{what}.serial_id: {} for a {:?} request (set exactly for deletion, \
                     re-authentication and reset)",
                    r.serial_id, r.request_type
                ));
            }
            let compared = compared(r.request_type, r.serial_id, &enrolled);
            let person = match (&r.left, &r.right) {
                (Some(left), Some(right)) if compared => Some(person_of(left, right, &what)?),
                (None, None) if !compared => None,
                _ => {
                    return Err(format!(
                        "{what}.left, right: templates must be present exactly when the request \
                         is compared with someone ({})",
                        if compared { "it is" } else { "it is not" }
                    ))
                }
            };
            Ok(Query {
                kind: r.request_type,
                serial_id: r.serial_id,
                or_policy: r.or_policy,
                person,
                share_seed: share_seed(batch_id, j)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Batch {
        database,
        requests,
        threshold_a,
        privacy_max,
        prf_seeds: prf_seeds(batch_id),
    })
}

/// Whether a request is compared with anyone, and so carries templates: uniqueness requests
/// and checks always, a re-authentication if its serial id is `enrolled`.
fn compared(kind: RequestKind, serial_id: u64, enrolled: &[u64]) -> bool {
    match kind {
        RequestKind::Uniqueness | RequestKind::UniquenessCheck => true,
        RequestKind::Reauth => enrolled.contains(&serial_id),
        RequestKind::Deletion | RequestKind::Reset => false,
    }
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

/// The recorded comparisons against the reference's, naming the first value that differs.
fn check_comparisons(got: &[Vec<Comparison>], recorded: &[Vec<Comparison>]) -> Result<(), String> {
    expect_eq("comparisons: lists", &got.len(), &recorded.len())?;
    for (j, (got, recorded)) in got.iter().zip(recorded).enumerate() {
        expect_eq(
            &format!("comparisons[{j}]: count"),
            &got.len(),
            &recorded.len(),
        )?;
        for (c, (g, r)) in got.iter().zip(recorded).enumerate() {
            expect_eq(&format!("comparisons[{j}][{c}].with"), &g.with, &r.with)?;
            for (eye, g, r) in [("left", &g.left, &r.left), ("right", &g.right, &r.right)] {
                expect_eq(
                    &format!("comparisons[{j}][{c}].{eye}: values"),
                    &g.0.len(),
                    &r.0.len(),
                )?;
                if let Some((i, (x, y))) =
                    g.0.iter().zip(&r.0).enumerate().find(|(_, (x, y))| x != y)
                {
                    return Err(format!(
                        "comparisons[{j}][{c}].{eye}: x at rotation {}: got {}, expected {}",
                        i as i32 - 15,
                        *x as i32,
                        *y as i32
                    ));
                }
            }
        }
    }
    Ok(())
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::Requests;
    const DESCRIPTION: &'static str = "Whole batches through the node's matching, run as the \
        three parties: a database of enrolled people (vector 1) and batches of requests of \
        every type under both eye policies, with the comparison values x = A md - 2^16 cd of \
        each request at every rotation and the outcome of each request. People are shared \
        with the SDK from seeds derived from the vector id; the outcomes are semantic and \
        equal the plaintext reference (2^16 cd > A md at some rotation, per eye, AND or OR \
        over the eyes).";

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
                for (i, p) in people.iter().enumerate() {
                    person_of(&p.left, &p.right, &format!("people[{i}]"))?;
                }
                Ok(())
            }
            Case::Batch {
                database,
                threshold_a,
                privacy_max,
                requests,
                comparisons,
                outcomes,
            } => {
                let Some(Case::Database { people }) =
                    all.iter().find(|x| x.id == *database).map(|x| &x.case)
                else {
                    return Err(format!("database {database} is not a database vector"));
                };
                check_database(people)?;
                let batch = decode(
                    (*database, people),
                    vector.id,
                    *threshold_a,
                    *privacy_max,
                    requests,
                )?;
                let plain = evaluate_batch(&batch)?;
                check_comparisons(&plain.comparisons, comparisons)?;
                expect_eq("outcomes", &plain.outcomes, outcomes)?;
                expect_eq(
                    "intra_batch flag",
                    &vector.flags.contains(&Flag::IntraBatch),
                    &plain.intra_batch,
                )
            }
        }
    }
}

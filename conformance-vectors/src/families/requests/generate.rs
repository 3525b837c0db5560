//! Generation of the `requests` family: the people, the batches and what each batch is built
//! to show. The recorded outcomes come from running the batches (see [`super::evaluate_batch`]);
//! each plan's intended outcomes only check that the scenario does what its comment says.

use rand_chacha::ChaCha20Rng;
use rand_core::RngCore;

use ocelli_mpc::synthetic;
use sdk_orb::plaintext::{threshold_coefficient, DotProducts, DEFAULT_THRESHOLD};
use sdk_orb::template::{IrisBits, IrisTemplate, TemplatePolicy};

use super::plaintext::others;
use super::{
    compared, decode, evaluate_batch, Batch, Case, Enrolled, Outcome, Person, Request, With,
};
use crate::common::{self, rng, seed, PackedTemplate};
use crate::envelope::RequestKind;
use crate::format::{Flag, Hex, Vector};

/// `original` captured again: the code flipped at exactly `flips` of the bits usable in both
/// `original` and `mask` (the first `flips` of `order`), masked with `mask`, then rotated by
/// `offset` columns. At rotation `-offset` the pair has `md` = the common bits and
/// `cd = md - 2 flips`.
fn flipped(
    original: &IrisTemplate,
    mask: &IrisBits,
    order: &[usize],
    flips: usize,
    offset: i32,
) -> Result<IrisTemplate, String> {
    let mut code = original.code().clone();
    for &i in &order[..flips] {
        code.set(i, !code.get(i));
    }
    let t = IrisTemplate::new(
        code,
        mask.clone(),
        original.version(),
        &TemplatePolicy { min_usable_bits: 0 },
    )
    .map_err(|e| format!("re-capture: {e}"))?;
    Ok(t.rotated(offset))
}

/// Two re-captures of `original` on either side of the threshold `a`, one code bit apart: the
/// largest number of flipped bits that still matches, and one more. Fresh mask and rotation.
fn near_pair(
    r: &mut ChaCha20Rng,
    original: &IrisTemplate,
    a: u32,
) -> Result<(IrisTemplate, IrisTemplate), String> {
    let mask = synthetic::eye(r).mask().clone();
    let offset = (r.next_u32() % 21) as i32 - 10;
    let mut common: Vec<usize> = (0..sdk_orb::CODE_BITS)
        .filter(|&i| original.mask().get(i) && mask.get(i))
        .collect();
    // A seeded shuffle: which bits flip.
    for i in (1..common.len()).rev() {
        common.swap(i, (r.next_u32() as usize) % (i + 1));
    }
    let md = common.len() as u32;
    let inside = (0..common.len())
        .take_while(|&f| {
            DotProducts {
                cd: md as i32 - 2 * f as i32,
                md,
            }
            .matches(a)
        })
        .last()
        .unwrap_or(0);
    Ok((
        flipped(original, &mask, &common, inside, offset)?,
        flipped(original, &mask, &common, inside + 1, offset)?,
    ))
}

/// The generator's people, all from one seeded stream.
struct People {
    r: ChaCha20Rng,
}

impl People {
    fn person(&mut self) -> Person {
        (synthetic::eye(&mut self.r), synthetic::eye(&mut self.r))
    }

    fn recapture(&mut self, p: &Person) -> Person {
        (
            synthetic::recapture(&mut self.r, &p.0).0,
            synthetic::recapture(&mut self.r, &p.1).0,
        )
    }

    fn recapture_eye(&mut self, e: &IrisTemplate) -> IrisTemplate {
        synthetic::recapture(&mut self.r, e).0
    }
}

/// One planned batch: its requests and the outcomes the scenario is built to produce (checked
/// against what the nodes and the plaintext reference compute).
struct Plan {
    label: &'static str,
    comment: &'static str,
    flags: Vec<Flag>,
    privacy_max: bool,
    requests: Vec<(RequestKind, u64, bool, Person)>,
    intended: Vec<Outcome>,
}

fn matched(entries: &[u64], earlier: &[usize]) -> Outcome {
    Outcome::Match {
        entries: entries.to_vec(),
        earlier: earlier.to_vec(),
    }
}

/// The database's serial ids: the gap at 4 is a person deleted earlier.
const SERIALS: [u64; 4] = [1, 2, 3, 5];

/// The batches. Few and full: each batch re-shares the database and runs its own MPC session,
/// and the whole family must replay in seconds in a debug build.
fn plans(db: &[Person], people: &mut People, a: u32) -> Result<Vec<Plan>, String> {
    use RequestKind::{Deletion, Reauth, Reset, Uniqueness as U, UniquenessCheck as Check};
    let [pa, pb, pc, pd] = [&db[0], &db[1], &db[2], &db[3]];
    let x = people.person();
    let stranger_eye = people.person().1;
    let b_again = people.recapture(pb);
    let c_again = people.recapture(pc);
    let d_again = people.recapture(pd);
    let (c_left_in, c_left_out) = near_pair(&mut people.r, &pc.0, a)?;
    let (c_right_in, c_right_out) = near_pair(&mut people.r, &pc.1, a)?;
    let d_left_only = (people.recapture_eye(&pd.0), stranger_eye);
    let x_again = people.recapture(&x);
    let a_again = people.recapture(pa);
    let unique = Outcome::Unique;
    let hidden = matched(&[], &[]);
    Ok(vec![
        Plan {
            label: "uniqueness",
            comment: "uniqueness: an exact copy of serial 1, a re-capture of serial 2 (fresh \
                masks, rotated), a stranger; then checks with the left eye of serial 5 \
                re-captured and a stranger's right eye: no match under the AND policy, a \
                match under OR",
            flags: vec![Flag::Synthetic],
            privacy_max: false,
            requests: vec![
                (U, 0, false, pa.clone()),
                (U, 0, false, b_again.clone()),
                (U, 0, false, x.clone()),
                (Check, 0, false, d_left_only.clone()),
                (Check, 0, true, d_left_only.clone()),
            ],
            intended: vec![
                matched(&[1], &[]),
                matched(&[2], &[]),
                unique.clone(),
                unique.clone(),
                matched(&[5], &[]),
            ],
        },
        Plan {
            label: "near_threshold",
            comment: "uniqueness checks against serial 3, each eye one code bit inside or \
                outside the threshold (the most flipped bits that still match, and one more): \
                both inside, both outside, one of each under both policies",
            flags: vec![Flag::Synthetic, Flag::EdgeCase],
            privacy_max: false,
            requests: vec![
                (Check, 0, false, (c_left_in.clone(), c_right_in)),
                (Check, 0, false, (c_left_out, c_right_out.clone())),
                (Check, 0, false, (c_left_in.clone(), c_right_out.clone())),
                (Check, 0, true, (c_left_in, c_right_out)),
            ],
            intended: vec![
                matched(&[3], &[]),
                unique.clone(),
                unique.clone(),
                matched(&[3], &[]),
            ],
        },
        Plan {
            label: "reauth_deletion_reset",
            comment: "re-authentication of the right person, a stranger, the right person \
                against another serial id, a serial id that is not enrolled, one eye under \
                each policy; a deletion of serial 2 and a reset of serial 5, carried out and \
                not matched; a uniqueness request still matches serial 2 (matching sees the \
                database as it was before the batch)",
            flags: vec![Flag::Synthetic],
            privacy_max: false,
            requests: vec![
                (Reauth, 3, false, c_again.clone()),
                (Reauth, 3, false, x.clone()),
                (Reauth, 5, false, c_again.clone()),
                (Reauth, 4, false, pa.clone()),
                (Reauth, 5, true, d_left_only.clone()),
                (Reauth, 5, false, d_left_only.clone()),
                (Deletion, 2, false, pb.clone()),
                (Reset, 5, false, d_again),
                (U, 0, false, b_again),
            ],
            intended: vec![
                Outcome::Reauth(true),
                Outcome::Reauth(false),
                Outcome::Reauth(false),
                Outcome::Reauth(false),
                Outcome::Reauth(true),
                Outcome::Reauth(false),
                Outcome::Apply,
                Outcome::Apply,
                matched(&[2], &[]),
            ],
        },
        Plan {
            label: "intra_batch",
            comment: "a new person, their re-capture (matches the first request) and an exact \
                copy as a check (matches both earlier uniqueness requests); an exact copy of \
                serial 1 and its re-capture (serial 1 and the earlier request)",
            flags: vec![Flag::Synthetic, Flag::IntraBatch],
            privacy_max: false,
            requests: vec![
                (U, 0, false, x.clone()),
                (U, 0, false, x_again.clone()),
                (Check, 0, false, x.clone()),
                (U, 0, false, pa.clone()),
                (U, 0, false, a_again),
            ],
            intended: vec![
                unique.clone(),
                matched(&[], &[0]),
                matched(&[], &[0, 1]),
                matched(&[1], &[]),
                matched(&[1], &[3]),
            ],
        },
        Plan {
            label: "privacy_max",
            comment: "privacy-max: only whether each request matched is opened; a new person, \
                their re-capture (an intra-batch match) and a check with an exact copy of \
                serial 1",
            flags: vec![Flag::Synthetic, Flag::IntraBatch],
            privacy_max: true,
            requests: vec![
                (U, 0, false, x.clone()),
                (U, 0, false, x_again),
                (Check, 0, false, pa.clone()),
            ],
            intended: vec![unique.clone(), hidden.clone(), hidden.clone()],
        },
        Plan {
            label: "privacy_max_mixed",
            comment: "privacy-max with re-authentication (the right person, a stranger), one \
                eye of serial 5 under each policy, and a deletion",
            flags: vec![Flag::Synthetic],
            privacy_max: true,
            requests: vec![
                (Reauth, 3, false, c_again),
                (Reauth, 1, false, x),
                (Check, 0, true, d_left_only.clone()),
                (Check, 0, false, d_left_only),
                (Deletion, 5, false, pd.clone()),
            ],
            intended: vec![
                Outcome::Reauth(true),
                Outcome::Reauth(false),
                hidden,
                unique,
                Outcome::Apply,
            ],
        },
    ])
}

/// `t` packed with its code bits cleared where the mask is 0, the one form the vectors hold.
fn packed(t: &IrisTemplate) -> PackedTemplate {
    let mut code = t.code().clone();
    for i in 0..sdk_orb::CODE_BITS {
        if !t.mask().get(i) {
            code.set(i, false);
        }
    }
    PackedTemplate {
        code: Hex(common::packed(&code)),
        mask: Hex(common::packed(t.mask())),
    }
}

/// Bit positions of each eye that met a usable bit of another template at some rotation.
type Covered = [Vec<u64>; 2];

fn uncovered() -> Covered {
    [
        vec![0; sdk_orb::CODE_BITS / 64],
        vec![0; sdk_orb::CODE_BITS / 64],
    ]
}

/// Marks the positions of `a` (rotated by each `k`) and of `b` that meet a usable bit of the
/// other.
fn cover(a: &IrisTemplate, b: &IrisTemplate, covered_a: &mut [u64], covered_b: &mut [u64]) {
    for k in sdk_orb::rotation::rotations() {
        let (a_at_b, b_at_a) = (a.mask().rotated(k), b.mask().rotated(-k));
        for w in 0..covered_a.len() {
            covered_a[w] |= b_at_a.words()[w];
            covered_b[w] |= a_at_b.words()[w];
        }
    }
}

/// Records which bit positions the comparisons of `batch` read, in `database` for the
/// enrolled people, and checks that they read every position of every request that carries
/// a template: there a usable code bit changes `cd` and a mask bit pair changes `md` at some
/// recorded rotation, so a change of either changes a recorded comparison value.
fn check_coverage(batch: &Batch, database: &mut [Covered]) -> Result<(), String> {
    let mut requests: Vec<Covered> = batch.requests.iter().map(|_| uncovered()).collect();
    for j in 0..batch.requests.len() {
        let Some(query) = &batch.requests[j].person else {
            continue;
        };
        for (with, other) in others(batch, j) {
            let other = other.ok_or("a comparison with no template")?;
            let (mut q, mut o) = (uncovered(), uncovered());
            cover(&query.0, &other.0, &mut q[0], &mut o[0]);
            cover(&query.1, &other.1, &mut q[1], &mut o[1]);
            add(&mut requests[j], &q);
            match with {
                With::Entry(s) => {
                    let row = batch.database.iter().position(|e| e.serial_id == s);
                    add(&mut database[row.ok_or("a comparison with nobody")?], &o);
                }
                With::Request(k) => add(&mut requests[k], &o),
            }
        }
    }
    for (j, q) in batch.requests.iter().enumerate() {
        if q.person.is_some() {
            complete(&requests[j], &format!("requests[{j}]"))?;
        }
    }
    Ok(())
}

fn add(covered: &mut Covered, more: &Covered) {
    for (c, m) in covered.iter_mut().zip(more) {
        for (c, m) in c.iter_mut().zip(m) {
            *c |= m;
        }
    }
}

/// Every position of `eyes` is in `covered`.
fn complete(covered: &Covered, what: &str) -> Result<(), String> {
    match covered
        .iter()
        .position(|c| c.iter().any(|&w| w != u64::MAX))
    {
        Some(eye) => Err(format!("{what}: a bit of eye {eye} meets no usable bit")),
        None => Ok(()),
    }
}

fn enrolled(serial: u64, p: &Person) -> Enrolled {
    Enrolled {
        serial_id: serial,
        left: packed(&p.0),
        right: packed(&p.1),
    }
}

/// The family's vectors: the database, then one batch per plan, each run through the nodes
/// and the plaintext reference.
pub(super) fn vectors() -> Result<Vec<Vector<Case>>, String> {
    let a = threshold_coefficient(DEFAULT_THRESHOLD);
    let mut people = People {
        r: rng(&seed("requests/people")),
    };
    let db: Vec<Person> = SERIALS.iter().map(|_| people.person()).collect();
    let database: Vec<Enrolled> = SERIALS
        .iter()
        .zip(&db)
        .map(|(&s, p)| enrolled(s, p))
        .collect();
    let mut out = vec![(
        format!(
            "{} enrolled people, serial ids {SERIALS:?} (serial 4 was deleted earlier)",
            SERIALS.len()
        ),
        vec![Flag::Synthetic],
        Case::Database {
            people: database.clone(),
        },
    )];
    let mut covered: Vec<Covered> = db.iter().map(|_| uncovered()).collect();
    for (plan, id) in plans(&db, &mut people, a)?.into_iter().zip(2u32..) {
        let requests: Vec<Request> = plan
            .requests
            .iter()
            .map(|(kind, serial, or_policy, p)| {
                let compared = compared(*kind, *serial, &SERIALS);
                Request {
                    request_type: *kind,
                    serial_id: *serial,
                    or_policy: *or_policy,
                    left: compared.then(|| packed(&p.0)),
                    right: compared.then(|| packed(&p.1)),
                }
            })
            .collect();
        // Everything below reads the vector's own fields, as the replay does.
        let batch = decode((1, &database), id, a, plan.privacy_max, &requests)?;
        let plain = evaluate_batch(&batch).map_err(|e| format!("{}: {e}", plan.label))?;
        check_coverage(&batch, &mut covered).map_err(|e| format!("{}: {e}", plan.label))?;
        if plain.outcomes != plan.intended {
            return Err(format!(
                "{}: the batch does not do what it is built for: {:?}",
                plan.label, plain.outcomes
            ));
        }
        if plain.intra_batch != plan.flags.contains(&Flag::IntraBatch) {
            return Err(format!("{}: intra_batch flag", plan.label));
        }
        out.push((
            plan.comment.to_string(),
            plan.flags,
            Case::Batch {
                database: 1,
                threshold_a: a,
                privacy_max: plan.privacy_max,
                requests,
                comparisons: plain.comparisons,
                outcomes: plain.outcomes,
            },
        ));
    }
    for (i, c) in covered.iter().enumerate() {
        complete(c, &format!("people[{i}]"))?;
    }
    Ok(Vector::numbered(out))
}

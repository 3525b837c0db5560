//! The matching pipeline of one party for one batch (docs/design.md section 6, steps 2 to 7):
//! preprocess each query and expand its 31 rotations, run the dot products on an engine,
//! then the comparison phase in MPC, OR over rotations, the eye policy, and opening.
//!
//! Work is organised in passes. The first pass holds the comparisons that do not scan the
//! database: each request against the batch's earlier enrolment candidates (intra-batch
//! uniqueness) and re-authentication against one entry. Then the database is scanned in
//! chunks, every full-database request against every entry of the chunk. A pass is one
//! comparison-phase run, so its rounds carry the whole pass.
//!
//! Opened values: in the default mode, one bit per (request, target) pair; in the
//! privacy-max mode only one bit per request, the OR over all its targets. A request with
//! mirror detection also has its mirrored query ([`sdk_orb::mirror`]) compared with the
//! database; of those pairs only one bit per request is opened, their OR, after the last pass.
//!
//! The eye rule is public per pair ([`PairRules`]): AND by default, OR for an OR-policy request,
//! for the most recent database rows (lookback) and for rows the request names.

mod plan;
pub mod query;
mod reduce;

use sdk_orb::plaintext::threshold_coefficient;
use sdk_orb::shamir::PartyShares;
use sdk_orb::{PartyId, CODE_COEFS, MASK_COEFS};

pub use query::QueryMatrix;

use crate::backend::Backend;
use crate::bits::{plane_to_bits, words_for};
use crate::circuit::{Circuit, SharedBits};
use crate::db::{Eye, MatchDb, Part};
use crate::network::{NetworkError, Transport};
use crate::scratch::{ScratchPool, ScratchVec};
use crate::session::Session;
use plan::{Against, BatchPlan, FirstPass, Pair};
use reduce::run_pass;
use sdk_orb::rotation::ROTATION_COUNT;
use zeroize::Zeroizing;

/// What a request is matched against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Nothing (deletion, reset).
    Nothing,
    /// Every enrolled entry.
    Database,
    /// One enrolled entry, by its index in the [`MatchDb`].
    Entry(usize),
}

/// One request of the batch, as the pipeline sees it.
#[derive(Debug)]
pub struct PipelineRequest<'a> {
    /// This party's shares of the query.
    pub shares: &'a PartyShares,
    /// What to match against.
    pub target: Target,
    /// Match against the batch's earlier enrolment candidates too.
    pub against_earlier: bool,
    /// Later requests of the batch match against this one (it may be enrolled).
    pub candidate: bool,
    /// Either eye suffices.
    pub or_policy: bool,
    /// Which further pairs use the OR rule, and mirror detection.
    pub rules: PairRules,
}

impl<'a> PipelineRequest<'a> {
    /// A plain uniqueness check of `shares` against the whole database: both eyes must match,
    /// no batch candidates, no further rules.
    pub fn against_database(shares: &'a PartyShares) -> Self {
        PipelineRequest {
            shares,
            target: Target::Database,
            against_earlier: false,
            candidate: false,
            or_policy: false,
            rules: PairRules::default(),
        }
    }
}

/// Per-request pair rules beyond the request's own eye policy. All public: they only decide
/// which pairs are compared and which eye rule each pair uses, so they cost no extra round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PairRules {
    /// Also compare the mirrored query with the database and open whether any pair matched.
    pub mirror: bool,
    /// Database rows from this index on use the OR rule (the lookback window).
    pub or_from_row: Option<usize>,
    /// Further database rows that use the OR rule, sorted (named by the request).
    pub or_rows: Vec<usize>,
    /// The batch's earlier enrolment candidates use the OR rule (they are the most recent).
    pub or_earlier: bool,
}

impl PipelineRequest<'_> {
    /// Whether the pair against `against` uses the OR rule. Mirrored pairs keep the request's
    /// own policy: the lookback window is about re-enrolment with one eye replaced, not about
    /// mirrored captures.
    fn or_rule(&self, against: Against) -> bool {
        self.or_policy
            || match against {
                Against::Entry(d) => {
                    self.rules.or_from_row.is_some_and(|from| d >= from)
                        || self.rules.or_rows.binary_search(&d).is_ok()
                }
                Against::Earlier(_) => self.rules.or_earlier,
                Against::Mirror => false,
            }
    }
}

/// Pipeline settings; identical on the three nodes.
#[derive(Clone, Copy, Debug)]
pub struct PipelineConfig {
    /// `A = floor((1 - 2t) 2^16)`.
    pub threshold_a: u32,
    /// Open only the OR over all targets of each request.
    pub privacy_max: bool,
    /// Database entries per comparison pass, at most.
    pub chunk_entries: usize,
    /// Comparisons per pass, at most: bounds each party's memory (about 100
    /// bytes per comparison at the peak of the comparison phase) and the size of
    /// one round's message ([`LARGEST_MESSAGE_BYTES_PER_COMPARISON`]); see
    /// [`PipelineConfig::largest_message_bytes`] for the bound a transport must carry.
    pub max_pass_comparisons: usize,
}

/// Bytes per comparison of the largest message one party sends in a pass: the split of the
/// comparison phase ([`crate::compare::split`]), where parties 0 and 2 send one u16 for each of
/// `cd` and `md`, and party 1's binary input, one u32 bit plane per position. The other
/// messages are 2 bytes (the cross term) or at most 21 bit planes (the adder's first round);
/// a test measures all of them.
pub const LARGEST_MESSAGE_BYTES_PER_COMPARISON: usize = 4;

/// Comparisons a pass over `pairs` compared pairs carries: 31 rotations times two eyes of
/// `pairs`, each block padded to whole 64-bit words.
pub fn pass_comparisons(pairs: usize) -> usize {
    ROTATION_COUNT * 2 * words_for(pairs) * 64
}

/// The most comparisons per pass whose largest message fits in `cap` bytes: a whole number of
/// 64-pair blocks, so the padding adds nothing.
pub fn max_pass_comparisons_within(cap: usize) -> usize {
    let per_block = ROTATION_COUNT * 2 * 64 * LARGEST_MESSAGE_BYTES_PER_COMPARISON;
    (cap / per_block) * 64 * ROTATION_COUNT * 2
}

impl PipelineConfig {
    /// For threshold `t` on the fractional Hamming distance.
    pub fn with_threshold(t: f64) -> PipelineConfig {
        PipelineConfig {
            threshold_a: threshold_coefficient(t),
            privacy_max: false,
            chunk_entries: 4096,
            max_pass_comparisons: 1 << 20,
        }
    }

    /// The most pairs one pass compares in a batch of at most `max_batch` requests: the first
    /// pass (each request against the earlier ones and one entry, `B (B + 1) / 2`) or a
    /// database pass (`max_pass_comparisons / 62` pairs, but at least one entry for every
    /// scanning query, a mirrored one included).
    pub fn largest_pass_pairs(&self, max_batch: usize) -> usize {
        let first = max_batch.saturating_mul(max_batch.saturating_add(1)) / 2;
        let scan =
            (self.max_pass_comparisons / (ROTATION_COUNT * 2)).max(max_batch.saturating_mul(2));
        first.max(scan)
    }

    /// The largest message one party sends in any pass of a batch of at most `max_batch`
    /// requests, in bytes: what the transport between the parties must carry in one message.
    pub fn largest_message_bytes(&self, max_batch: usize) -> usize {
        pass_comparisons(self.largest_pass_pairs(max_batch))
            .saturating_mul(LARGEST_MESSAGE_BYTES_PER_COMPARISON)
    }
}

/// What was opened for one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MatchResult {
    /// Whether anything matched.
    pub any: bool,
    /// Matching database entries, by index (empty in the privacy-max mode).
    pub entries: Vec<usize>,
    /// Matching earlier requests of the batch, by index (empty in the privacy-max mode).
    pub earlier: Vec<usize>,
    /// Whether the mirrored query matched any database entry (mirror detection only).
    pub mirror: bool,
}

/// Per-pass accumulation of additive `(cd, md)` shares in the layout
/// `[rotation][eye][pair]`, each `[eye]` block padded to whole words. Zeroized on drop, and
/// kept in the executor's pool for the next pass ([`ScratchVec`]): a fresh pass-sized vector
/// costs more in page faults than filling it.
struct PassInputs {
    pairs: Vec<Pair>,
    cd: ScratchVec,
    md: ScratchVec,
    padded: usize,
}

impl PassInputs {
    fn new(pairs: Vec<Pair>, scratch: &ScratchPool) -> PassInputs {
        let padded = words_for(pairs.len()) * 64;
        let n = ROTATION_COUNT * 2 * padded;
        PassInputs {
            pairs,
            cd: scratch.zeroed(n),
            md: scratch.zeroed(n),
            padded,
        }
    }

    fn at(&self, rotation: usize, eye: Eye, pair: usize) -> usize {
        (rotation * 2 + eye.index()) * self.padded + pair
    }

    /// Stores one eye's engine output for `width` consecutive pairs starting at `first`:
    /// `code` and `mask` are `[rotation][pair]` with rotations `stride` apart, the mask dots
    /// not yet doubled.
    fn fill(
        &mut self,
        eye: Eye,
        (first, width, stride): (usize, usize, usize),
        code: &[u16],
        mask: &[u16],
    ) {
        for rotation in 0..ROTATION_COUNT {
            let at = self.at(rotation, eye, first);
            let row = rotation * stride..rotation * stride + width;
            self.cd[at..at + width].copy_from_slice(&code[row.clone()]);
            for (m, &v) in self.md[at..at + width].iter_mut().zip(&mask[row]) {
                *m = v.wrapping_mul(2);
            }
        }
    }
}

/// [`evaluate`] on the backend's own circuit ([`Backend::circuit`]): in host memory, or on
/// the device that holds the dot products. The results, messages and stream draws are the
/// same either way.
///
/// # Errors
/// Transport failures; then no result of the batch may be used.
pub fn evaluate_batch<B: Backend, T: Transport>(
    session: &mut Session<'_, T>,
    backend: &B,
    db: &MatchDb,
    requests: &[PipelineRequest<'_>],
    config: &PipelineConfig,
    scratch: &ScratchPool,
) -> Result<Vec<MatchResult>, NetworkError> {
    let mut circuit = backend.circuit(session);
    evaluate(&mut circuit, backend, db, requests, config, scratch)
}

/// Runs the pipeline for one batch on `circuit`; every party calls it with its own shares,
/// the same requests, the same database entries and the same configuration. The batch's
/// query matrices and pass inputs come from `scratch`, the pool of the caller's batches.
///
/// # Errors
/// Transport failures; then no result of the batch may be used.
pub fn evaluate<C: Circuit, B: Backend>(
    circuit: &mut C,
    engine: &B,
    db: &MatchDb,
    requests: &[PipelineRequest<'_>],
    config: &PipelineConfig,
    scratch: &ScratchPool,
) -> Result<Vec<MatchResult>, NetworkError> {
    let party = circuit.party();
    let mut plan = BatchPlan::new(requests, db.len(), config);
    // The first pass's pairs move into its inputs.
    let first = plan.first.take();
    let any_mirror = plan.scanning.iter().any(|q| q.mirrored);
    let mut results = vec![MatchResult::default(); requests.len()];
    // [request][..] OR accumulators: the plain pairs (privacy-max), then the mirrored pairs.
    let mut any_shared = circuit.zeros(2 * words_for(requests.len()));

    let people: Vec<_> = plan
        .scanning
        .iter()
        .map(|q| (requests[q.request].shares, q.mirrored))
        .collect();
    let prepare_scan = || QueryMatrix::new(party, &people, scratch).prepare_all(engine);
    let mut laid_out = plan.first_reads_scan.then(prepare_scan);
    // The scanning queries (laid out now if not yet) and the first span's dot products.
    let scan_setup = |queries: Option<EyeQueries<B>>| {
        let queries = queries.unwrap_or_else(prepare_scan);
        let first = database_span(engine, db, &plan, &queries, &plan.spans[0], scratch);
        (queries, first)
    };
    let scans = !plan.spans.is_empty();
    let overlap = engine.overlaps_passes();

    let mut rounds = |pass| {
        run_pass(
            circuit,
            pass,
            requests,
            config,
            &mut results,
            &mut any_shared,
        )
    };
    let from_scan = laid_out
        .as_ref()
        .map(|queries| (queries, plan.scan_row.as_slice()));
    let batch =
        first.map(|first| batch_pass(engine, db, requests, first, (party, scratch), from_scan));
    // The batch pass's rounds wait on the network while the database scan is set up (its
    // queries laid out, unless the batch pass took them already, and its first pass computed).
    let scan = std::thread::scope(|scope| {
        let ahead = (scans && overlap && batch.is_some()).then(|| {
            let queries = laid_out.take();
            move || scan_setup(queries)
        });
        beside(scope, ahead, || batch.map_or(Ok(()), &mut rounds))
    })?;
    if let Some((queries, first)) = scan.or_else(|| scans.then(|| scan_setup(laid_out.take()))) {
        let (plan, queries) = (&plan, &queries);
        let compute = |k: usize| database_span(engine, db, plan, queries, &plan.spans[k], scratch);
        std::thread::scope(|scope| -> Result<(), NetworkError> {
            let mut next = Some(first);
            for k in 0..plan.spans.len() {
                let current = next.take().expect("each span is computed before its turn");
                let following = (k + 1 < plan.spans.len()).then_some(k + 1);
                // The next span's dot products run while this span's rounds wait on the
                // network.
                let ahead = following.filter(|_| overlap).map(|k| move || compute(k));
                let computed = beside(scope, ahead, || {
                    current.into_iter().try_for_each(&mut rounds)
                })?;
                next = computed.or_else(|| following.map(compute));
            }
            Ok(())
        })?;
    }

    let rw = words_for(requests.len());
    if config.privacy_max || any_mirror {
        // One round: in the default mode only the mirror half is opened.
        let half = if config.privacy_max {
            0..2 * rw
        } else {
            rw..2 * rw
        };
        let opened = circuit.open(&any_shared.slice(half.clone()))?;
        let bits = plane_to_bits(&opened, (half.end - half.start) * 64);
        let base = if config.privacy_max { 0 } else { rw * 64 };
        for (j, r) in results.iter_mut().enumerate() {
            if config.privacy_max {
                r.any = bits[j];
            }
            r.mirror = bits[rw * 64 + j - base];
        }
    }
    Ok(results)
}

/// Runs `rounds` on this thread while `ahead` (if any) computes on a scoped thread, and returns
/// what it computed once both are done; a panic there resumes here.
fn beside<'scope, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    ahead: Option<impl FnOnce() -> T + Send + 'scope>,
    rounds: impl FnOnce() -> Result<(), NetworkError>,
) -> Result<Option<T>, NetworkError> {
    let handle = ahead.map(|work| scope.spawn(work));
    let ran = rounds();
    let computed = handle.map(|handle| {
        handle
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    ran?;
    Ok(computed)
}

/// The first pass's dot products ([`FirstPass`]): each request against the batch's earlier
/// enrolment candidates (intra-batch uniqueness) and against its single entry
/// (re-authentication). The candidates' raw shares form one contiguous matrix per eye; a
/// request's earlier candidates are a prefix of it.
///
/// `from_scan`: the scanning queries already laid out, with each request's row among the
/// plain ones, which lead them; where given, every request with earlier candidates must
/// have one.
fn batch_pass<B: Backend>(
    engine: &B,
    db: &MatchDb,
    requests: &[PipelineRequest<'_>],
    first: FirstPass,
    (party, scratch): (PartyId, &ScratchPool),
    from_scan: Option<(&EyeQueries<B>, &[Option<usize>])>,
) -> PassInputs {
    // Shares of the candidates' codes and masks, and below their products: zeroized on drop.
    let mut candidate_codes = [Zeroizing::new(Vec::new()), Zeroizing::new(Vec::new())];
    let mut candidate_masks = [Zeroizing::new(Vec::new()), Zeroizing::new(Vec::new())];
    for &k in &first.candidates {
        for (eye, e) in [&requests[k].shares.left, &requests[k].shares.right]
            .into_iter()
            .enumerate()
        {
            candidate_codes[eye].extend_from_slice(e.code.coefs());
            candidate_masks[eye].extend_from_slice(e.mask.coefs());
        }
    }
    let blocks = &first.blocks;
    let mut pass = PassInputs::new(first.pairs, scratch);
    // The queries: one row per request with pairs, in block order (none where the scanning
    // queries serve every pair).
    let own_rows = from_scan.is_none() || blocks.iter().any(|b| b.entry.is_some());
    let people: Vec<_> = blocks
        .iter()
        .filter(|_| own_rows)
        .map(|b| (requests[b.request].shares, false))
        .collect();
    let queries = QueryMatrix::new(party, &people, scratch);
    // Earlier candidates: the queries of every request that has some, in one run of the
    // query matrix, against all candidates in one backend call per eye and part (the backend
    // lays the candidates out once); each request takes its prefix.
    let with_earlier = || blocks.iter().enumerate().filter(|(_, b)| b.earlier > 0);
    let lo = with_earlier().map(|(i, _)| i).min();
    let hi = with_earlier().map(|(i, _)| i + 1).max();
    let n_candidates = first.candidates.len();
    for eye in Eye::BOTH {
        if let (Some(lo), Some(hi)) = (lo, hi) {
            // Query rows: the plain scanning queries up to the last one read, or the requests
            // `lo..hi`.
            let own;
            let (rows, [code_queries, mask_queries]) = match from_scan {
                Some((scan, scan_row)) => {
                    let last = with_earlier()
                        .filter_map(|(_, b)| scan_row[b.request])
                        .max()
                        .unwrap_or(0);
                    (
                        (last + 1) * ROTATION_COUNT,
                        [&scan[eye.index()][0], &scan[eye.index()][1]],
                    )
                }
                None => {
                    own = [Part::Code, Part::Mask]
                        .map(|part| queries.prepare(engine, eye, part, lo..hi));
                    ((hi - lo) * ROTATION_COUNT, [&own[0], &own[1]])
                }
            };
            let mut code_dots = Zeroizing::new(vec![0u16; rows * n_candidates]);
            let mut mask_dots = Zeroizing::new(vec![0u16; rows * n_candidates]);
            engine.dot_prepared_rows(
                code_queries,
                rows,
                &candidate_codes[eye.index()],
                CODE_COEFS,
                &mut code_dots,
            );
            engine.dot_prepared_rows(
                mask_queries,
                rows,
                &candidate_masks[eye.index()],
                MASK_COEFS,
                &mut mask_dots,
            );
            for (i, b) in with_earlier() {
                let row = match from_scan {
                    Some((_, scan_row)) => {
                        scan_row[b.request].expect("a request with earlier candidates scans")
                    }
                    None => i - lo,
                };
                let at = row * ROTATION_COUNT * n_candidates;
                pass.fill(
                    eye,
                    (b.first_pair, b.earlier, n_candidates),
                    &code_dots[at..],
                    &mask_dots[at..],
                );
            }
        }
        for (i, b) in blocks.iter().enumerate() {
            let Some(d) = b.entry else { continue };
            let q = i..i + 1;
            let mut code_dots = [0u16; ROTATION_COUNT];
            let mut mask_dots = [0u16; ROTATION_COUNT];
            for (part, dots) in [(Part::Code, &mut code_dots), (Part::Mask, &mut mask_dots)] {
                let prepared = queries.prepare(engine, eye, part, q.clone());
                engine.dot_db_prepared(&prepared, db, eye, part, d..d + 1, dots);
            }
            pass.fill(
                eye,
                (b.first_pair + b.earlier, 1, 1),
                &code_dots,
                &mask_dots,
            );
        }
    }
    pass
}

/// Queries laid out by the backend, `[eye][code, mask]`.
type EyeQueries<B> = [[<B as Backend>::Prepared; 2]; 2];

/// Consecutive database passes, every scanning request against the database rows of each
/// range of `passes`, from one engine call per eye and part over all their rows.
fn database_span<B: Backend>(
    engine: &B,
    db: &MatchDb,
    plan: &BatchPlan,
    queries: &EyeQueries<B>,
    passes: &[core::ops::Range<usize>],
    scratch: &ScratchPool,
) -> Vec<PassInputs> {
    let (Some(first), Some(last)) = (passes.first(), passes.last()) else {
        return Vec::new();
    };
    let span = first.start..last.end;
    let width = span.len();
    let mut inputs: Vec<PassInputs> = passes
        .iter()
        .map(|rows| PassInputs::new(plan.database_pairs(rows.clone()), scratch))
        .collect();
    let scanning = &plan.scanning;
    let query_rows = scanning.len() * ROTATION_COUNT;
    let mut code_dots = scratch.zeroed(query_rows * width);
    let mut mask_dots = scratch.zeroed(query_rows * width);
    for (eye, [codes, masks]) in Eye::BOTH.into_iter().zip(queries) {
        engine.dot_db_prepared(codes, db, eye, Part::Code, span.clone(), &mut code_dots);
        engine.dot_db_prepared(masks, db, eye, Part::Mask, span.clone(), &mut mask_dots);
        let block = ROTATION_COUNT * width;
        for (pass, rows) in inputs.iter_mut().zip(passes) {
            // The pass's columns of each query's rotations, rotations `width` apart.
            let (offset, w) = (rows.start - span.start, rows.len());
            for qi in 0..scanning.len() {
                let at = qi * block + offset;
                pass.fill(eye, (qi * w, w, width), &code_dots[at..], &mask_dots[at..]);
            }
        }
    }
    inputs
}

#[cfg(test)]
mod tests;

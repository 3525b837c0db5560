//! The batch plan: which queries scan the database, which pairs the first pass holds, which
//! database rows each later pass covers and which passes one backend call computes. Pure: it
//! reads only the requests' public roles, the database size and the configuration, so the
//! three parties make the same plan; the executor ([`super::evaluate`]) runs it.

use core::ops::Range;

use super::{PipelineConfig, PipelineRequest, Target};
use sdk_orb::rotation::ROTATION_COUNT;

/// What one compared pair holds the request against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Against {
    /// A database entry, by row.
    Entry(usize),
    /// An earlier enrolment candidate of the batch, by request index.
    Earlier(usize),
    /// A database entry against the request's mirrored query.
    Mirror,
}

/// One compared pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pair {
    /// The request, by index in the batch.
    pub request: usize,
    /// What it is compared with.
    pub against: Against,
}

/// A query that scans the database: a request's own, or its mirrored one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ScanQuery {
    /// The request, by index in the batch.
    pub request: usize,
    /// The mirrored query ([`sdk_orb::mirror`]).
    pub mirrored: bool,
}

/// One request's pairs in the first pass: its earlier candidates, then its single entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FirstPassBlock {
    /// The request, by index in the batch.
    pub request: usize,
    /// Its first pair's index in the pass.
    pub first_pair: usize,
    /// How many of the batch's candidates before it it is compared with (a prefix of them).
    pub earlier: usize,
    /// The database row it is compared with alone (re-authentication).
    pub entry: Option<usize>,
}

/// The first pass: the comparisons that do not scan the database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FirstPass {
    /// The pass's pairs, block after block.
    pub pairs: Vec<Pair>,
    /// The requests with pairs, in batch order.
    pub blocks: Vec<FirstPassBlock>,
    /// The batch's enrolment candidates, by request index, in batch order.
    pub candidates: Vec<usize>,
}

/// Database rows whose dot products one backend call computes, at least, where the passes
/// are shorter: a call over few rows pays its fixed costs for little work (figures:
/// docs/benchmarks.md, `dot_span`).
pub(crate) const DOT_SPAN_ROWS: usize = 512;

/// Passes whose dot products one backend call computes, at most: each pass's inputs (4 bytes
/// per comparison) are held from the call until the pass's turn.
pub(crate) const MAX_PASSES_PER_SPAN: usize = 4;

/// A batch's plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BatchPlan {
    /// The queries that scan the database, in the order the database passes hold them: the
    /// requests' own, then the mirrored ones.
    pub scanning: Vec<ScanQuery>,
    /// The first pass, if any pair needs it.
    pub first: Option<FirstPass>,
    /// Per request, its row among the scanning queries' plain rows (which lead them).
    pub scan_row: Vec<Option<usize>>,
    /// Whether the first pass reads its queries from the scanning queries' layout (made once
    /// for both kinds of pass) instead of laying out its own.
    pub first_reads_scan: bool,
    /// The database passes' rows, grouped by backend call.
    pub spans: Vec<Vec<Range<usize>>>,
}

impl BatchPlan {
    /// The plan for `requests` against `db_len` enrolled entries.
    pub fn new(requests: &[PipelineRequest<'_>], db_len: usize, config: &PipelineConfig) -> Self {
        let scans_database = |j: usize| requests[j].target == Target::Database;
        let mut scanning: Vec<ScanQuery> = (0..requests.len())
            .filter(|&j| scans_database(j))
            .map(|request| ScanQuery {
                request,
                mirrored: false,
            })
            .collect();
        let plain = scanning.len();
        scanning.extend(
            (0..requests.len())
                .filter(|&j| requests[j].rules.mirror && scans_database(j))
                .map(|request| ScanQuery {
                    request,
                    mirrored: true,
                }),
        );
        let mut scan_row = vec![None; requests.len()];
        for (row, q) in scanning[..plain].iter().enumerate() {
            scan_row[q.request] = Some(row);
        }
        let earlier = earlier_candidates(requests);
        let scans = !scanning.is_empty() && db_len > 0;
        // A request's rotations would otherwise be laid out twice per batch, a fixed cost
        // that small databases feel most.
        let first_reads_scan = scans
            && earlier.iter().any(|&e| e > 0)
            && earlier
                .iter()
                .zip(&scan_row)
                .all(|(&e, row)| e == 0 || row.is_some());
        let spans = if scans {
            database_spans(scanning.len(), db_len, config)
        } else {
            Vec::new()
        };
        BatchPlan {
            first: first_pass(requests, &earlier),
            scanning,
            scan_row,
            first_reads_scan,
            spans,
        }
    }

    /// The pairs of the database pass over `rows`: every scanning query against every row,
    /// query after query.
    pub fn database_pairs(&self, rows: Range<usize>) -> Vec<Pair> {
        self.scanning
            .iter()
            .flat_map(|q| {
                rows.clone().map(move |d| Pair {
                    request: q.request,
                    against: if q.mirrored {
                        Against::Mirror
                    } else {
                        Against::Entry(d)
                    },
                })
            })
            .collect()
    }
}

/// For each request, how many of the batch's enrolment candidates before it it is matched
/// against: all of them where it asks to be, none otherwise.
fn earlier_candidates(requests: &[PipelineRequest<'_>]) -> Vec<usize> {
    let mut seen = 0;
    requests
        .iter()
        .map(|r| {
            let earlier = if r.against_earlier { seen } else { 0 };
            seen += usize::from(r.candidate);
            earlier
        })
        .collect()
}

/// Each request against the batch's earlier candidates and its single entry; `None` if no
/// request has either.
fn first_pass(requests: &[PipelineRequest<'_>], earlier_of: &[usize]) -> Option<FirstPass> {
    let candidates: Vec<usize> = (0..requests.len())
        .filter(|&k| requests[k].candidate)
        .collect();
    let mut pairs = Vec::new();
    let mut blocks = Vec::new();
    for (request, r) in requests.iter().enumerate() {
        let first_pair = pairs.len();
        let earlier = earlier_of[request];
        pairs.extend(candidates[..earlier].iter().map(|&k| Pair {
            request,
            against: Against::Earlier(k),
        }));
        let entry = match r.target {
            Target::Entry(d) => Some(d),
            _ => None,
        };
        if let Some(d) = entry {
            pairs.push(Pair {
                request,
                against: Against::Entry(d),
            });
        }
        if pairs.len() > first_pair {
            blocks.push(FirstPassBlock {
                request,
                first_pair,
                earlier,
                entry,
            });
        }
    }
    (!pairs.is_empty()).then_some(FirstPass {
        pairs,
        blocks,
        candidates,
    })
}

/// The database passes of `queries` scanning queries over `db_len` rows: chunks of at most
/// `chunk_entries` rows and `max_pass_comparisons` comparisons (at least one row), grouped so
/// that one backend call covers at least [`DOT_SPAN_ROWS`] rows and at most
/// [`MAX_PASSES_PER_SPAN`] passes.
fn database_spans(
    queries: usize,
    db_len: usize,
    config: &PipelineConfig,
) -> Vec<Vec<Range<usize>>> {
    let per_entry = queries * ROTATION_COUNT * 2;
    let chunk = config
        .chunk_entries
        .min(config.max_pass_comparisons / per_entry.max(1))
        .max(1);
    let passes: Vec<Range<usize>> = (0..db_len)
        .step_by(chunk)
        .map(|start| start..(start + chunk).min(db_len))
        .collect();
    let span = DOT_SPAN_ROWS.div_ceil(chunk).clamp(1, MAX_PASSES_PER_SPAN);
    passes.chunks(span).map(<[_]>::to_vec).collect()
}

#[cfg(test)]
mod tests;

use super::*;
use crate::pipeline::PairRules;
use crate::synthetic;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use sdk_orb::shamir::PartyShares;

fn config(chunk_entries: usize, max_pass_comparisons: usize) -> PipelineConfig {
    let mut c = PipelineConfig::with_threshold(0.345);
    c.chunk_entries = chunk_entries;
    c.max_pass_comparisons = max_pass_comparisons;
    c
}

fn request(
    shares: &PartyShares,
    target: Target,
    candidate: bool,
    mirror: bool,
) -> PipelineRequest<'_> {
    PipelineRequest {
        shares,
        target,
        against_earlier: candidate,
        candidate,
        or_policy: false,
        rules: PairRules {
            mirror,
            ..PairRules::default()
        },
    }
}

/// A batch of every role: enrolment candidates (one with mirror detection), a
/// re-authentication, a deletion.
fn batch(shares: &PartyShares) -> Vec<PipelineRequest<'_>> {
    vec![
        request(shares, Target::Database, true, false),
        request(shares, Target::Entry(4), false, false),
        request(shares, Target::Database, true, true),
        request(shares, Target::Nothing, false, false),
        request(shares, Target::Database, true, false),
    ]
}

#[test]
fn the_scanning_queries_are_the_plain_ones_then_the_mirrored_ones() {
    let shares = synthetic::random_shares(&mut ChaCha20Rng::seed_from_u64(1));
    let plan = BatchPlan::new(&batch(&shares), 10, &config(4096, 1 << 20));
    let scan = |request, mirrored| ScanQuery { request, mirrored };
    assert_eq!(
        plan.scanning,
        vec![
            scan(0, false),
            scan(2, false),
            scan(4, false),
            scan(2, true)
        ]
    );
    assert_eq!(plan.scan_row, vec![Some(0), None, Some(1), None, Some(2)]);
    let earlier: Vec<(usize, usize)> = plan
        .first
        .iter()
        .flat_map(|f| f.blocks.iter().map(|b| (b.request, b.earlier)))
        .collect();
    assert_eq!(earlier, vec![(1, 0), (2, 1), (4, 2)]);
    // Every request with earlier candidates scans: the first pass reads the scan's layout.
    assert!(plan.first_reads_scan);
}

#[test]
fn the_first_pass_holds_earlier_candidates_then_the_single_entry() {
    let shares = synthetic::random_shares(&mut ChaCha20Rng::seed_from_u64(2));
    let plan = BatchPlan::new(&batch(&shares), 10, &config(4096, 1 << 20));
    let first = plan.first.expect("candidates and an entry");
    assert_eq!(first.candidates, vec![0, 2, 4]);
    let pair = |request, against| Pair { request, against };
    assert_eq!(
        first.pairs,
        vec![
            pair(1, Against::Entry(4)),
            pair(2, Against::Earlier(0)),
            pair(4, Against::Earlier(0)),
            pair(4, Against::Earlier(2)),
        ]
    );
    let block = |request, first_pair, earlier, entry| FirstPassBlock {
        request,
        first_pair,
        earlier,
        entry,
    };
    assert_eq!(
        first.blocks,
        vec![
            block(1, 0, 0, Some(4)),
            block(2, 1, 1, None),
            block(4, 2, 2, None)
        ]
    );
}

#[test]
fn database_passes_cover_every_row_once_within_the_pass_bound() {
    let shares = synthetic::random_shares(&mut ChaCha20Rng::seed_from_u64(3));
    let requests = batch(&shares);
    // Four scanning queries: 4 * 31 * 2 = 248 comparisons per row, so 4,000 allow 16 rows.
    for (db_len, chunk_entries, max_pass, chunk) in [
        (100, 4096, 4_000, 16),
        (100, 7, 4_000, 7),
        (3, 4096, 4_000, 3),
        (50, 4096, 10, 1),
    ] {
        let plan = BatchPlan::new(&requests, db_len, &config(chunk_entries, max_pass));
        let passes: Vec<Range<usize>> = plan.spans.iter().flatten().cloned().collect();
        let mut next = 0;
        for rows in &passes {
            assert_eq!(rows.start, next, "{db_len} rows, chunk {chunk}");
            assert!(!rows.is_empty() && rows.len() <= chunk);
            next = rows.end;
        }
        assert_eq!(next, db_len);
        // One backend call covers at least DOT_SPAN_ROWS rows, in at most
        // MAX_PASSES_PER_SPAN passes; the last call takes what is left.
        let per_span = DOT_SPAN_ROWS.div_ceil(chunk).clamp(1, MAX_PASSES_PER_SPAN);
        let (last, full) = plan.spans.split_last().expect("a span");
        assert!(full.iter().all(|span| span.len() == per_span));
        assert!(!last.is_empty() && last.len() <= per_span);
        let pairs = plan.database_pairs(passes[0].clone());
        assert_eq!(pairs.len(), plan.scanning.len() * passes[0].len());
        assert_eq!(
            pairs.last().map(|p| p.against),
            Some(Against::Mirror),
            "the mirrored query's pairs come last"
        );
    }
}

#[test]
fn without_a_database_or_scanning_query_there_is_no_database_pass() {
    let shares = synthetic::random_shares(&mut ChaCha20Rng::seed_from_u64(4));
    let empty = BatchPlan::new(&batch(&shares), 0, &config(4096, 1 << 20));
    assert!(empty.spans.is_empty() && !empty.first_reads_scan);
    let reauth = [request(&shares, Target::Entry(0), false, false)];
    let plan = BatchPlan::new(&reauth, 10, &config(4096, 1 << 20));
    assert!(plan.spans.is_empty() && plan.scanning.is_empty());
    assert_eq!(plan.first.map(|f| f.pairs.len()), Some(1));
    let nothing = [request(&shares, Target::Nothing, false, false)];
    assert_eq!(
        BatchPlan::new(&nothing, 10, &config(4096, 1 << 20)).first,
        None
    );
}

#[test]
fn a_candidate_that_does_not_scan_makes_the_first_pass_lay_out_its_own_queries() {
    let shares = synthetic::random_shares(&mut ChaCha20Rng::seed_from_u64(5));
    let mut requests = batch(&shares);
    // Request 1 now has earlier candidates but targets one entry: it has no scan row.
    requests[1].against_earlier = true;
    let plan = BatchPlan::new(&requests, 10, &config(4096, 1 << 20));
    let block = plan.first.as_ref().map(|f| f.blocks[0]);
    assert_eq!(block.map(|b| (b.request, b.earlier)), Some((1, 1)));
    assert!(!plan.first_reads_scan);
}

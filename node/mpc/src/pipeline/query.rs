//! A batch's queries as one party holds them: both eyes preprocessed (Lagrange coefficient,
//! basis B); the queries the first pass reads expanded into their 31 rotations, the
//! database-scanning ones handed to the dot engine unrotated
//! ([`DotEngine::prepare_rotations`]).

use rayon::prelude::*;
use sdk_orb::preprocess::preprocess_coefs;
use sdk_orb::rotation::{rotate_coefs, rotations, ROTATION_COUNT};
use sdk_orb::shamir::PartyShares;
use sdk_orb::{PartyId, CODE_COEFS, MASK_COEFS};
use zeroize::{Zeroize, Zeroizing};

use crate::dot::{DotEngine, PreparedQueries};
use crate::scratch::ScratchVec;

/// Prepared queries. Per eye, one matrix of codes and one of trimmed masks of the first
/// pass's queries: query `i`'s 31 rotations are rows `31 i..31 (i + 1)`, rotation `k` at row
/// `31 i + k + 15`, so consecutive queries are one contiguous run of rows and one engine call
/// covers them. Per eye, the same for the database-scanning queries, one unrotated row each.
/// Zeroized on drop.
pub struct QueryMatrix {
    codes: [ScratchVec; 2],
    masks: [ScratchVec; 2],
    scan_codes: [ScratchVec; 2],
    scan_masks: [ScratchVec; 2],
}

impl core::fmt::Debug for QueryMatrix {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QueryMatrix").finish_non_exhaustive()
    }
}

/// Preprocesses `share` for `party` and writes its rotations into `out`, rotation-major.
fn expand_into(party: PartyId, share: &[u16], out: &mut [u16]) {
    let len = share.len();
    let mut base = Zeroizing::new(share.to_vec());
    preprocess_coefs(party, &mut base);
    for (i, k) in rotations().enumerate() {
        rotate_coefs(&base, k, &mut out[i * len..(i + 1) * len]);
    }
}

/// Preprocesses `share` for `party` into `out`.
fn preprocess_into(party: PartyId, share: &[u16], out: &mut [u16]) {
    out.copy_from_slice(share);
    preprocess_coefs(party, out);
}

impl QueryMatrix {
    /// `party`'s queries: `scanning` for the database passes, in order, a person flagged
    /// `true` queried mirrored ([`sdk_orb::mirror::mirror_person`]: a permutation and
    /// negation of whole ring elements, so it is done on the raw shares before
    /// preprocessing, with no communication); `first_pass` with their rotations, in order.
    /// Queries are prepared in parallel.
    pub fn new(
        party: PartyId,
        scanning: &[(&PartyShares, bool)],
        first_pass: &[&PartyShares],
    ) -> QueryMatrix {
        let matrix = |rows: usize, coefs| ScratchVec::zeroed(rows * coefs);
        let scan = scanning.len();
        let mut scan_codes = [matrix(scan, CODE_COEFS), matrix(scan, CODE_COEFS)];
        let mut scan_masks = [matrix(scan, MASK_COEFS), matrix(scan, MASK_COEFS)];
        let [c0, c1] = &mut scan_codes;
        let [m0, m1] = &mut scan_masks;
        c0.par_chunks_mut(CODE_COEFS)
            .zip(c1.par_chunks_mut(CODE_COEFS))
            .zip(m0.par_chunks_mut(MASK_COEFS))
            .zip(m1.par_chunks_mut(MASK_COEFS))
            .zip(scanning.par_iter())
            .for_each(|((((c0, c1), m0), m1), &(shares, mirror))| {
                let mut mirrored = mirror.then(|| sdk_orb::mirror::mirror_person(shares));
                let person = mirrored.as_ref().unwrap_or(shares);
                preprocess_into(party, person.left.code.coefs(), c0);
                preprocess_into(party, person.right.code.coefs(), c1);
                preprocess_into(party, person.left.mask.coefs(), m0);
                preprocess_into(party, person.right.mask.coefs(), m1);
                if let Some(m) = mirrored.as_mut() {
                    m.zeroize();
                }
            });

        let rows = first_pass.len() * ROTATION_COUNT;
        let mut codes = [matrix(rows, CODE_COEFS), matrix(rows, CODE_COEFS)];
        let mut masks = [matrix(rows, MASK_COEFS), matrix(rows, MASK_COEFS)];
        let [c0, c1] = &mut codes;
        let [m0, m1] = &mut masks;
        let (code_rows, mask_rows) = (ROTATION_COUNT * CODE_COEFS, ROTATION_COUNT * MASK_COEFS);
        c0.par_chunks_mut(code_rows)
            .zip(c1.par_chunks_mut(code_rows))
            .zip(m0.par_chunks_mut(mask_rows))
            .zip(m1.par_chunks_mut(mask_rows))
            .zip(first_pass.par_iter())
            .for_each(|((((c0, c1), m0), m1), person)| {
                expand_into(party, person.left.code.coefs(), c0);
                expand_into(party, person.right.code.coefs(), c1);
                expand_into(party, person.left.mask.coefs(), m0);
                expand_into(party, person.right.mask.coefs(), m1);
            });
        QueryMatrix {
            codes,
            masks,
            scan_codes,
            scan_masks,
        }
    }

    /// The code rotations of `queries` for one eye, query- then rotation-major.
    pub fn codes(&self, eye: usize, queries: core::ops::Range<usize>) -> &[u16] {
        let row = ROTATION_COUNT * CODE_COEFS;
        &self.codes[eye][queries.start * row..queries.end * row]
    }

    /// The trimmed-mask rotations of `queries` for one eye, query- then rotation-major.
    pub fn masks(&self, eye: usize, queries: core::ops::Range<usize>) -> &[u16] {
        let row = ROTATION_COUNT * MASK_COEFS;
        &self.masks[eye][queries.start * row..queries.end * row]
    }

    /// The database-scanning queries, laid out by `engine` for the database passes, per
    /// eye `[codes, masks]`. Each matrix is handed over as it is laid out, so at most one
    /// exists twice at a time.
    pub fn prepare_scanning(self, engine: &dyn DotEngine) -> [[PreparedQueries; 2]; 2] {
        let QueryMatrix {
            scan_codes,
            scan_masks,
            ..
        } = self;
        let mut prepared = scan_codes.into_iter().zip(scan_masks).map(|(code, mask)| {
            [
                engine.prepare_rotations(code, CODE_COEFS),
                engine.prepare_rotations(mask, MASK_COEFS),
            ]
        });
        let left = prepared.next().expect("two eyes");
        let right = prepared.next().expect("two eyes");
        [left, right]
    }
}

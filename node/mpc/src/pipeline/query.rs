//! A batch's queries as one party holds them: both eyes preprocessed (Lagrange coefficient,
//! basis B) and expanded into the 31 rotations, written straight into the matrices the dot
//! engine reads.

use rayon::prelude::*;
use sdk_orb::preprocess::preprocess_coefs;
use sdk_orb::rotation::{rotate_coefs, rotations, ROTATION_COUNT};
use sdk_orb::shamir::PartyShares;
use sdk_orb::{PartyId, CODE_COEFS, MASK_COEFS};
use zeroize::{Zeroize, Zeroizing};

use crate::dot::{DotEngine, PreparedQueries};
use crate::scratch::ScratchVec;

/// Prepared queries, per eye one matrix of codes and one of trimmed masks: query `i`'s 31
/// rotations are rows `31 i..31 (i + 1)`, rotation `k` at row `31 i + k + 15`. Consecutive
/// queries are one contiguous run of rows, so one engine call covers them. Zeroized on drop.
pub struct QueryMatrix {
    codes: [ScratchVec; 2],
    masks: [ScratchVec; 2],
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

impl QueryMatrix {
    /// `party`'s queries of `people`, in order; a person flagged `true` is queried mirrored
    /// ([`sdk_orb::mirror::mirror_person`]): mirroring is a permutation and negation of whole
    /// ring elements, so it is done on the raw shares before preprocessing, with no
    /// communication. Queries are prepared in parallel.
    pub fn new(party: PartyId, people: &[(&PartyShares, bool)]) -> QueryMatrix {
        let rows = people.len() * ROTATION_COUNT;
        let matrix = |coefs| ScratchVec::zeroed(rows * coefs);
        let mut codes = [matrix(CODE_COEFS), matrix(CODE_COEFS)];
        let mut masks = [matrix(MASK_COEFS), matrix(MASK_COEFS)];
        let [c0, c1] = &mut codes;
        let [m0, m1] = &mut masks;
        let (code_rows, mask_rows) = (ROTATION_COUNT * CODE_COEFS, ROTATION_COUNT * MASK_COEFS);
        c0.par_chunks_mut(code_rows)
            .zip(c1.par_chunks_mut(code_rows))
            .zip(m0.par_chunks_mut(mask_rows))
            .zip(m1.par_chunks_mut(mask_rows))
            .zip(people.par_iter())
            .for_each(|((((c0, c1), m0), m1), &(shares, mirror))| {
                let mut mirrored = mirror.then(|| sdk_orb::mirror::mirror_person(shares));
                let person = mirrored.as_ref().unwrap_or(shares);
                expand_into(party, person.left.code.coefs(), c0);
                expand_into(party, person.right.code.coefs(), c1);
                expand_into(party, person.left.mask.coefs(), m0);
                expand_into(party, person.right.mask.coefs(), m1);
                if let Some(m) = mirrored.as_mut() {
                    m.zeroize();
                }
            });
        QueryMatrix { codes, masks }
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

    /// The first `queries` queries, laid out by `engine` for the database passes, per eye
    /// `[codes, masks]`. Each matrix is handed over as it is laid out, so at most one exists
    /// twice at a time.
    pub fn prepare_scanning(
        self,
        engine: &dyn DotEngine,
        queries: usize,
    ) -> [[PreparedQueries; 2]; 2] {
        let QueryMatrix { codes, masks } = self;
        let mut prepared = codes.into_iter().zip(masks).map(|(mut code, mut mask)| {
            code.truncate(queries * ROTATION_COUNT * CODE_COEFS);
            mask.truncate(queries * ROTATION_COUNT * MASK_COEFS);
            [
                engine.prepare_queries(code, CODE_COEFS),
                engine.prepare_queries(mask, MASK_COEFS),
            ]
        });
        let left = prepared.next().expect("two eyes");
        let right = prepared.next().expect("two eyes");
        [left, right]
    }
}

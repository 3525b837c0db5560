//! A batch's queries as one party holds them: both eyes preprocessed (Lagrange coefficient,
//! basis B), one unrotated row each; the dot engine prepares their 31 rotations in its own
//! layout ([`Backend::prepare_rotations`]).

use rayon::prelude::*;
use sdk_orb::preprocess::preprocess_coefs;
use sdk_orb::shamir::PartyShares;
use sdk_orb::{PartyId, CODE_COEFS, MASK_COEFS};
use zeroize::Zeroize;

use crate::backend::Backend;
use crate::db::{Eye, Part};
use crate::scratch::{ScratchPool, ScratchVec};

/// One party's queries for a pass kind (the first pass's, or the database-scanning ones),
/// both eyes preprocessed (Lagrange coefficient, basis B), one unrotated row per query per
/// eye and part, in order. Zeroized on drop.
pub struct QueryMatrix {
    /// `[eye][code, mask]`: a matrix of each, a row per query.
    eyes: [[ScratchVec; 2]; 2],
}

impl core::fmt::Debug for QueryMatrix {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QueryMatrix").finish_non_exhaustive()
    }
}

/// Preprocesses `share` for `party` into `out`.
fn preprocess_into(party: PartyId, share: &[u16], out: &mut [u16]) {
    out.copy_from_slice(share);
    preprocess_coefs(party, out);
}

impl QueryMatrix {
    /// `party`'s queries of `people`, in order, in parallel; a person flagged `true` is
    /// queried mirrored ([`sdk_orb::mirror::mirror_person`]: a permutation and negation of
    /// whole ring elements, so it is done on the raw shares before preprocessing, with no
    /// communication). The matrices come from `scratch`.
    pub fn new(
        party: PartyId,
        people: &[(&PartyShares, bool)],
        scratch: &ScratchPool,
    ) -> QueryMatrix {
        let matrix = |coefs| scratch.zeroed(people.len() * coefs);
        let mut eyes = [
            [matrix(CODE_COEFS), matrix(MASK_COEFS)],
            [matrix(CODE_COEFS), matrix(MASK_COEFS)],
        ];
        let [[c0, m0], [c1, m1]] = &mut eyes;
        c0.par_chunks_mut(CODE_COEFS)
            .zip(c1.par_chunks_mut(CODE_COEFS))
            .zip(m0.par_chunks_mut(MASK_COEFS))
            .zip(m1.par_chunks_mut(MASK_COEFS))
            .zip(people.par_iter())
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
        QueryMatrix { eyes }
    }

    /// One eye's `part`: a row per query.
    fn matrix(&self, eye: Eye, part: Part) -> &ScratchVec {
        match part {
            Part::Code => &self.eyes[eye.index()][0],
            Part::Mask => &self.eyes[eye.index()][1],
        }
    }

    /// Query `i` of one eye's `part`, preprocessed and unrotated.
    pub fn row(&self, eye: Eye, part: Part, i: usize) -> &[u16] {
        let len = part.coefs();
        &self.matrix(eye, part)[i * len..(i + 1) * len]
    }

    /// The queries `queries` of one eye's `part`, their rotations prepared by `engine`:
    /// rotation `k` of the `i`-th at row `31 i + k + 15`.
    pub fn prepare<B: Backend>(
        &self,
        engine: &B,
        eye: Eye,
        part: Part,
        queries: core::ops::Range<usize>,
    ) -> B::Prepared {
        let len = part.coefs();
        let matrix = self.matrix(eye, part);
        let rows = &matrix[queries.start * len..queries.end * len];
        let mut copy = matrix.zeroed_like(rows.len());
        copy.copy_from_slice(rows);
        engine.prepare_rotations(copy, len)
    }

    /// Every query, its rotations prepared by `engine` (for the database passes), per eye
    /// `[codes, masks]`. Each matrix is handed over as it is laid out, so at most one exists
    /// twice at a time.
    pub fn prepare_all<B: Backend>(self, engine: &B) -> [[B::Prepared; 2]; 2] {
        self.eyes.map(|[code, mask]| {
            [
                engine.prepare_rotations(code, CODE_COEFS),
                engine.prepare_rotations(mask, MASK_COEFS),
            ]
        })
    }
}

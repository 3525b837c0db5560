//! A query as one party holds it during a batch: both eyes preprocessed (Lagrange
//! coefficient, basis B) and expanded into the 31 rotations.

use sdk_orb::preprocess::preprocess_coefs;
use sdk_orb::rotation::{rotate_coefs, rotations, ROTATION_COUNT};
use sdk_orb::shamir::PartyShares;
use sdk_orb::{PartyId, CODE_COEFS, MASK_COEFS};
use zeroize::Zeroize;

/// Preprocessed rotations of both eyes: `codes[eye]` is `31 x 12,800` coefficients,
/// `masks[eye]` `31 x 6,400`, rotation `k` at index `k + 15`. Zeroized on drop.
pub struct PreparedQuery {
    codes: [Vec<u16>; 2],
    masks: [Vec<u16>; 2],
}

impl core::fmt::Debug for PreparedQuery {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PreparedQuery").finish_non_exhaustive()
    }
}

impl Drop for PreparedQuery {
    fn drop(&mut self) {
        for v in self.codes.iter_mut().chain(self.masks.iter_mut()) {
            v.zeroize();
        }
    }
}

fn expand(party: PartyId, share: &[u16]) -> Vec<u16> {
    let len = share.len();
    let mut base = share.to_vec();
    preprocess_coefs(party, &mut base);
    let mut out = vec![0u16; ROTATION_COUNT * len];
    for (i, k) in rotations().enumerate() {
        rotate_coefs(&base, k, &mut out[i * len..(i + 1) * len]);
    }
    base.zeroize();
    out
}

impl PreparedQuery {
    /// Prepares `party`'s shares of a query.
    pub fn new(party: PartyId, shares: &PartyShares) -> PreparedQuery {
        let eyes = [&shares.left, &shares.right];
        PreparedQuery {
            codes: eyes.map(|e| expand(party, e.code.coefs())),
            masks: eyes.map(|e| expand(party, e.mask.coefs())),
        }
    }

    /// Prepares `party`'s shares of the mirrored query ([`sdk_orb::mirror::mirror_person`]):
    /// mirroring is a permutation and negation of whole ring elements, so it is done on the
    /// raw shares before preprocessing, with no communication.
    pub fn mirrored(party: PartyId, shares: &PartyShares) -> PreparedQuery {
        let mut m = sdk_orb::mirror::mirror_person(shares);
        let q = PreparedQuery::new(party, &m);
        m.zeroize();
        q
    }

    /// All rotations of one eye's code, rotation-major.
    pub fn codes(&self, eye: usize) -> &[u16] {
        &self.codes[eye]
    }

    /// All rotations of one eye's trimmed mask, rotation-major.
    pub fn masks(&self, eye: usize) -> &[u16] {
        &self.masks[eye]
    }

    /// One rotation (by index 0..31) of one eye's code.
    pub fn code(&self, eye: usize, rotation: usize) -> &[u16] {
        &self.codes[eye][rotation * CODE_COEFS..(rotation + 1) * CODE_COEFS]
    }

    /// One rotation (by index 0..31) of one eye's trimmed mask.
    pub fn mask(&self, eye: usize, rotation: usize) -> &[u16] {
        &self.masks[eye][rotation * MASK_COEFS..(rotation + 1) * MASK_COEFS]
    }
}

//! `preprocess`: node-side query preprocessing, per element and for whole shares.

use serde::{Deserialize, Serialize};

use sdk_orb::preprocess::{preprocess_code, preprocess_coefs, preprocess_mask};

use crate::common::{
    hex_element, party, random_template, ring_elements, rng, seed, PackedTemplate,
};
use crate::families::shamir::eye_shares;
use crate::format::{expect_eq, Digest16, Flag, Hex, HexU16, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// A preprocessing vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// One share element at party `party`: `M (lambda_{party+1} e)`.
    Element {
        /// 0, 1 or 2.
        party: u8,
        /// The share element (monomial coefficients).
        share: HexU16,
        /// Basis-B coefficients.
        expected: HexU16,
    },
    /// A whole eye shared from `rng_seed` (as in the `shamir` family), preprocessed by
    /// each party.
    Eye {
        /// The query template.
        template: PackedTemplate,
        /// ChaCha20 seed of the share randomness.
        rng_seed: Hex,
        /// Preprocessed code shares of parties 0, 1, 2 (12,800 each).
        code: Vec<Digest16>,
        /// Preprocessed trimmed mask shares of parties 0, 1, 2 (6,400 each).
        mask: Vec<Digest16>,
    },
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::Preprocess;
    const DESCRIPTION: &'static str = "Query preprocessing at party i: each share element \
        multiplied by the degree-2 Lagrange coefficient at zero lambda_{i+1} (1 + 2x + 2x^2 + \
        2x^3, its negation, 1), then converted to basis B with M.";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let mut out = Vec::new();
        let mut stream = rng(&seed("preprocess/elements"));
        for (p, e) in ring_elements(&mut stream, 3).into_iter().enumerate() {
            let mut c = e.0;
            preprocess_coefs(party(p as u8)?, &mut c);
            out.push(Vector {
                id: out.len() as u32 + 1,
                comment: format!("one random share element at party {p}"),
                flags: vec![Flag::Synthetic],
                case: Case::Element {
                    party: p as u8,
                    share: hex_element(e),
                    expected: HexU16(c.to_vec()),
                },
            });
        }
        let template = PackedTemplate::of(&random_template("preprocess/eye", 0.2));
        let s = seed("preprocess/eye/randomness");
        let (code, mask) = eye(&template, &s)?;
        out.push(Vector {
            id: out.len() as u32 + 1,
            comment: "a random query eye, preprocessed by each party".to_string(),
            flags: vec![Flag::Synthetic],
            case: Case::Eye {
                template,
                rng_seed: Hex(s.to_vec()),
                code,
                mask,
            },
        });
        Ok(out)
    }

    fn verify(vector: &Vector<Case>, _all: &[Vector<Case>]) -> Result<(), String> {
        match &vector.case {
            Case::Element {
                party: p,
                share,
                expected,
            } => {
                let mut c = share.array::<4>("share")?;
                preprocess_coefs(party(*p)?, &mut c);
                expect_eq("preprocessed", &HexU16(c.to_vec()), expected)
            }
            Case::Eye {
                template,
                rng_seed,
                code,
                mask,
            } => {
                let (c, m) = eye(template, &rng_seed.array::<32>("rng_seed")?)?;
                expect_eq("code", &c, code)?;
                expect_eq("mask", &m, mask)
            }
        }
    }
}

type Digests = (Vec<Digest16>, Vec<Digest16>);

fn eye(template: &PackedTemplate, s: &[u8; 32]) -> Result<Digests, String> {
    let (_, _, shares) = eye_shares(template, s)?;
    let mut code = Vec::new();
    let mut mask = Vec::new();
    for (p, share) in shares.iter().enumerate() {
        let id = party(p as u8)?;
        code.push(Digest16::of(&preprocess_code(id, &share.code).0));
        mask.push(Digest16::of(&preprocess_mask(id, &share.mask).0));
    }
    Ok((code, mask))
}

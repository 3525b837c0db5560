//! `dot_shares`: each party's additive shares of `cd` and `md` for a (rotated) query against
//! a database entry, both shared from stated seeds.

use serde::{Deserialize, Serialize};

use sdk_orb::plaintext::dot_products;
use sdk_orb::preprocess::{dot_shares, preprocess_code, preprocess_mask};
use sdk_orb::template::IrisTemplate;
use sdk_orb::PARTIES;

use crate::common::{noisy_copy, party, random_template, seed, PackedTemplate};
use crate::families::shamir::eye_shares;
use crate::format::{expect_eq, Flag, Hex, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// A dot-product vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// Query and database entry shared as in the `shamir` family; the query shares are
    /// preprocessed, then rotated by `rotation`, then dotted with the entry's shares.
    Pair {
        /// The query template.
        query: PackedTemplate,
        /// Seed of the query's share randomness.
        query_rng_seed: Hex,
        /// The enrolled template.
        entry: PackedTemplate,
        /// Seed of the entry's share randomness.
        entry_rng_seed: Hex,
        /// Rotation of the query, -15..=15.
        rotation: i32,
        /// `(cd, md)` additive shares of parties 0, 1, 2 (`md` already doubled).
        party_shares: Vec<(u16, u16)>,
        /// Their sums mod 2^16.
        cd: u16,
        /// As above.
        md: u16,
        /// The plaintext `cd` of the rotated query against the entry.
        plain_cd: i32,
        /// The plaintext `md`.
        plain_md: u32,
    },
}

type Computed = (Vec<(u16, u16)>, u16, u16, i32, u32);

fn compute(
    query: &PackedTemplate,
    qs: &[u8; 32],
    entry: &PackedTemplate,
    es: &[u8; 32],
    rotation: i32,
) -> Result<Computed, String> {
    if !(-15..=15).contains(&rotation) {
        return Err(format!("rotation {rotation} outside -15..=15"));
    }
    let (_, _, q) = eye_shares(query, qs)?;
    let (_, _, e) = eye_shares(entry, es)?;
    let mut shares = Vec::new();
    let (mut cd, mut md) = (0u16, 0u16);
    for p in 0..PARTIES {
        let id = party(p as u8)?;
        let qc = preprocess_code(id, &q[p].code).rotated(rotation);
        let qm = preprocess_mask(id, &q[p].mask).rotated(rotation);
        let s = dot_shares(&e[p].code, &e[p].mask, &qc, &qm);
        cd = cd.wrapping_add(s.0);
        md = md.wrapping_add(s.1);
        shares.push(s);
    }
    let plain = dot_products(&query.template()?.rotated(rotation), &entry.template()?);
    if (cd, md) != (plain.cd as u16, plain.md as u16) {
        return Err(format!(
            "shares sum to ({cd}, {md}), plaintext dot products are ({}, {})",
            plain.cd, plain.md
        ));
    }
    Ok((shares, cd, md, plain.cd, plain.md))
}

fn case(
    label: &str,
    query: &IrisTemplate,
    entry: &IrisTemplate,
    rotation: i32,
) -> Result<Case, String> {
    let (query, entry) = (PackedTemplate::of(query), PackedTemplate::of(entry));
    let qs = seed(&format!("dot_shares/{label}/query"));
    let es = seed(&format!("dot_shares/{label}/entry"));
    let (party_shares, cd, md, plain_cd, plain_md) = compute(&query, &qs, &entry, &es, rotation)?;
    Ok(Case::Pair {
        query,
        query_rng_seed: Hex(qs.to_vec()),
        entry,
        entry_rng_seed: Hex(es.to_vec()),
        rotation,
        party_shares,
        cd,
        md,
        plain_cd,
        plain_md,
    })
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::DotShares;
    const DESCRIPTION: &'static str = "Party-local dot products: sum over the coefficients of \
        entry share times preprocessed (and rotated) query share, mod 2^16, for the code \
        (cd share) and the trimmed mask (doubled: md share). The three shares sum to the \
        plaintext cd and md of the rotated query against the entry.";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let entry = random_template("dot_shares/entry", 0.2);
        let query = noisy_copy(&entry.rotated(-6), "dot_shares/noise", 0.1);
        let other = random_template("dot_shares/other", 0.25);
        let cases = [
            (
                "same eye, unrotated",
                "same0",
                &query,
                &entry,
                0,
                vec![Flag::Synthetic],
            ),
            (
                "same eye at its best rotation 6",
                "same6",
                &query,
                &entry,
                6,
                vec![Flag::Match, Flag::Synthetic],
            ),
            (
                "unrelated eyes, rotation -15",
                "other",
                &other,
                &entry,
                -15,
                vec![Flag::Synthetic],
            ),
        ];
        let mut out = Vec::new();
        for (comment, label, q, e, k, flags) in cases {
            out.push(Vector {
                id: out.len() as u32 + 1,
                comment: comment.to_string(),
                flags,
                case: case(label, q, e, k)?,
            });
        }
        Ok(out)
    }

    fn verify(vector: &Vector<Case>, _all: &[Vector<Case>]) -> Result<(), String> {
        let Case::Pair {
            query,
            query_rng_seed,
            entry,
            entry_rng_seed,
            rotation,
            party_shares,
            cd,
            md,
            plain_cd,
            plain_md,
        } = &vector.case;
        let got = compute(
            query,
            &query_rng_seed.array::<32>("query_rng_seed")?,
            entry,
            &entry_rng_seed.array::<32>("entry_rng_seed")?,
            *rotation,
        )?;
        expect_eq("party_shares", &got.0, party_shares)?;
        expect_eq("cd", &got.1, cd)?;
        expect_eq("md", &got.2, md)?;
        expect_eq("plain_cd", &got.3, plain_cd)?;
        expect_eq("plain_md", &got.4, plain_md)
    }
}

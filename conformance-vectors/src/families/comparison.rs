//! `comparison`: the node's comparison phase (docs/protocol.md, steps 4 to 7) for given
//! additive dot-product shares and pairwise PRF seeds, run as the three parties through
//! `ocelli_mpc`: the split into two parts (party 1's, and the one parties 0 and 2 share), the
//! cross term `A u v` of the lift, `x = A md - 2^16 cd` in Z_{2^32}, and the MSB of `x`. Each
//! vector holds every party's part of each of these values and the opened values, which must
//! equal the plaintext integers and the match rule.

use rand_core::RngCore;
use serde::{Deserialize, Serialize};

use ocelli_mpc::compare::{compare, match_bits, Comparison};
use ocelli_mpc::local::run_three_seeded;
use ocelli_mpc::share::Replicated;
use sdk_orb::plaintext::{threshold_coefficient, DotProducts};
use sdk_orb::PARTIES;

use crate::common::{rng, seed};
use crate::format::{expect_eq, Bits, Flag, Hex, HexU16, HexU32, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// A comparison vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// `n` comparisons run as one batch of the comparison phase.
    Compare {
        /// `A = floor((1 - 2t) 2^16)`.
        threshold_a: u32,
        /// The plaintext `cd` of each comparison (a signed 16-bit value).
        plain_cd: Vec<i32>,
        /// The plaintext `md` of each comparison (an unsigned 16-bit value).
        plain_md: Vec<u32>,
        /// Additive shares of `cd` over Z_{2^16}, parties 0, 1, 2: the input as the
        /// dot-product engine hands it over.
        cd_shares: Vec<HexU16>,
        /// Additive shares of `md`, parties 0, 1, 2 (the pipeline has already doubled the
        /// trimmed-mask dot product).
        md_shares: Vec<HexU16>,
        /// The pairwise PRF seeds: `prf_seeds[i]` is shared by parties `i` and `i+1`.
        prf_seeds: Vec<Hex>,
        /// Each party's parts of the values it holds, parties 0, 1, 2.
        parties: Vec<Components>,
        /// Opened `cd` over Z_{2^16}: the sum of party 1's part and the others' part.
        cd: HexU16,
        /// Opened `md` over Z_{2^16`.
        md: HexU16,
        /// Opened cross term `A u v` over Z_{2^16}, `u` and `v` the top bits of party 1's and
        /// the others' part of `md`.
        cross: HexU16,
        /// Opened `x = A md - 2^16 cd` in Z_{2^32}, with `md` the integer (lifted).
        x: HexU32,
        /// Opened `MSB(x)`: the match bits.
        matches: Bits,
    },
}

/// One party's parts of the values it holds after each step: party 1 holds the single part of
/// each two-part value, parties 0 and 2 the same other part; the match bits are a replicated
/// XOR sharing, of which this is the party's own component.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Components {
    /// Part of `cd` after the split, Z_{2^16}.
    pub cd: HexU16,
    /// Part of `md` after the split, Z_{2^16}.
    pub md: HexU16,
    /// Part of the cross term `A u v`, Z_{2^16}.
    pub cross: HexU16,
    /// Part of `x`, Z_{2^32}.
    pub x: HexU32,
    /// `MSB(x)`, own XOR component.
    pub matches: Bits,
}

/// What the three parties computed, and its opening.
#[derive(Debug, PartialEq, Eq)]
struct Outputs {
    parties: Vec<Components>,
    cd: Vec<u16>,
    md: Vec<u16>,
    cross: Vec<u16>,
    x: Vec<u32>,
    matches: Vec<bool>,
    /// The top bits `(u, v)` of the two parts of `md`, as `2 u + v`: the generator checks that
    /// all four patterns occur. Not recorded.
    md_tops: Vec<u16>,
}

/// The first `n` bits of a bit plane.
fn plane_bits(words: &[u64], n: usize) -> Vec<bool> {
    (0..n)
        .map(|e| (words[e / 64] >> (e % 64)) & 1 == 1)
        .collect()
}

/// Checks that parties 0 and 2 hold the same part of each two-part value, and that party `i`'s
/// previous component of the match bits is party `i-1`'s own.
fn consistent(p: [&Comparison; PARTIES]) -> Result<(), String> {
    let same = [
        ("cd", p[0].cd == p[2].cd),
        ("md", p[0].md == p[2].md),
        ("cross", p[0].cross == p[2].cross),
        ("x", p[0].x == p[2].x),
    ];
    if let Some((what, _)) = same.iter().find(|(_, ok)| !ok) {
        return Err(format!("{what}: parties 0 and 2 hold different parts"));
    }
    let bits: [&Replicated<u64>; PARTIES] = p.map(|c| &c.matches);
    for i in 0..PARTIES {
        if bits[i].prev != bits[(i + 2) % PARTIES].own {
            return Err(format!(
                "matches: party {i}'s previous component differs from party {}'s own",
                (i + 2) % PARTIES
            ));
        }
    }
    Ok(())
}

/// Whether the comparison phase decides `(cd, md)` correctly: `cd` fits its 16-bit encoding,
/// `md < 2^15` (the lift reads the wrap of `md`'s two parts from their top bits), and
/// `A md - 2^16 cd` lies in `[-2^31, 2^31)`, so its sign is the MSB of `x`. Every genuine
/// pair (`|cd| <= md <= 12,800`) is inside for any `A <= 2^16`.
fn in_domain(cd: i32, md: u32, a: u32) -> bool {
    let v = i64::from(a) * i64::from(md) - (1i64 << 16) * i64::from(cd);
    i16::try_from(cd).is_ok() && md < 1 << 15 && (-(1i64 << 31)..(1i64 << 31)).contains(&v)
}

/// The plaintext values the opened outputs must equal: `A md - 2^16 cd` in Z_{2^32} and the
/// rule `2^16 cd > A md` of `sdk_orb::plaintext`.
fn plaintext(cd: &[i32], md: &[u32], a: u32) -> (Vec<u32>, Vec<bool>) {
    let x = cd
        .iter()
        .zip(md)
        .map(|(&c, &m)| (i64::from(a) * i64::from(m) - (1i64 << 16) * i64::from(c)) as u32)
        .collect();
    let matches = cd
        .iter()
        .zip(md)
        .map(|(&cd, &md)| DotProducts { cd, md }.matches(a))
        .collect();
    (x, matches)
}

/// Runs the comparison phase as the three parties with the given inputs and seeds, checks the
/// replicated shares are consistent, and opens them. Runs the pipeline's entry point
/// [`match_bits`] a second time with the same seeds: its bit shares must be the ones recorded.
fn run(
    a: u32,
    cd_shares: &[Vec<u16>; PARTIES],
    md_shares: &[Vec<u16>; PARTIES],
    seeds: &[[u8; 32]; PARTIES],
) -> Result<Outputs, String> {
    let n = cd_shares[0].len();
    if cd_shares.iter().chain(md_shares).any(|s| s.len() != n) {
        return Err("input shares of different lengths".to_string());
    }
    let out = run_three_seeded(seeds, |s| {
        let i = s.party().index();
        compare(s, &cd_shares[i], &md_shares[i], a).map_err(|e| e.to_string())
    });
    let mut parties: Vec<Comparison> = Vec::new();
    for (result, _, _) in out {
        parties.push(result?);
    }
    let p: [&Comparison; PARTIES] = [&parties[0], &parties[1], &parties[2]];
    consistent(p)?;

    let again = run_three_seeded(seeds, |s| {
        let i = s.party().index();
        match_bits(s, &cd_shares[i], &md_shares[i], a).map_err(|e| e.to_string())
    });
    for (i, (bits, _, _)) in again.into_iter().enumerate() {
        if bits? != parties[i].matches {
            return Err(format!(
                "party {i}: match_bits gives other bit shares than compare"
            ));
        }
    }

    // Party 1 holds the single part, party 0 the other.
    let (single, pair) = (p[1], p[0]);
    let sum16 = |f: fn(&Comparison) -> &Vec<u16>| -> Vec<u16> {
        (0..n)
            .map(|e| f(single)[e].wrapping_add(f(pair)[e]))
            .collect()
    };
    let opened_bits: Vec<u64> = (0..parties[0].matches.len())
        .map(|w| p.iter().fold(0u64, |acc, c| acc ^ c.matches.own[w]))
        .collect();
    Ok(Outputs {
        parties: parties
            .iter()
            .map(|c| Components {
                cd: HexU16(c.cd.clone()),
                md: HexU16(c.md.clone()),
                cross: HexU16(c.cross.clone()),
                x: HexU32(c.x.clone()),
                matches: Bits(plane_bits(&c.matches.own, n)),
            })
            .collect(),
        cd: sum16(|c| &c.cd),
        md: sum16(|c| &c.md),
        cross: sum16(|c| &c.cross),
        x: (0..n)
            .map(|e| single.x[e].wrapping_add(pair.x[e]))
            .collect(),
        matches: plane_bits(&opened_bits, n),
        md_tops: (0..n)
            .map(|e| 2 * (single.md[e] >> 15) + (pair.md[e] >> 15))
            .collect(),
    })
}

/// Checks the opened outputs against the plaintext, independently of any recorded value.
fn check_plaintext(
    out: &Outputs,
    cd: &[i32],
    md: &[u32],
    cd_shares: &[Vec<u16>; PARTIES],
    md_shares: &[Vec<u16>; PARTIES],
    a: u32,
) -> Result<(), String> {
    if cd.len() != md.len() || cd.is_empty() {
        return Err("plain_cd and plain_md must be equally long and not empty".to_string());
    }
    for (e, (&c, &m)) in cd.iter().zip(md).enumerate() {
        if !in_domain(c, m, a) {
            return Err(format!(
                "comparison {e}: (cd {c}, md {m}) is outside the domain for A = {a}"
            ));
        }
        let sum =
            |s: &[Vec<u16>; PARTIES]| s.iter().fold(0u16, |acc, share| acc.wrapping_add(share[e]));
        if sum(cd_shares) != c as u16 || sum(md_shares) != m as u16 {
            return Err(format!(
                "comparison {e}: the input shares do not sum to (cd {c}, md {m})"
            ));
        }
    }
    let (x, matches) = plaintext(cd, md, a);
    let as16 = |v: &[i32]| -> Vec<u16> { v.iter().map(|&c| c as u16).collect() };
    expect_eq("opened cd vs plaintext cd", &out.cd, &as16(cd))?;
    expect_eq(
        "opened md vs plaintext md",
        &out.md,
        &md.iter().map(|&m| m as u16).collect::<Vec<_>>(),
    )?;
    let cross: Vec<u16> = out
        .md_tops
        .iter()
        .map(|&t| (a as u16).wrapping_mul(u16::from(t == 3)))
        .collect();
    expect_eq("opened cross term vs A u v", &out.cross, &cross)?;
    expect_eq("opened x vs plaintext A md - 2^16 cd", &out.x, &x)?;
    expect_eq(
        "opened match bits vs 2^16 cd > A md",
        &out.matches,
        &matches,
    )
}

fn three<T: Clone>(v: &[T], what: &str) -> Result<[T; PARTIES], String> {
    <[T; PARTIES]>::try_from(v.to_vec())
        .map_err(|_| format!("{what}: {} entries, expected 3", v.len()))
}

/// Input share patterns: how the additive shares of a value are chosen.
#[derive(Clone, Copy)]
enum Shares {
    /// Uniform from the vector's RNG.
    Random,
    /// Party 0 holds the value, the others zero.
    AllAtParty0,
    /// Shares summing to the value plus 2^16 (one wrap-around).
    WrapOnce,
    /// Shares summing to the value plus 2^17 when possible (two wrap-arounds).
    WrapTwice,
}

fn additive(rng: &mut rand_chacha::ChaCha20Rng, v: u16, how: Shares) -> [u16; PARTIES] {
    match how {
        Shares::Random => {
            let (r0, r1) = (rng.next_u32() as u16, rng.next_u32() as u16);
            [r0, r1, v.wrapping_sub(r0).wrapping_sub(r1)]
        }
        Shares::AllAtParty0 => [v, 0, 0],
        Shares::WrapOnce => [0x8000, 0x8000, v],
        Shares::WrapTwice => [0xFFFF, 0xFFFF, v.wrapping_add(2)],
    }
}

struct Plan {
    label: &'static str,
    comment: &'static str,
    flags: Vec<Flag>,
    a: u32,
    pairs: Vec<(i32, u32)>,
    shares: Vec<Shares>,
}

/// The vector of `plan`, and the top-bit patterns of the parts of `md`.
fn case(plan: &Plan) -> Result<(Case, Vec<u16>), String> {
    let mut stream = rng(&seed(&format!("comparison/{}/shares", plan.label)));
    let mut cd_shares: [Vec<u16>; PARTIES] = Default::default();
    let mut md_shares: [Vec<u16>; PARTIES] = Default::default();
    for (e, &(cd, md)) in plan.pairs.iter().enumerate() {
        let how = plan.shares[e % plan.shares.len()];
        let c = additive(&mut stream, cd as u16, how);
        let m = additive(&mut stream, md as u16, how);
        for p in 0..PARTIES {
            cd_shares[p].push(c[p]);
            md_shares[p].push(m[p]);
        }
    }
    let seeds: [[u8; 32]; PARTIES] =
        core::array::from_fn(|i| seed(&format!("comparison/{}/prf/{i}", plan.label)));
    let (plain_cd, plain_md): (Vec<i32>, Vec<u32>) = plan.pairs.iter().copied().unzip();
    let out = run(plan.a, &cd_shares, &md_shares, &seeds)?;
    check_plaintext(&out, &plain_cd, &plain_md, &cd_shares, &md_shares, plan.a)?;
    let md_tops = out.md_tops.clone();
    let case = Case::Compare {
        threshold_a: plan.a,
        plain_cd,
        plain_md,
        cd_shares: cd_shares.into_iter().map(HexU16).collect(),
        md_shares: md_shares.into_iter().map(HexU16).collect(),
        prf_seeds: seeds.iter().map(|s| Hex(s.to_vec())).collect(),
        parties: out.parties,
        cd: HexU16(out.cd),
        md: HexU16(out.md),
        cross: HexU16(out.cross),
        x: HexU32(out.x),
        matches: Bits(out.matches),
    };
    Ok((case, md_tops))
}

/// `cd` one below, at and one above `floor(A md / 2^16)`: the last two straddle the
/// threshold.
fn around_threshold(a: u32, md: u32) -> [(i32, u32); 3] {
    let at = ((u64::from(a) * u64::from(md)) >> 16) as i32;
    [(at - 1, md), (at, md), (at + 1, md)]
}

/// Genuine `(cd, md)` pairs from a seeded RNG: `md` uniform in 0..=12,800, `cd` of the parity
/// of `md` in `[-md, md]`, every other one within a few steps of the threshold.
fn random_pairs(label: &str, a: u32, n: usize) -> Vec<(i32, u32)> {
    let mut r = rng(&seed(label));
    (0..n)
        .map(|e| {
            let md = r.next_u32() % 12_801;
            let m = md as i32;
            let cd = if e % 2 == 0 {
                ((u64::from(a) * u64::from(md)) >> 16) as i32 + (r.next_u32() % 7) as i32 - 3
            } else {
                (r.next_u32() % (2 * md + 1)) as i32 - m
            };
            let cd = cd.clamp(-m, m);
            // cd = md - 2 (#differing) has the parity of md.
            let cd = if (cd - m) % 2 != 0 { cd - 1 } else { cd };
            (cd.max(-m), md)
        })
        .collect()
}

fn plans() -> Vec<Plan> {
    let a = threshold_coefficient(sdk_orb::plaintext::DEFAULT_THRESHOLD);
    let half = threshold_coefficient(0.25);
    let mut near = Vec::new();
    for md in [1, 2, 3, 100, 1_000, 6_400, 8_191, 12_799, 12_800] {
        near.extend(around_threshold(a, md));
    }
    let mut ties = vec![(0, 0)];
    for md in [2u32, 100, 6_400, 12_800] {
        let c = (md / 2) as i32;
        ties.extend([(c - 1, md), (c, md), (c + 1, md)]);
    }
    let mut beyond = Vec::new();
    for md in [16_384, 32_767] {
        beyond.extend(around_threshold(a, md));
    }
    let wrap_values = [
        (0, 0),
        (1, 1),
        (-1, 1),
        (12_800, 12_800),
        (-12_800, 12_800),
        (3_968, 12_800),
        (3_966, 12_800),
    ];
    let patterns = [
        Shares::AllAtParty0,
        Shares::WrapOnce,
        Shares::WrapTwice,
        Shares::Random,
    ];
    let wraps: Vec<(i32, u32)> = wrap_values.iter().flat_map(|&v| [v; 4]).collect::<Vec<_>>();
    let genuine_edges = vec![
        (0, 0),
        (1, 1),
        (-1, 1),
        (2, 2),
        (0, 2),
        (-2, 2),
        (12_800, 12_800),
        (0, 12_800),
        (-12_800, 12_800),
    ];
    vec![
        Plan {
            label: "edges",
            comment: "default threshold (A = 20316): md = 0 (never a match), the smallest and \
                the largest md, cd = md, 0 and -md",
            flags: vec![Flag::EdgeCase],
            a,
            pairs: genuine_edges.clone(),
            shares: vec![Shares::Random],
        },
        Plan {
            label: "around",
            comment: "default threshold: cd one below, at and one above floor(A md / 2^16) for \
                md from 1 to 12,800; the last two straddle the threshold",
            flags: vec![Flag::EdgeCase],
            a,
            pairs: near,
            shares: vec![Shares::Random],
        },
        Plan {
            label: "ties",
            comment: "t = 0.25 (A = 2^15): exact ties 2^16 cd = A md (cd = md / 2) do not \
                match, one above does",
            flags: vec![Flag::EdgeCase],
            a: half,
            pairs: ties,
            shares: vec![Shares::Random],
        },
        Plan {
            label: "beyond",
            comment: "default threshold, md beyond the template range: an exact tie at \
                md = 2^14 (cd = 5079), and md = 2^15 - 1, the largest md the lift reads from \
                the top bits of its two parts",
            flags: vec![Flag::EdgeCase],
            a,
            pairs: beyond,
            shares: vec![Shares::Random],
        },
        Plan {
            label: "wraps",
            comment: "input shares of each of seven values held by party 0 alone, summing to \
                the value plus 2^16 and plus 2^17, and uniform: the split must keep the \
                value and hide the pattern",
            flags: vec![Flag::EdgeCase],
            a,
            pairs: wraps,
            shares: patterns.to_vec(),
        },
        Plan {
            label: "a_zero",
            comment: "t = 0.5 (A = 0): a match iff cd > 0",
            flags: vec![Flag::EdgeCase],
            a: threshold_coefficient(0.5),
            pairs: genuine_edges.clone(),
            shares: vec![Shares::Random],
        },
        Plan {
            label: "a_full",
            comment: "t = 0 (A = 2^16, which does not fit 16 bits): a match iff cd > md, \
                which no genuine pair reaches",
            flags: vec![Flag::EdgeCase],
            a: threshold_coefficient(0.0),
            pairs: genuine_edges,
            shares: vec![Shares::Random],
        },
        Plan {
            label: "random",
            comment: "64 genuine pairs from a seeded RNG, half of them within three steps of \
                the default threshold",
            flags: vec![Flag::Synthetic],
            a,
            pairs: random_pairs("comparison/random/pairs", a, 64),
            shares: vec![Shares::Random],
        },
    ]
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::Comparison;
    const DESCRIPTION: &'static str = "The comparison phase of the node's MPC, run as the three \
        parties: additive (cd, md) shares over Z_{2^16} are split into a part party 1 holds \
        and a part parties 0 and 2 hold; md is lifted to Z_{2^32} from the parts' top bits u, \
        v with the cross term A u v split by a three-party OT; x = A md - 2^16 cd in \
        Z_{2^32}; and MSB(x) = 1 iff 2^16 cd > A md, by a binary adder over the two parts of \
        x. Per-party parts depend on the correlated randomness (ChaCha12 streams keyed by \
        prf_seeds, drawn in the node's order); the opened values are semantic and equal the \
        plaintext integers and the match rule.";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let mut out = Vec::new();
        let mut tops = [false; 4];
        for plan in plans() {
            let (c, md_tops) = case(&plan).map_err(|e| format!("{}: {e}", plan.label))?;
            for t in md_tops {
                tops[usize::from(t)] = true;
            }
            out.push((plan.comment.to_string(), plan.flags.clone(), c));
        }
        if tops != [true; 4] {
            return Err(format!(
                "the top bits (u, v) of md's two parts must take all four patterns: {tops:?}"
            ));
        }
        Ok(Vector::numbered(out))
    }

    fn verify(vector: &Vector<Case>, _all: &[Vector<Case>]) -> Result<(), String> {
        let Case::Compare {
            threshold_a,
            plain_cd,
            plain_md,
            cd_shares,
            md_shares,
            prf_seeds,
            parties,
            cd,
            md,
            cross,
            x,
            matches,
        } = &vector.case;
        let cd_in = three(cd_shares, "cd_shares")?.map(|h| h.0);
        let md_in = three(md_shares, "md_shares")?.map(|h| h.0);
        let seeds = three(prf_seeds, "prf_seeds")?;
        let seeds = [
            seeds[0].array::<32>("prf_seeds[0]")?,
            seeds[1].array::<32>("prf_seeds[1]")?,
            seeds[2].array::<32>("prf_seeds[2]")?,
        ];
        if cd_in[0].len() != plain_cd.len() {
            return Err(format!(
                "{} input shares for {} comparisons",
                cd_in[0].len(),
                plain_cd.len()
            ));
        }
        let out = run(*threshold_a, &cd_in, &md_in, &seeds)?;
        check_plaintext(&out, plain_cd, plain_md, &cd_in, &md_in, *threshold_a)?;
        expect_eq("parties", &parties.len(), &PARTIES)?;
        for (p, (got, want)) in out.parties.iter().zip(parties).enumerate() {
            expect_eq(&format!("party {p} cd"), &got.cd, &want.cd)?;
            expect_eq(&format!("party {p} md"), &got.md, &want.md)?;
            expect_eq(&format!("party {p} cross"), &got.cross, &want.cross)?;
            expect_eq(&format!("party {p} x"), &got.x, &want.x)?;
            expect_eq(&format!("party {p} matches"), &got.matches, &want.matches)?;
        }
        expect_eq("cd", &out.cd, &cd.0)?;
        expect_eq("md", &out.md, &md.0)?;
        expect_eq("cross", &out.cross, &cross.0)?;
        expect_eq("x", &out.x, &x.0)?;
        expect_eq("matches", &out.matches, &matches.0)
    }
}

//! `masked_bitvectors`: masked bit values, dot products, distances and match decisions.

use serde::{Deserialize, Serialize};

use sdk_orb::plaintext::{
    dot_products, masked_bitvector, masked_value, min_distance_over_rotations,
    threshold_coefficient, DEFAULT_THRESHOLD,
};
use sdk_orb::rotation::rotations;
use sdk_orb::template::{IrisTemplate, TemplatePolicy};
use sdk_orb::CODE_BITS;

use crate::common::{noisy_copy, random_template, PackedTemplate};
use crate::format::{expect_eq, Digest16, Flag, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// A plaintext vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// `m - 2 (c AND m)` in Z_{2^16}.
    MaskedValue {
        /// Code bit.
        code: bool,
        /// Mask bit (true = usable).
        mask: bool,
        /// The value.
        value: u16,
    },
    /// `A = floor((1 - 2 t) 2^16)`.
    ThresholdCoefficient {
        /// Threshold on the fractional Hamming distance.
        threshold: f64,
        /// The coefficient.
        a: u32,
    },
    /// A probe against a gallery template.
    Pair(Box<Pair>),
}

/// A probe against a gallery template.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pair {
    /// The probe (rotated).
    pub probe: PackedTemplate,
    /// The gallery template (never rotated).
    pub gallery: PackedTemplate,
    /// Masked bitvector of the probe in plain bit order (12,800 values).
    pub probe_bitvector: Digest16,
    /// Without rotation.
    pub unrotated: Dots,
    /// Per rotation k = -15..=15 (31 entries, index k + 15).
    pub rotated: Vec<Dots>,
    /// Smallest distance over the rotations and the first rotation reaching it; null if
    /// no rotation has a common bit.
    pub min_over_rotations: Option<(f64, i32)>,
    /// `A` at the threshold used.
    pub a: u32,
    /// Whether some rotation satisfies `2^16 cd > A md`.
    pub matches: bool,
}

/// The dot products of one (rotated) pair.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dots {
    /// `#equal - #differing` over common bits.
    pub cd: i32,
    /// `#common`.
    pub md: u32,
    /// `(md - cd) / 2 / md`, null without common bits.
    pub distance: Option<f64>,
    /// `2^16 cd > A md` at the vector's `A`.
    pub matches: bool,
}

fn dots(probe: &IrisTemplate, gallery: &IrisTemplate, a: u32) -> Dots {
    let d = dot_products(probe, gallery);
    Dots {
        cd: d.cd,
        md: d.md,
        distance: d.distance(),
        matches: d.matches(a),
    }
}

fn pair_case(probe: &IrisTemplate, gallery: &IrisTemplate, a: u32) -> Case {
    let mut bv = [0u16; CODE_BITS];
    masked_bitvector(probe, &mut bv);
    let rotated: Vec<Dots> = rotations()
        .map(|k| dots(&probe.rotated(k), gallery, a))
        .collect();
    Case::Pair(Box::new(Pair {
        probe: PackedTemplate::of(probe),
        gallery: PackedTemplate::of(gallery),
        probe_bitvector: Digest16::of(&bv),
        unrotated: dots(probe, gallery, a),
        matches: rotated.iter().any(|d| d.matches),
        rotated,
        min_over_rotations: min_distance_over_rotations(probe, gallery),
        a,
    }))
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::MaskedBitvectors;
    const DESCRIPTION: &'static str = "Masked bitvectors v = m - 2(c AND m) in Z_{2^16}, the \
        code and mask dot products cd and md of a probe (under each of the 31 rotations) \
        against a gallery template, the fractional Hamming distance and the exact match \
        decision 2^16 cd > A md with A = floor((1 - 2t) 2^16).";

    fn generate(sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let mut out: Vec<(String, Vec<Flag>, Case)> = Vec::new();
        for (code, mask) in [(false, false), (true, false), (false, true), (true, true)] {
            out.push((
                format!("masked value of code {code}, mask {mask}"),
                vec![Flag::EdgeCase],
                Case::MaskedValue {
                    code,
                    mask,
                    value: masked_value(code, mask),
                },
            ));
        }
        for t in [DEFAULT_THRESHOLD, 0.0, 0.25, 0.375, 0.5] {
            out.push((
                format!("threshold coefficient at t = {t}"),
                vec![Flag::EdgeCase],
                Case::ThresholdCoefficient {
                    threshold: t,
                    a: threshold_coefficient(t),
                },
            ));
        }
        let a = threshold_coefficient(DEFAULT_THRESHOLD);
        let policy = TemplatePolicy { min_usable_bits: 0 };
        let fixture = |key: &str| -> Result<IrisTemplate, String> {
            let json = serde_json::to_vec(&sources.random_pair[key]).map_err(|e| e.to_string())?;
            IrisTemplate::from_open_iris_json(&json, &policy).map_err(|e| e.to_string())
        };
        let (fa, fb) = (fixture("template_a")?, fixture("template_b")?);
        // Cross-check against the fixture's own numbers (open-iris simple_hamming_distance).
        let case = pair_case(&fa, &fb, a);
        if let Case::Pair(pair) = &case {
            let (unrotated, min_over_rotations) = (&pair.unrotated, &pair.min_over_rotations);
            let want = sources.random_pair["fhd_no_rotation"].as_f64();
            let want_min = sources.random_pair["fhd_min_over_31_rotations"].as_f64();
            let want_k = sources.random_pair["best_rotation_of_a"].as_i64();
            if unrotated.distance != want
                || min_over_rotations.map(|m| m.0) != want_min
                || min_over_rotations.map(|m| m.1 as i64) != want_k
            {
                return Err("open-iris random_pair distances are not reproduced".to_string());
            }
        }
        out.push((
            "open-iris fixture random_pair: template_a against template_b (distances as in \
             the fixture)"
                .to_string(),
            vec![Flag::OpenIrisFixture],
            case,
        ));
        let r1 = random_template("masked_bitvectors/r1", 0.2);
        let r2 = random_template("masked_bitvectors/r2", 0.25);
        out.push((
            "two unrelated random templates".to_string(),
            vec![Flag::Synthetic],
            pair_case(&r1, &r2, a),
        ));
        let same_eye = noisy_copy(&r1.rotated(-4), "masked_bitvectors/noise", 0.12);
        out.push((
            "a noisy capture of the same eye, turned by 4 columns: matches at rotation 4"
                .to_string(),
            vec![Flag::Match, Flag::Synthetic],
            pair_case(&same_eye, &r1, a),
        ));
        out.push((
            "a template against itself: distance 0 at rotation 0".to_string(),
            vec![Flag::EdgeCase, Flag::Match, Flag::Synthetic],
            pair_case(&r2, &r2, a),
        ));
        let mut left_half = sdk_orb::template::IrisBits::zero();
        let mut right_half = sdk_orb::template::IrisBits::zero();
        for i in 0..CODE_BITS {
            // Columns 0..80 against 100..180: 20 columns apart both ways (mod 200), so no
            // rotation within 15 brings them together.
            let col = (i % 800) / 4;
            left_half.set(i, col < 80);
            right_half.set(i, (100..180).contains(&col));
        }
        let t1 = IrisTemplate::new(r1.code().clone(), left_half, "v2.1", &policy)
            .map_err(|e| e.to_string())?;
        let t2 = IrisTemplate::new(r1.code().clone(), right_half, "v2.1", &policy)
            .map_err(|e| e.to_string())?;
        out.push((
            "equal codes, disjoint masks under every rotation: md = 0 never matches".to_string(),
            vec![Flag::EdgeCase, Flag::NoCommonBits],
            pair_case(&t1, &t2, a),
        ));
        Ok(Vector::numbered(out))
    }

    fn verify(vector: &Vector<Case>, _all: &[Vector<Case>]) -> Result<(), String> {
        match &vector.case {
            Case::MaskedValue { code, mask, value } => {
                expect_eq("value", &masked_value(*code, *mask), value)
            }
            Case::ThresholdCoefficient { threshold, a } => {
                if !(0.0..=0.5).contains(threshold) {
                    return Err("threshold outside 0..=0.5".to_string());
                }
                expect_eq("a", &threshold_coefficient(*threshold), a)
            }
            Case::Pair(pair) => {
                let Pair {
                    probe,
                    gallery,
                    probe_bitvector,
                    unrotated,
                    rotated,
                    min_over_rotations,
                    a,
                    matches,
                } = &**pair;
                let (p, g) = (probe.template()?, gallery.template()?);
                let mut bv = [0u16; CODE_BITS];
                masked_bitvector(&p, &mut bv);
                probe_bitvector.check(&bv, "probe_bitvector")?;
                expect_eq("unrotated", &dots(&p, &g, *a), unrotated)?;
                expect_eq("rotations", &rotated.len(), &31)?;
                for (k, want) in rotations().zip(rotated) {
                    expect_eq(&format!("rotation {k}"), &dots(&p.rotated(k), &g, *a), want)?;
                }
                expect_eq(
                    "min_over_rotations",
                    &min_distance_over_rotations(&p, &g),
                    min_over_rotations,
                )?;
                let any = rotated.iter().any(|d| d.matches);
                expect_eq("matches", &any, matches)?;
                expect_eq("match flag", &vector.flags.contains(&Flag::Match), matches)?;
                if vector.flags.contains(&Flag::NoCommonBits) && rotated.iter().any(|d| d.md != 0) {
                    return Err("flagged no_common_bits, but a rotation has some".to_string());
                }
                Ok(())
            }
        }
    }
}

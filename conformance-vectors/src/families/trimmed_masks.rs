//! `trimmed_masks`: the real-part half of the mask in the share layout, and `md` from it.

use serde::{Deserialize, Serialize};

use sdk_orb::plaintext::dot_products;
use sdk_orb::preprocess::dot;
use sdk_orb::shamir::mask_coefs;
use sdk_orb::MASK_COEFS;

use crate::common::{random_template, PackedTemplate};
use crate::format::{expect_eq, Digest16, Flag, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// A trimmed-mask vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// Two templates: their trimmed masks, and `md = 2 <trimmed a, trimmed b>`.
    Pair {
        /// First template.
        a: PackedTemplate,
        /// Second template.
        b: PackedTemplate,
        /// Trimmed mask of `a`: 6,400 values in {0, 1}.
        trimmed_a: Digest16,
        /// Trimmed mask of `b`.
        trimmed_b: Digest16,
        /// Usable pairs of `a` (ones in its trimmed mask).
        ones_a: u32,
        /// `<trimmed a, trimmed b>` mod 2^16.
        trimmed_dot: u16,
        /// `md` of the pair without rotation: twice the trimmed dot.
        md: u32,
    },
}

fn trimmed(t: &PackedTemplate) -> Result<Vec<u16>, String> {
    let mut m = [0xA5A5u16; MASK_COEFS];
    mask_coefs(&t.template()?, &mut m);
    if m.iter().any(|&v| v > 1) {
        return Err("trimmed mask value outside {0, 1}".to_string());
    }
    Ok(m.to_vec())
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::TrimmedMasks;
    const DESCRIPTION: &'static str = "Trimmed masks: the 0/1 mask values of the first 6,400 \
        coefficients of the share layout (the real parts), so md = 2 <trimmed a, trimmed b>.";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let pairs = [
            ("two random templates", 0.2, 0.3),
            (
                "a fully usable template against a half-masked one",
                0.0,
                0.5,
            ),
        ];
        let mut out = Vec::new();
        for (i, (comment, fa, fb)) in pairs.into_iter().enumerate() {
            let ta = random_template(&format!("trimmed_masks/{i}/a"), fa);
            let tb = random_template(&format!("trimmed_masks/{i}/b"), fb);
            let (a, b) = (PackedTemplate::of(&ta), PackedTemplate::of(&tb));
            let (ma, mb) = (trimmed(&a)?, trimmed(&b)?);
            let d = dot(&ma, &mb);
            out.push(Vector {
                id: i as u32 + 1,
                comment: comment.to_string(),
                flags: vec![Flag::Synthetic],
                case: Case::Pair {
                    trimmed_a: Digest16::of(&ma),
                    trimmed_b: Digest16::of(&mb),
                    ones_a: ma.iter().map(|&v| v as u32).sum(),
                    trimmed_dot: d,
                    md: dot_products(&ta, &tb).md,
                    a,
                    b,
                },
            });
        }
        Ok(out)
    }

    fn verify(vector: &Vector<Case>, _all: &[Vector<Case>]) -> Result<(), String> {
        let Case::Pair {
            a,
            b,
            trimmed_a,
            trimmed_b,
            ones_a,
            trimmed_dot,
            md,
        } = &vector.case;
        let (ma, mb) = (trimmed(a)?, trimmed(b)?);
        trimmed_a.check(&ma, "trimmed_a")?;
        trimmed_b.check(&mb, "trimmed_b")?;
        let ones: u32 = ma.iter().map(|&v| v as u32).sum();
        expect_eq("ones_a", &ones, ones_a)?;
        expect_eq(
            "usable bits = 2 ones",
            &(2 * ones as usize),
            &a.template()?.usable_bits(),
        )?;
        let d = dot(&ma, &mb);
        expect_eq("trimmed_dot", &d, trimmed_dot)?;
        let plain_md = dot_products(&a.template()?, &b.template()?).md;
        expect_eq("md", &plain_md, md)?;
        expect_eq("md = 2 trimmed_dot", &(plain_md as u16), &d.wrapping_mul(2))
    }
}

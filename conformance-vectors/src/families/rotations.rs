//! `rotations`: plain bits rotated as `numpy.roll(x, k, axis=1)`, and share coefficients
//! rotated in the packed layout.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use sdk_orb::rotation::{rotate_bits, rotate_coefs, rotations, ROTATION_COUNT};
use sdk_orb::shamir::{code_coefs, mask_coefs};
use sdk_orb::{CODE_COEFS, MASK_COEFS};

use crate::common::{bits, packed, random_template, PackedTemplate};
use crate::format::{expect_bytes, expect_eq, Digest16, Flag, Hex, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// A rotation vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// Packed bits and all 31 rotations, index `k + 15`.
    AllRotations {
        /// Packed bits (1,600 bytes).
        input: Hex,
        /// 31 packed results.
        rotations: Vec<Hex>,
    },
    /// Packed bits rotated by one `k` (any integer; taken mod 200 columns).
    Bits {
        /// Packed bits.
        input: Hex,
        /// Columns.
        k: i32,
        /// Packed result.
        expected: Hex,
    },
    /// The plain coefficients of a template (masked code, trimmed mask) in the packed layout,
    /// rotated as share coefficients: the same as the coefficients of the rotated template.
    Coefs {
        /// The template.
        template: PackedTemplate,
        /// Columns.
        k: i32,
        /// Rotated code coefficients (12,800).
        code: Digest16,
        /// Rotated trimmed mask coefficients (6,400).
        trimmed_mask: Digest16,
    },
}

fn rotated_packed(input: &Hex, k: i32) -> Result<Vec<u8>, String> {
    Ok(packed(&rotate_bits(&bits(input, "input")?, k)))
}

fn coefs(template: &PackedTemplate, k: i32) -> Result<(Vec<u16>, Vec<u16>), String> {
    let t = template.template()?;
    let mut code = vec![0u16; CODE_COEFS];
    let mut mask = vec![0u16; MASK_COEFS];
    let (mut c, mut m) = ([0u16; CODE_COEFS], [0u16; MASK_COEFS]);
    code_coefs(&t, &mut c);
    mask_coefs(&t, &mut m);
    // Garbage first: coefficients the rotation fails to write would show.
    code.fill(0xA5A5);
    mask.fill(0xA5A5);
    rotate_coefs(&c, k, &mut code);
    rotate_coefs(&m, k, &mut mask);
    // The rotation of share coefficients is the rotation of the template.
    let r = t.rotated(k);
    code_coefs(&r, &mut c);
    mask_coefs(&r, &mut m);
    if c[..] != code[..] || m[..] != mask[..] {
        return Err(format!(
            "rotating coefficients by {k} differs from the coefficients of the rotated template"
        ));
    }
    Ok((code, mask))
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::Rotations;
    const DESCRIPTION: &'static str = "Rotation by k columns: each 800-bit row of the packed \
        (16, 200, 2, 2) bits shifted cyclically by 4k bits, as numpy.roll(x, k, axis=1); and \
        the same rotation on coefficients in the share layout, where each 800-coefficient \
        chunk rotates by 4k.";

    fn generate(sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let f = &sources.all_rotations;
        let decode = |v: &serde_json::Value| -> Result<Vec<u8>, String> {
            BASE64
                .decode(v.as_str().ok_or("fixture value is not a string")?)
                .map_err(|e| e.to_string())
        };
        let input = Hex(decode(&f["code"])?);
        let mut fixture_rotations = Vec::new();
        for k in rotations() {
            let want = decode(&f["rotations"][k.to_string()])?;
            if rotated_packed(&input, k)? != want {
                return Err(format!(
                    "open-iris all_rotations: rotation {k} not reproduced"
                ));
            }
            fixture_rotations.push(Hex(want));
        }
        let mut out: Vec<(String, Vec<Flag>, Case)> = vec![(
            "open-iris fixture all_rotations: one code and its 31 rotations".to_string(),
            vec![Flag::OpenIrisFixture],
            Case::AllRotations {
                input: input.clone(),
                rotations: fixture_rotations,
            },
        )];
        let t = random_template("rotations/coefs", 0.2);
        let code = Hex(packed(t.code()));
        for k in [200, -201, 1000] {
            out.push((
                format!("rotation by {k} columns, taken mod 200"),
                vec![Flag::RotationOutOfRange, Flag::Synthetic],
                Case::Bits {
                    input: code.clone(),
                    k,
                    expected: Hex(rotated_packed(&code, k)?),
                },
            ));
        }
        for k in [-15, -1, 0, 7, 15] {
            let template = PackedTemplate::of(&t);
            let (c, m) = coefs(&template, k)?;
            out.push((
                format!("template coefficients in the share layout rotated by {k}"),
                vec![Flag::Synthetic],
                Case::Coefs {
                    template,
                    k,
                    code: Digest16::of(&c),
                    trimmed_mask: Digest16::of(&m),
                },
            ));
        }
        Ok(Vector::numbered(out))
    }

    fn verify(vector: &Vector<Case>, _all: &[Vector<Case>]) -> Result<(), String> {
        match &vector.case {
            Case::AllRotations {
                input,
                rotations: want,
            } => {
                expect_eq("rotations", &want.len(), &ROTATION_COUNT)?;
                for (k, want) in rotations().zip(want) {
                    expect_bytes(
                        &format!("rotation {k}"),
                        &rotated_packed(input, k)?,
                        &want.0,
                    )?;
                }
                Ok(())
            }
            Case::Bits { input, k, expected } => {
                expect_bytes("rotated", &rotated_packed(input, *k)?, &expected.0)
            }
            Case::Coefs {
                template,
                k,
                code,
                trimmed_mask,
            } => {
                let (c, m) = coefs(template, *k)?;
                code.check(&c, "code")?;
                trimmed_mask.check(&m, "trimmed_mask")
            }
        }
    }
}

//! `template_codec`: open-iris template JSON in, bits out (or the exact rejection).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use sdk_orb::template::{IrisTemplate, TemplateError, TemplatePolicy};
use sdk_orb::CODE_BITS;

use crate::common::{packed, random_template};
use crate::format::{expect_bytes, expect_eq, Flag, Hex, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// A template vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// `input` parses under `min_usable_bits` to these bits and serialises to `serialised`.
    Accept {
        /// The JSON bytes.
        input: Hex,
        /// The policy: fewest usable mask bits.
        min_usable_bits: usize,
        /// Packed code bits.
        code: Hex,
        /// Packed mask bits.
        mask: Hex,
        /// `iris_code_version`.
        version: String,
        /// Usable mask bits.
        usable_bits: usize,
        /// What `to_open_iris_json` writes (Python `json.dumps` of the dict).
        serialised: Hex,
    },
    /// `input` is rejected under `min_usable_bits` with `error`.
    Reject {
        /// The bytes.
        input: Hex,
        /// The policy: fewest usable mask bits.
        min_usable_bits: usize,
        /// The exact error.
        error: TemplateErrorKind,
    },
}

/// [`TemplateError`] as it appears in vectors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum TemplateErrorKind {
    /// Not a JSON object with the three string fields.
    Json,
    /// A field is not standard base64.
    Base64 {
        /// The field.
        field: String,
    },
    /// A field decodes to the wrong number of bytes.
    Length {
        /// The field.
        field: String,
        /// Bytes expected.
        expected: usize,
        /// Bytes found.
        actual: usize,
    },
    /// `iris_code_version` is too long.
    VersionTooLong {
        /// Its length.
        len: usize,
    },
    /// Real and imaginary mask bits differ.
    MaskPartsDiffer {
        /// Plain index of the real-part bit.
        bit: usize,
    },
    /// Too few usable bits.
    TooFewUsableBits {
        /// Found.
        usable: usize,
        /// Required.
        required: usize,
    },
}

impl TemplateErrorKind {
    /// The vector form of an SDK error.
    ///
    /// # Errors
    /// An error kind this format does not know (a new SDK variant: extend the format).
    pub fn from_sdk(e: TemplateError) -> Result<TemplateErrorKind, String> {
        Ok(match e {
            TemplateError::Json => TemplateErrorKind::Json,
            TemplateError::Base64 { field } => TemplateErrorKind::Base64 {
                field: field.to_string(),
            },
            TemplateError::Length {
                field,
                expected,
                actual,
            } => TemplateErrorKind::Length {
                field: field.to_string(),
                expected,
                actual,
            },
            TemplateError::VersionTooLong { len } => TemplateErrorKind::VersionTooLong { len },
            TemplateError::MaskPartsDiffer { bit } => TemplateErrorKind::MaskPartsDiffer { bit },
            TemplateError::TooFewUsableBits { usable, required } => {
                TemplateErrorKind::TooFewUsableBits { usable, required }
            }
            other => return Err(format!("template error without a vector form: {other:?}")),
        })
    }
}

/// Python's `json.dumps` of an open-iris dict, in its key order.
pub fn dumps(codes: &str, masks: &str, version: &str) -> Vec<u8> {
    format!(
        "{{\"iris_codes\": \"{codes}\", \"mask_codes\": \"{masks}\", \"iris_code_version\": \"{version}\"}}"
    )
    .into_bytes()
}

fn fixture_str<'a>(v: &'a serde_json::Value, key: &str) -> Result<&'a str, String> {
    v[key]
        .as_str()
        .ok_or_else(|| format!("fixture field {key} is not a string"))
}

fn run(input: &[u8], min_usable_bits: usize) -> Result<IrisTemplate, TemplateError> {
    IrisTemplate::from_open_iris_json(input, &TemplatePolicy { min_usable_bits })
}

fn accept(
    comment: &str,
    flags: Vec<Flag>,
    input: Vec<u8>,
    min_usable_bits: usize,
) -> Result<(String, Vec<Flag>, Case), String> {
    let t = run(&input, min_usable_bits).map_err(|e| format!("{comment}: {e}"))?;
    let mut out = vec![0u8; t.json_len()];
    let n = t.to_open_iris_json(&mut out).map_err(|e| e.to_string())?;
    out.truncate(n);
    if flags.contains(&Flag::CanonicalInput) != (out == input) {
        return Err(format!("{comment}: canonical flag does not fit"));
    }
    Ok((
        comment.to_string(),
        flags,
        Case::Accept {
            input: Hex(input),
            min_usable_bits,
            code: Hex(packed(t.code())),
            mask: Hex(packed(t.mask())),
            version: t.version().to_string(),
            usable_bits: t.usable_bits(),
            serialised: Hex(out),
        },
    ))
}

fn reject(
    comment: &str,
    input: Vec<u8>,
    min_usable_bits: usize,
) -> Result<(String, Vec<Flag>, Case), String> {
    let e = match run(&input, min_usable_bits) {
        Ok(_) => return Err(format!("{comment}: accepted")),
        Err(e) => TemplateErrorKind::from_sdk(e)?,
    };
    Ok((
        comment.to_string(),
        vec![Flag::EdgeCase, Flag::Invalid],
        Case::Reject {
            input: Hex(input),
            min_usable_bits,
            error: e,
        },
    ))
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::TemplateCodec;
    const DESCRIPTION: &'static str = "open-iris template JSON (base64 numpy.packbits of the \
        (16, 200, 2, 2) code and mask): parsing, validation against a minimum of usable bits, \
        serialisation as Python json.dumps writes it, and the exact TemplateError of rejected \
        inputs.";

    fn generate(sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let fixture_policy = TemplatePolicy::from_min_usable_fraction(0.45).min_usable_bits;
        let default_policy = TemplatePolicy::default().min_usable_bits;
        let pair = &sources.random_pair;
        let a = &pair["template_a"];
        let b = &pair["template_b"];
        let (a_codes, a_masks, a_version) = (
            fixture_str(a, "iris_codes")?,
            fixture_str(a, "mask_codes")?,
            fixture_str(a, "iris_code_version")?,
        );
        let fixture_a = dumps(a_codes, a_masks, a_version);
        let fixture_b = dumps(
            fixture_str(b, "iris_codes")?,
            fixture_str(b, "mask_codes")?,
            fixture_str(b, "iris_code_version")?,
        );
        // The same template with other key order and no spaces: still accepted.
        let compact = format!(
            "{{\"iris_code_version\":\"{a_version}\",\"mask_codes\":\"{a_masks}\",\"iris_codes\":\"{a_codes}\"}}"
        )
        .into_bytes();
        let synthetic = random_template("template_codec/synthetic", 0.1);
        let mut synthetic_json = vec![0u8; synthetic.json_len()];
        synthetic
            .to_open_iris_json(&mut synthetic_json)
            .map_err(|e| e.to_string())?;

        let b64 = |bytes: &[u8]| BASE64.encode(bytes);
        let ones = b64(&[0xFF; 1600]);
        let zeros = b64(&[0u8; 1600]);
        let mut bad_char = a_codes.to_string();
        bad_char.replace_range(100..101, "*");
        let mut bad_mask = a_masks.to_string();
        bad_mask.replace_range(7..8, "-");
        // Real and imaginary mask bit of pair (bit 802, 803) differ: byte 100 = 0b1101_1111.
        let mut parts = [0xFFu8; 1600];
        parts[100] = 0b1101_1111;
        let parts_differ = b64(&parts);

        let cases = vec![
            accept(
                "open-iris fixture random_pair.template_a, as json.dumps writes it",
                vec![Flag::OpenIrisFixture, Flag::CanonicalInput],
                fixture_a.clone(),
                fixture_policy,
            )?,
            accept(
                "open-iris fixture random_pair.template_b, as json.dumps writes it",
                vec![Flag::OpenIrisFixture, Flag::CanonicalInput],
                fixture_b,
                fixture_policy,
            )?,
            accept(
                "template_a with keys reordered and no whitespace",
                vec![Flag::NonCanonicalInput, Flag::OpenIrisFixture],
                compact,
                fixture_policy,
            )?,
            accept(
                "random template, 10% of pairs masked, default policy",
                vec![Flag::CanonicalInput, Flag::Synthetic],
                synthetic_json,
                default_policy,
            )?,
            accept(
                "all-zero code, all bits usable, empty version string",
                vec![Flag::CanonicalInput, Flag::EdgeCase],
                dumps(&zeros, &ones, ""),
                CODE_BITS,
            )?,
            reject(
                "open-iris fixture under the default 70% policy",
                fixture_a,
                default_policy,
            )?,
            reject("not JSON", b"not json".to_vec(), 0)?,
            reject(
                "mask_codes missing",
                format!("{{\"iris_codes\": \"{ones}\", \"iris_code_version\": \"v2.1\"}}")
                    .into_bytes(),
                0,
            )?,
            reject(
                "iris_codes is a number",
                format!("{{\"iris_codes\": 5, \"mask_codes\": \"{ones}\", \"iris_code_version\": \"v2.1\"}}")
                    .into_bytes(),
                0,
            )?,
            reject(
                "a '*' inside iris_codes",
                dumps(&bad_char, a_masks, a_version),
                0,
            )?,
            reject(
                "a '-' inside mask_codes",
                dumps(a_codes, &bad_mask, a_version),
                0,
            )?,
            reject(
                "iris_codes one byte short",
                dumps(&b64(&[0u8; 1599]), &ones, "v2.1"),
                0,
            )?,
            reject(
                "mask_codes three bytes long",
                dumps(&ones, &b64(&[0xFF; 1603]), "v2.1"),
                0,
            )?,
            reject(
                "mask_codes empty",
                dumps(&ones, "", "v2.1"),
                0,
            )?,
            reject(
                "iris_code_version of 33 bytes",
                dumps(&ones, &ones, &"v".repeat(33)),
                0,
            )?,
            reject(
                "real and imaginary mask bits 802 and 803 differ",
                dumps(&ones, &parts_differ, "v2.1"),
                0,
            )?,
            reject(
                "one usable bit pair short of an all-usable policy",
                dumps(&ones, &b64(&{
                    let mut m = [0xFFu8; 1600];
                    m[1599] = 0xFC;
                    m
                }), "v2.1"),
                CODE_BITS,
            )?,
        ];
        Ok(Vector::numbered(cases))
    }

    fn verify(vector: &Vector<Case>, _all: &[Vector<Case>]) -> Result<(), String> {
        match &vector.case {
            Case::Accept {
                input,
                min_usable_bits,
                code,
                mask,
                version,
                usable_bits,
                serialised,
            } => {
                let t = run(&input.0, *min_usable_bits).map_err(|e| format!("rejected: {e}"))?;
                expect_bytes("code", &packed(t.code()), &code.0)?;
                expect_bytes("mask", &packed(t.mask()), &mask.0)?;
                expect_eq("version", &t.version(), &version.as_str())?;
                expect_eq("usable_bits", &t.usable_bits(), usable_bits)?;
                // Garbage first: bytes the writer fails to write would show.
                let mut out = vec![0xA5u8; t.json_len() + 7];
                let n = t.to_open_iris_json(&mut out).map_err(|e| e.to_string())?;
                expect_eq("serialised length", &n, &t.json_len())?;
                if out[n..].iter().any(|&b| b != 0xA5) {
                    return Err("serialiser wrote past its length".to_string());
                }
                expect_bytes("serialised", &out[..n], &serialised.0)?;
                if vector.flags.contains(&Flag::CanonicalInput) {
                    expect_bytes("serialised (canonical input)", &out[..n], &input.0)?;
                }
                if vector.flags.contains(&Flag::NonCanonicalInput) && out[..n] == input.0[..] {
                    return Err("flagged non-canonical, but serialises to the input".to_string());
                }
                Ok(())
            }
            Case::Reject {
                input,
                min_usable_bits,
                error,
            } => match run(&input.0, *min_usable_bits) {
                Ok(_) => Err("accepted".to_string()),
                Err(e) => expect_eq("error", &TemplateErrorKind::from_sdk(e)?, error),
            },
        }
    }
}

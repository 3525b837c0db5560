//! Turns the SDK's conformance vectors (`conformance-vectors/vectors/*.json`, in this
//! repository) into `vectors.rs` for the firmware: inputs as bytes, expected outputs as
//! values, or as SHA-256 digests where the JSON keeps only a digest. Large byte strings go into
//! files beside it and are included with `include_bytes!`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

const FAMILIES: [&str; 12] = [
    "template_codec",
    "masked_bitvectors",
    "rotations",
    "ring",
    "shamir",
    "preprocess",
    "envelope_sealing",
    "envelope_rejections",
    "payload_rejections",
    "envelope_sealing_v2",
    "envelope_rejections_v2",
    "payload_rejections_v2",
];

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../conformance-vectors/vectors");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let mut g = Gen {
        out_dir,
        blobs: 0,
        src: String::new(),
    };
    g.src.push_str("pub static CASES: &[Vector] = &[\n");
    for family in FAMILIES {
        let path = root.join(format!("{family}.json"));
        println!("cargo:rerun-if-changed={}", path.display());
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file: Value = serde_json::from_str(&text).expect("vector file is JSON");
        assert_eq!(file["family"], family, "{}", path.display());
        for v in file["vectors"].as_array().expect("vectors") {
            let id = v["id"].as_u64().expect("id");
            let (kind, case) = single(&v["case"]);
            let flags: Vec<&str> = v["flags"]
                .as_array()
                .expect("flags")
                .iter()
                .map(|f| f.as_str().expect("flag"))
                .collect();
            let body = g.case(family, kind, case, &flags);
            writeln!(
                g.src,
                "    Vector {{ family: {family:?}, id: {id}, case: {body} }},"
            )
            .expect("write");
        }
    }
    g.src.push_str("];\n");
    std::fs::write(g.out_dir.join("vectors.rs"), &g.src).expect("write vectors.rs");
}

struct Gen {
    out_dir: PathBuf,
    blobs: usize,
    src: String,
}

/// The one key of an externally tagged enum value, and its content.
fn single(v: &Value) -> (&str, &Value) {
    match v {
        Value::String(s) => (s.as_str(), &Value::Null),
        Value::Object(m) if m.len() == 1 => {
            let (k, v) = m.iter().next().expect("one key");
            (k.as_str(), v)
        }
        other => panic!("not a tagged case: {other}"),
    }
}

fn hex(v: &Value) -> Vec<u8> {
    let s = v.as_str().unwrap_or_else(|| panic!("not hex: {v}"));
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn arr(bytes: &[u8]) -> String {
    let mut s = String::from("[");
    for b in bytes {
        write!(s, "{b},").expect("write");
    }
    s.push(']');
    s
}

/// Four little-endian u16 coefficients.
fn el(v: &Value) -> String {
    let b = hex(v);
    assert_eq!(b.len(), 8, "ring element");
    let c: Vec<String> = b
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]).to_string())
        .collect();
    format!("[{}]", c.join(","))
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

/// `Debug` of the SDK error a vector names: `{"length": {"field": "x", ...}}` becomes
/// `Length { field: "x", ... }`; the tuple variants take their one field unnamed.
fn error_debug(v: &Value) -> String {
    const TUPLE: [&str; 4] = [
        "malformed",
        "missing_field",
        "unsupported_version",
        "unknown_request_type",
    ];
    let (kind, fields) = single(v);
    // The vectors record every wrong length as `length`; the SDK tells an oversized envelope
    // and a wrong-sized share apart from other fields.
    if kind == "length" {
        let field = fields["field"].as_str().expect("length field");
        let (expected, actual) = (int(&fields["expected"]), int(&fields["actual"]));
        return if field == "envelope" {
            format!("Oversized {{ limit: {expected}, actual: {actual} }}")
        } else if field.starts_with("left.") || field.starts_with("right.") {
            format!("ShareLength {{ field: {field:?}, expected: {expected}, actual: {actual} }}")
        } else {
            format!("Length {{ field: {field:?}, expected: {expected}, actual: {actual} }}")
        };
    }
    let name: String = kind
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            let first = c.next().expect("word").to_ascii_uppercase();
            std::iter::once(first).chain(c).collect::<String>()
        })
        .collect();
    let value = |v: &Value| match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    match fields {
        Value::Null => name,
        Value::Object(m) if TUPLE.contains(&kind) => {
            assert_eq!(m.len(), 1, "{kind}");
            format!("{name}({})", value(m.values().next().expect("one field")))
        }
        Value::Object(m) => {
            let inner: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k}: {}", value(v)))
                .collect();
            format!("{name} {{ {} }}", inner.join(", "))
        }
        other => panic!("error fields: {other}"),
    }
}

/// A JSON list of hex strings as a list of byte arrays.
fn list(v: &Value) -> String {
    let items: Vec<String> = v
        .as_array()
        .expect("a list")
        .iter()
        .map(|k| arr(&hex(k)))
        .collect();
    items.join(",")
}

/// `"accept"` or the `Debug` of the rejecting error; `None` for a stage not reached.
fn outcome(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::String(s) if s == "accept" => "Some(\"accept\")".into(),
        other => {
            let (kind, e) = single(other);
            assert_eq!(kind, "reject");
            format!("Some({:?})", error_debug(e))
        }
    }
}

impl Gen {
    /// A byte string as an expression of type `&'static [u8; N]`.
    fn blob(&mut self, bytes: &[u8]) -> String {
        if bytes.is_empty() {
            return "&[0u8; 0]".into();
        }
        if bytes.len() <= 64 {
            return format!("&{}", arr(bytes));
        }
        self.blobs += 1;
        let name = format!("blob{}.bin", self.blobs);
        std::fs::write(self.out_dir.join(&name), bytes).expect("write blob");
        format!("include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{name}\"))")
    }

    /// A vector's `patches` as `(offset, bytes)` pairs.
    fn patches(&mut self, v: &Value) -> String {
        let mut out = Vec::new();
        for p in v.as_array().expect("patches") {
            let bytes = self.blob(&hex(&p["bytes"]));
            out.push(format!("({}, {bytes})", p["offset"]));
        }
        out.join(",")
    }

    fn template(&mut self, v: &Value) -> String {
        let code = self.blob(&hex(&v["code"]));
        let mask = self.blob(&hex(&v["mask"]));
        format!("Packed {{ code: {code}, mask: {mask} }}")
    }

    fn keys(&self, v: &Value) -> String {
        let secret: Vec<String> = v["node_secret_keys"]
            .as_array()
            .expect("secret keys")
            .iter()
            .map(|k| arr(&hex(k)))
            .collect();
        let public: Vec<u8> = v["node_public_keys"]
            .as_array()
            .expect("public keys")
            .iter()
            .flat_map(hex)
            .collect();
        format!(
            "Keys {{ node_secret: [{}], node_public: {}, orb_seed: {}, orb_public: {} }}",
            secret.join(","),
            arr(&public),
            arr(&hex(&v["orb_secret_key"])),
            arr(&hex(&v["orb_public_key"]))
        )
    }

    fn request(&self, v: &Value) -> String {
        let t = match v["request_type"].as_str().expect("request type") {
            "uniqueness" => "Uniqueness",
            "uniqueness_check" => "UniquenessCheck",
            "deletion" => "Deletion",
            "reauth" => "Reauth",
            "reset" => "Reset",
            other => panic!("request type {other}"),
        };
        format!(
            "RequestMeta {{ request_id: RequestId({}), request_type: RequestType::{t}, \
             timestamp_ms: {}, serial_id: {}, or_policy: {} }}",
            arr(&hex(&v["request_id"])),
            v["timestamp_ms"],
            v["serial_id"],
            v["or_policy"]
        )
    }

    fn digest16(&self, v: &Value) -> String {
        format!(
            "Digest16 {{ len: {}, sha256: {} }}",
            v["len"],
            arr(&hex(&v["sha256"]))
        )
    }

    fn digests16(&self, v: &Value) -> String {
        let d: Vec<String> = v
            .as_array()
            .expect("digests")
            .iter()
            .map(|d| self.digest16(d))
            .collect();
        format!("[{}]", d.join(","))
    }

    fn dots(v: &Value) -> String {
        let distance = match &v["distance"] {
            Value::Null => "None".to_string(),
            d => format!("Some({:?}f64)", d.as_f64().expect("distance")),
        };
        format!(
            "Dots {{ cd: {}, md: {}, distance: {distance}, matches: {} }}",
            v["cd"], v["md"], v["matches"]
        )
    }

    fn case(&mut self, family: &str, kind: &str, c: &Value, flags: &[&str]) -> String {
        match (family, kind) {
            ("template_codec", "accept") => {
                let input = self.blob(&hex(&c["input"]));
                let mut code_mask = hex(&c["code"]);
                code_mask.extend(hex(&c["mask"]));
                let code_mask = self.blob(&code_mask);
                let serialised = self.blob(&hex(&c["serialised"]));
                format!(
                    "Case::TemplateAccept {{ input: {input}, min_usable_bits: {}, code_mask: \
                     {code_mask}, version: {}, usable_bits: {}, serialised: {serialised}, \
                     canonical: {}, non_canonical: {} }}",
                    c["min_usable_bits"],
                    c["version"],
                    c["usable_bits"],
                    flags.contains(&"canonical_input"),
                    flags.contains(&"non_canonical_input")
                )
            }
            ("template_codec", "reject") => {
                let input = self.blob(&hex(&c["input"]));
                format!(
                    "Case::TemplateReject {{ input: {input}, min_usable_bits: {}, error: {:?} }}",
                    c["min_usable_bits"],
                    error_debug(&c["error"])
                )
            }
            ("masked_bitvectors", "masked_value") => format!(
                "Case::MaskedValue {{ code: {}, mask: {}, value: {} }}",
                c["code"], c["mask"], c["value"]
            ),
            ("masked_bitvectors", "threshold_coefficient") => format!(
                "Case::Threshold {{ threshold: {:?}f64, a: {} }}",
                c["threshold"].as_f64().expect("threshold"),
                c["a"]
            ),
            ("masked_bitvectors", "pair") => {
                let probe = self.template(&c["probe"]);
                let gallery = self.template(&c["gallery"]);
                let rotated: Vec<String> = c["rotated"]
                    .as_array()
                    .expect("rotated")
                    .iter()
                    .map(Self::dots)
                    .collect();
                let min = match &c["min_over_rotations"] {
                    Value::Null => "None".to_string(),
                    m => format!(
                        "Some(({:?}f64, {}))",
                        m[0].as_f64().expect("distance"),
                        m[1]
                    ),
                };
                format!(
                    "Case::MaskedPair(&MaskedPair {{ probe: {probe}, gallery: {gallery}, a: {}, \
                     probe_bitvector: {}, unrotated: {}, rotated: [{}], min_over_rotations: \
                     {min}, matches: {}, flag_match: {}, flag_no_common_bits: {} }})",
                    c["a"],
                    self.digest16(&c["probe_bitvector"]),
                    Self::dots(&c["unrotated"]),
                    rotated.join(","),
                    c["matches"],
                    flags.contains(&"match"),
                    flags.contains(&"no_common_bits")
                )
            }
            ("rotations", "all_rotations") => {
                let input = self.blob(&hex(&c["input"]));
                let all: Vec<Vec<u8>> = c["rotations"]
                    .as_array()
                    .expect("rotations")
                    .iter()
                    .map(hex)
                    .collect();
                assert_eq!(all.len(), 31);
                let all = self.blob(&all.concat());
                format!("Case::RotationsAll {{ input: {input}, rotations: {all} }}")
            }
            ("rotations", "bits") => {
                let input = self.blob(&hex(&c["input"]));
                let expected = self.blob(&hex(&c["expected"]));
                format!(
                    "Case::RotationBits {{ input: {input}, k: {}, expected: {expected} }}",
                    int(&c["k"])
                )
            }
            ("rotations", "coefs") => {
                let t = self.template(&c["template"]);
                format!(
                    "Case::RotationCoefs {{ template: {t}, k: {}, code: {}, mask: {} }}",
                    int(&c["k"]),
                    self.digest16(&c["code"]),
                    self.digest16(&c["trimmed_mask"])
                )
            }
            ("ring", "constants") => {
                let rows = |k: &str| -> String {
                    let r: Vec<String> = c[k].as_array().expect("rows").iter().map(el).collect();
                    format!("[{}]", r.join(","))
                };
                format!(
                    "Case::RingConstants {{ s: {}, s_inv: {}, m: {}, evaluation_points: {}, \
                     lagrange_at_zero: {} }}",
                    rows("s"),
                    rows("s_inv"),
                    rows("m"),
                    rows("evaluation_points"),
                    rows("lagrange_at_zero")
                )
            }
            ("ring", op) => {
                let op_name = match op {
                    "add" => "Add",
                    "sub" => "Sub",
                    "mul" => "Mul",
                    "mul_x" => "MulX",
                    "inverse" => "Inverse",
                    "from_basis_a" => "FromBasisA",
                    "to_basis_a" => "ToBasisA",
                    "to_basis_b" => "ToBasisB",
                    other => panic!("ring case {other}"),
                };
                let b = if c["b"].is_null() {
                    "[0; 4]".to_string()
                } else {
                    el(&c["b"])
                };
                let expected = if c["expected"].is_null() {
                    "None".to_string()
                } else {
                    format!("Some({})", el(&c["expected"]))
                };
                format!(
                    "Case::Ring {{ op: RingOp::{op_name}, a: {}, b: {b}, expected: {expected}, \
                     non_unit: {} }}",
                    el(&c["a"]),
                    flags.contains(&"non_unit")
                )
            }
            ("shamir", "element") => {
                let shares: Vec<String> = c["shares"]
                    .as_array()
                    .expect("shares")
                    .iter()
                    .map(el)
                    .collect();
                format!(
                    "Case::ShamirElement {{ plain: {}, randomness: {}, shares: [{}], \
                     zero_randomness: {} }}",
                    el(&c["plain"]),
                    el(&c["randomness"]),
                    shares.join(","),
                    flags.contains(&"zero_randomness")
                )
            }
            ("shamir", "eye") => {
                let t = self.template(&c["template"]);
                format!(
                    "Case::ShamirEye {{ template: {t}, rng_seed: {}, plain_code: {}, \
                     plain_mask: {}, code_shares: {}, mask_shares: {} }}",
                    arr(&hex(&c["rng_seed"])),
                    self.digest16(&c["plain_code"]),
                    self.digest16(&c["plain_mask"]),
                    self.digests16(&c["code_shares"]),
                    self.digests16(&c["mask_shares"])
                )
            }
            ("preprocess", "element") => format!(
                "Case::PreprocessElement {{ party: {}, share: {}, expected: {} }}",
                c["party"],
                el(&c["share"]),
                el(&c["expected"])
            ),
            ("preprocess", "eye") => {
                let t = self.template(&c["template"]);
                format!(
                    "Case::PreprocessEye {{ template: {t}, rng_seed: {}, code: {}, mask: {} }}",
                    arr(&hex(&c["rng_seed"])),
                    self.digests16(&c["code"]),
                    self.digests16(&c["mask"])
                )
            }
            ("envelope_sealing_v2", "seal") => {
                let left = self.template(&c["left"]);
                let right = self.template(&c["right"]);
                let envelope = self.blob(&hex(&c["envelope"]));
                let seeds: Vec<String> = c["keys"]["node_seeds"]
                    .as_array()
                    .expect("node seeds")
                    .iter()
                    .map(|k| arr(&hex(k)))
                    .collect();
                format!(
                    "Case::SealV2(&SealV2 {{ rng_seed: {}, request: {}, left: {left}, right: \
                     {right}, node_seeds: [{}], orb_seed: {}, digest: {}, envelope: {envelope} }})",
                    arr(&hex(&c["rng_seed"])),
                    self.request(&c["request"]),
                    seeds.join(","),
                    arr(&hex(&c["keys"]["orb_secret_key"])),
                    arr(&hex(&c["digest"]))
                )
            }
            ("envelope_sealing", "seal") => {
                let left = self.template(&c["left"]);
                let right = self.template(&c["right"]);
                let envelope = self.blob(&hex(&c["envelope"]));
                let enc: Vec<String> = c["encapsulated_keys"]
                    .as_array()
                    .expect("encapsulated keys")
                    .iter()
                    .map(|k| arr(&hex(k)))
                    .collect();
                format!(
                    "Case::Seal(&Seal {{ rng_seed: {}, request: {}, left: {left}, right: \
                     {right}, keys: {}, encapsulated_keys: [{}], digest: {}, signature: {}, \
                     envelope: {envelope} }})",
                    arr(&hex(&c["rng_seed"])),
                    self.request(&c["request"]),
                    self.keys(&c["keys"]),
                    enc.join(","),
                    arr(&hex(&c["digest"])),
                    arr(&hex(&c["signature"]))
                )
            }
            ("envelope_rejections", "base") => {
                let envelope = self.blob(&hex(&c["envelope"]));
                format!(
                    "Case::EnvelopeBase(&EnvelopeBase {{ request: {}, keys: {}, envelope: \
                     {envelope} }})",
                    self.request(&c["request"]),
                    self.keys(&c["keys"])
                )
            }
            ("envelope_rejections", "reject") => {
                let patches = self.patches(&c["patches"]);
                format!(
                    "Case::EnvelopeReject {{ base: {}, length: {}, patches: &[{patches}], \
                     party: {}, parse: {}, signature: {}, open: {}, valid_signature: {} }}",
                    c["base"],
                    c["length"],
                    c["party"],
                    outcome(&c["parse"]),
                    outcome(&c["signature"]),
                    outcome(&c["open"]),
                    flags.contains(&"valid_signature")
                )
            }
            ("envelope_rejections_v2", "base") => {
                let envelope = self.blob(&hex(&c["envelope"]));
                format!(
                    "Case::EnvelopeBaseV2(&EnvelopeBaseV2 {{ request: {}, node_seeds: [{}], \
                     envelope: {envelope}, opened_sha256: [{}] }})",
                    self.request(&c["request"]),
                    list(&c["keys"]["node_seeds"]),
                    list(&c["opened_sha256"])
                )
            }
            // `node` and `intake` are the node's version setting and intake order: not the SDK's.
            ("envelope_rejections_v2", "reject") => {
                let patches = self.patches(&c["patches"]);
                format!(
                    "Case::EnvelopeRejectV2 {{ base: {}, length: {}, patches: &[{patches}], \
                     party: {}, parse: {}, signature: {}, open: {} }}",
                    c["base"],
                    c["length"],
                    c["party"],
                    outcome(&c["parse"]),
                    outcome(&c["signature"]),
                    outcome(&c["open"])
                )
            }
            ("payload_rejections_v2", "reject") => {
                let payload = self.blob(&hex(&c["payload"]));
                format!(
                    "Case::PayloadRejectV2 {{ party: {}, request_id: {}, payload: {payload}, \
                     error: {:?} }}",
                    c["party"],
                    arr(&hex(&c["request_id"])),
                    error_debug(&c["error"])
                )
            }
            ("payload_rejections", "reject") => {
                let payload = self.blob(&hex(&c["payload"]));
                format!(
                    "Case::PayloadReject {{ party: {}, request_id: {}, payload: {payload}, \
                     error: {:?} }}",
                    c["party"],
                    arr(&hex(&c["request_id"])),
                    error_debug(&c["error"])
                )
            }
            (family, kind) => panic!("{family}: unknown case {kind}"),
        }
    }
}

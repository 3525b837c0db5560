use super::*;
use crate::plaintext::{fractional_hamming_distance, min_distance_over_rotations};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::string::String;
use std::vec::Vec;

/// The open-iris fixtures; their origin and licences are in `testdata/open-iris/README.md`.
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/open-iris");

fn fixture(name: &str) -> serde_json::Value {
    let path = std::format!("{FIXTURES}/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// The fixtures are random templates with about half their bits masked, below the default
/// minimum, so they are parsed with a policy that accepts them.
fn fixture_policy() -> TemplatePolicy {
    TemplatePolicy::from_min_usable_fraction(0.45)
}

fn template_from(value: &serde_json::Value) -> IrisTemplate {
    let json = serde_json::to_vec(value).expect("serialises");
    IrisTemplate::from_open_iris_json(&json, &fixture_policy()).expect("fixture parses")
}

fn to_json(t: &IrisTemplate) -> Vec<u8> {
    let mut buf = std::vec![0u8; t.json_len()];
    let n = t.to_open_iris_json(&mut buf).expect("fits");
    assert_eq!(n, t.json_len());
    buf
}

fn json_with(codes: &str, masks: &str, version: &str) -> String {
    std::format!(
        "{{\"iris_codes\": \"{codes}\", \"mask_codes\": \"{masks}\", \"iris_code_version\": \"{version}\"}}"
    )
}

fn b64(bits: &IrisBits) -> String {
    let mut packed = [0u8; PACKED_BYTES];
    bits.to_packed(&mut packed);
    BASE64.encode(packed)
}

#[test]
fn random_pair_fixture_reproduces_the_distances() {
    let f = fixture("random_pair.json");
    let a = template_from(&f["template_a"]);
    let b = template_from(&f["template_b"]);
    let expected = f["fhd_no_rotation"].as_f64().expect("number");
    let got = fractional_hamming_distance(&a, &b).expect("common bits");
    assert!((got - expected).abs() < 1e-12, "{got} vs {expected}");
    let expected_min = f["fhd_min_over_31_rotations"].as_f64().expect("number");
    let (min, rotation) = min_distance_over_rotations(&a, &b).expect("common bits");
    assert!(
        (min - expected_min).abs() < 1e-12,
        "{min} vs {expected_min}"
    );
    assert_eq!(
        rotation as i64,
        f["best_rotation_of_a"].as_i64().expect("number")
    );
}

#[test]
fn all_rotations_fixture_matches_numpy_roll() {
    let f = fixture("all_rotations.json");
    let decode = |s: &serde_json::Value| {
        let mut packed = [0u8; PACKED_BYTES];
        let bytes = BASE64.decode(s.as_str().expect("string")).expect("base64");
        packed.copy_from_slice(&bytes);
        IrisBits::from_packed(&packed)
    };
    let code = decode(&f["code"]);
    let rotations = f["rotations"].as_object().expect("object");
    assert_eq!(rotations.len(), 31);
    for (k, expected) in rotations {
        let k: i32 = k.parse().expect("integer key");
        assert!(
            crate::rotation::rotate_bits(&code, k) == decode(expected),
            "rotation {k}"
        );
    }
}

#[test]
fn fixture_templates_serialise_back_to_the_same_bytes() {
    let f = fixture("random_pair.json");
    for key in ["template_a", "template_b"] {
        let t = template_from(&f[key]);
        let ours = to_json(&t);
        let theirs: serde_json::Value = serde_json::from_slice(&ours).expect("valid JSON");
        assert_eq!(theirs, f[key]);
        // Python's json.dumps layout, byte for byte.
        let expected = json_with(
            f[key]["iris_codes"].as_str().expect("s"),
            f[key]["mask_codes"].as_str().expect("s"),
            f[key]["iris_code_version"].as_str().expect("s"),
        );
        assert_eq!(ours, expected.as_bytes());
    }
}

#[test]
fn random_templates_round_trip() {
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    for _ in 0..20 {
        let t = random(&mut rng, 0.2);
        let json = to_json(&t);
        let back =
            IrisTemplate::from_open_iris_json(&json, &TemplatePolicy::default()).expect("parses");
        assert!(back == t);
        let mut packed = [0u8; PACKED_BYTES];
        t.code().to_packed(&mut packed);
        assert!(IrisBits::try_from(&packed[..]).expect("length") == *t.code());
    }
}

#[test]
fn the_writer_fills_exactly_what_it_reports() {
    let mut rng = ChaCha20Rng::seed_from_u64(8);
    let t = random(&mut rng, 0.1);
    let mut buf = std::vec![0xA5u8; t.json_len() + 10];
    let n = t.to_open_iris_json(&mut buf).expect("fits");
    assert_eq!(n, t.json_len());
    assert!(buf[n..].iter().all(|&b| b == 0xA5));
    assert_eq!(
        t.to_open_iris_json(&mut buf[..n - 1]),
        Err(TemplateError::BufferTooSmall { needed: n })
    );
}

fn valid_parts() -> (String, String) {
    let mut rng = ChaCha20Rng::seed_from_u64(9);
    let t = random(&mut rng, 0.1);
    (b64(t.code()), b64(t.mask()))
}

fn parse(json: &str) -> Result<IrisTemplate, TemplateError> {
    IrisTemplate::from_open_iris_json(json.as_bytes(), &TemplatePolicy::default())
}

#[test]
fn not_json_or_missing_fields_is_a_json_error() {
    let (c, m) = valid_parts();
    assert_eq!(parse("not json").err(), Some(TemplateError::Json));
    let missing = std::format!("{{\"iris_codes\": \"{c}\", \"mask_codes\": \"{m}\"}}");
    assert_eq!(parse(&missing).err(), Some(TemplateError::Json));
    let wrong_type = std::format!(
        "{{\"iris_codes\": 5, \"mask_codes\": \"{m}\", \"iris_code_version\": \"v2.1\"}}"
    );
    assert_eq!(parse(&wrong_type).err(), Some(TemplateError::Json));
}

#[test]
fn bad_base64_is_rejected_per_field() {
    let (c, m) = valid_parts();
    let mut bad = c.clone();
    bad.replace_range(10..11, "!");
    assert_eq!(
        parse(&json_with(&bad, &m, "v2.1")).err(),
        Some(TemplateError::Base64 {
            field: "iris_codes"
        })
    );
    let mut bad = m.clone();
    bad.replace_range(0..1, "*");
    assert_eq!(
        parse(&json_with(&c, &bad, "v2.1")).err(),
        Some(TemplateError::Base64 {
            field: "mask_codes"
        })
    );
}

#[test]
fn wrong_lengths_are_rejected_with_the_length_found() {
    let (c, m) = valid_parts();
    let short = BASE64.encode([0u8; 1599]);
    assert_eq!(
        parse(&json_with(&short, &m, "v2.1")).err(),
        Some(TemplateError::Length {
            field: "iris_codes",
            expected: PACKED_BYTES,
            actual: 1599
        })
    );
    let long = BASE64.encode([0u8; 1601]);
    assert_eq!(
        parse(&json_with(&c, &long, "v2.1")).err(),
        Some(TemplateError::Length {
            field: "mask_codes",
            expected: PACKED_BYTES,
            actual: 1601
        })
    );
    let huge = BASE64.encode([0u8; 4000]);
    assert!(matches!(
        parse(&json_with(&huge, &m, "v2.1")).err(),
        Some(TemplateError::Length {
            field: "iris_codes",
            ..
        })
    ));
    let version = "v".repeat(MAX_VERSION_LEN + 1);
    assert_eq!(
        parse(&json_with(&c, &m, &version)).err(),
        Some(TemplateError::VersionTooLong {
            len: MAX_VERSION_LEN + 1
        })
    );
}

#[test]
fn differing_real_and_imaginary_mask_bits_are_rejected() {
    let (c, _) = valid_parts();
    for bit in [0usize, 2, 62, 64, 6398, 12_798] {
        let mut mask = IrisBits::ones();
        mask.set(bit + 1, false);
        assert_eq!(
            parse(&json_with(&c, &b64(&mask), "v2.1")).err(),
            Some(TemplateError::MaskPartsDiffer { bit }),
            "imaginary bit {} cleared",
            bit + 1
        );
        let mut mask = IrisBits::ones();
        mask.set(bit, false);
        assert_eq!(
            parse(&json_with(&c, &b64(&mask), "v2.1")).err(),
            Some(TemplateError::MaskPartsDiffer { bit }),
            "real bit {bit} cleared"
        );
    }
}

#[test]
fn too_few_usable_bits_are_rejected_at_the_policy_minimum() {
    let (c, _) = valid_parts();
    let required = TemplatePolicy::default().min_usable_bits;
    assert_eq!(required, 8960);
    let mut mask = IrisBits::zero();
    for i in 0..required {
        mask.set(i, true);
    }
    assert!(parse(&json_with(&c, &b64(&mask), "v2.1")).is_ok());
    mask.set(required - 1, false);
    mask.set(required - 2, false);
    assert_eq!(
        parse(&json_with(&c, &b64(&mask), "v2.1")).err(),
        Some(TemplateError::TooFewUsableBits {
            usable: required - 2,
            required
        })
    );
}

#[test]
fn debug_output_hides_the_bits() {
    let mut rng = ChaCha20Rng::seed_from_u64(10);
    let t = random(&mut rng, 0.1);
    let shown = std::format!("{t:?} {:?}", t.code());
    assert_eq!(
        shown,
        "IrisTemplate { version: \"v2.1\", .. } IrisBits { .. }"
    );
}

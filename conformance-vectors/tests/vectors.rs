//! The checked-in vectors are what the generator writes, they pass, and the replay notices a
//! changed constant or expected value and refuses files it does not understand.

use std::path::{Path, PathBuf};

use conformance_vectors::{
    corpus, default_vectors_dir, families_in, generate, verify_file, verify_text, Family, Sources,
};
use serde_json::Value;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ocelli-cv-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn text(family: Family) -> String {
    let path = default_vectors_dir().join(family.file_name());
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn edit(family: Family, f: impl FnOnce(&mut Value)) -> String {
    let mut v: Value = serde_json::from_str(&text(family)).expect("JSON");
    f(&mut v);
    serde_json::to_string(&v).expect("serialises")
}

#[test]
fn regenerating_reproduces_the_checked_in_files_byte_for_byte() {
    let sources =
        Sources::load(&Sources::default_dir()).expect("the open-iris fixtures in sdk-orb/testdata");
    let dir = scratch("generate");
    conformance_vectors::generate_dir(&dir, &sources).expect("generates");
    for family in Family::ALL {
        let fresh = std::fs::read(dir.join(family.file_name())).expect("written");
        let checked_in = text(family).into_bytes();
        assert!(
            fresh == checked_in,
            "{family}: regenerate with `cargo run -p conformance-vectors -- generate`"
        );
        // And generation is deterministic within one process.
        assert!(generate(family, &sources).expect("generates").into_bytes() == fresh);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_checked_in_vector_passes() {
    let dir = default_vectors_dir();
    let families = families_in(&dir).expect("every family present, nothing unknown");
    assert_eq!(families, Family::ALL.to_vec());
    for family in families {
        let report = verify_file(&dir, family).expect("loads");
        assert!(report.ok(), "{family}: {:?}", report.failures);
        assert!(report.vectors > 0);
    }
}

#[test]
fn a_changed_coefficient_of_s_fails_the_ring_family() {
    // S[1][0] = 58082 = 0xe2e2, stored little-endian as "e2e2" at the start of row 1.
    let changed = edit(Family::Ring, |v| {
        let vectors = v["vectors"].as_array_mut().expect("vectors");
        let constants = vectors
            .iter_mut()
            .find(|x| x["case"].get("constants").is_some())
            .expect("a constants vector");
        let row = &mut constants["case"]["constants"]["s"][1];
        assert_eq!(&row.as_str().expect("hex")[..4], "e2e2");
        *row = Value::String(format!("e3e2{}", &row.as_str().expect("hex")[4..]));
    });
    let report = verify_text(Family::Ring, &changed).expect("still loads");
    assert!(!report.ok());
    assert_eq!(report.failures.len(), 1);
    assert!(
        report.failures[0].1.contains("S row 1"),
        "{:?}",
        report.failures
    );
}

#[test]
fn a_changed_expected_value_fails_its_family() {
    // One coefficient of an S a result.
    let changed = edit(Family::Ring, |v| {
        let vectors = v["vectors"].as_array_mut().expect("vectors");
        let x = vectors
            .iter_mut()
            .find(|x| x["case"].get("from_basis_a").is_some())
            .expect("a from_basis_a vector");
        let e = &mut x["case"]["from_basis_a"]["expected"];
        let mut s = e.as_str().expect("hex").to_string();
        let flipped = if s.starts_with('0') { "1" } else { "0" };
        s.replace_range(0..1, flipped);
        *e = Value::String(s);
    });
    let report = verify_text(Family::Ring, &changed).expect("loads");
    assert_eq!(report.failures.len(), 1);

    // The error a node must report for a rejected envelope.
    let changed = edit(Family::EnvelopeRejections, |v| {
        v["vectors"][1]["case"]["reject"]["parse"] = serde_json::json!({"reject": "serial_id"});
    });
    let report = verify_text(Family::EnvelopeRejections, &changed).expect("loads");
    assert_eq!(report.failures.len(), 1);
    assert_eq!(report.failures[0].0, 2);

    // The reason a node's intake gives for a version 2 envelope, and a stage's error.
    for (id, field, wrong) in [
        (3, "intake", serde_json::json!("unsupported_version")),
        (
            3,
            "parse",
            serde_json::json!({"reject": {"unsupported_version": {"version": 2}}}),
        ),
        (22, "open", serde_json::json!({"reject": "signature"})),
    ] {
        let changed = edit(Family::EnvelopeRejectionsV2, |v| {
            v["vectors"][id - 1]["case"]["reject"][field] = wrong;
        });
        let report = verify_text(Family::EnvelopeRejectionsV2, &changed).expect("loads");
        assert_eq!(report.failures.len(), 1, "{field}");
        assert_eq!(report.failures[0].0, id as u32, "{field}");
        assert!(
            report.failures[0].1.starts_with(field),
            "{:?}",
            report.failures
        );
    }

    // One byte of a sealed envelope.
    let changed = edit(Family::EnvelopeSealing, |v| {
        let e = &mut v["vectors"][0]["case"]["seal"]["envelope"];
        let s = e.as_str().expect("hex");
        let last = if s.ends_with('0') { "1" } else { "0" };
        *e = Value::String(format!("{}{last}", &s[..s.len() - 1]));
    });
    let report = verify_text(Family::EnvelopeSealing, &changed).expect("loads");
    assert_eq!(report.failures.len(), 1);
}

/// Flips the last hex digit of a string value.
fn flip_last_digit(x: &mut Value) {
    let s = x.as_str().expect("hex");
    let last = if s.ends_with('0') { "1" } else { "0" };
    *x = Value::String(format!("{}{last}", &s[..s.len() - 1]));
}

#[test]
fn a_changed_share_or_threshold_fails_the_comparison_family() {
    // One party's share of x: only that vector fails, at that value.
    let changed = edit(Family::Comparison, |v| {
        flip_last_digit(&mut v["vectors"][0]["case"]["compare"]["parties"][1]["x"]);
    });
    let report = verify_text(Family::Comparison, &changed).expect("loads");
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    assert!(
        report.failures[0].1.contains("party 1 x"),
        "{:?}",
        report.failures
    );

    // A threshold coefficient one off: the recorded shares and openings no longer follow.
    let changed = edit(Family::Comparison, |v| {
        let a = &mut v["vectors"][1]["case"]["compare"]["threshold_a"];
        *a = serde_json::json!(a.as_u64().expect("a number") + 1);
    });
    let report = verify_text(Family::Comparison, &changed).expect("loads");
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    assert_eq!(report.failures[0].0, 2);

    // Input shares that no longer sum to the stated plaintext.
    let changed = edit(Family::Comparison, |v| {
        flip_last_digit(&mut v["vectors"][2]["case"]["compare"]["md_shares"][0]);
    });
    let report = verify_text(Family::Comparison, &changed).expect("loads");
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    assert!(
        report.failures[0].1.contains("do not sum"),
        "{:?}",
        report.failures
    );
}

/// The `requests` file cut down to the database and one batch (replaying every batch takes
/// seconds in a debug build).
fn database_and_batch(batch: usize, f: impl FnOnce(&mut Value)) -> String {
    edit(Family::Requests, |v| {
        let vectors = v["vectors"].as_array_mut().expect("vectors");
        assert!(vectors[0]["case"].get("database").is_some());
        let mut kept = vectors[batch].clone();
        kept["id"] = serde_json::json!(2);
        vectors.truncate(1);
        vectors.push(kept);
        f(v);
    })
}

#[test]
fn a_changed_outcome_or_policy_fails_the_requests_family() {
    // The re-authentication batch: its first request re-authenticates the right person.
    let reauth = 3;
    let untouched = database_and_batch(reauth, |_| {});
    let report = verify_text(Family::Requests, &untouched).expect("loads");
    assert!(report.ok(), "{:?}", report.failures);

    let changed = database_and_batch(reauth, |v| {
        let outcome = &mut v["vectors"][1]["case"]["batch"]["outcomes"][0];
        assert_eq!(outcome, &serde_json::json!({"reauth": true}));
        *outcome = serde_json::json!({"reauth": false});
    });
    let report = verify_text(Family::Requests, &changed).expect("loads");
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    assert_eq!(report.failures[0].0, 2);

    // The OR policy on a request whose one eye matches changes what the nodes compute.
    let changed = database_and_batch(reauth, |v| {
        let request = &mut v["vectors"][1]["case"]["batch"]["requests"][5];
        assert_eq!(request["or_policy"], Value::Bool(false));
        request["or_policy"] = Value::Bool(true);
    });
    let report = verify_text(Family::Requests, &changed).expect("loads");
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    assert!(
        report.failures[0].1.contains("outcomes"),
        "{:?}",
        report.failures
    );

    // A batch must name a database vector.
    let e = verify_text(
        Family::Requests,
        &database_and_batch(reauth, |v| {
            v["vectors"][1]["case"]["batch"]["database"] = serde_json::json!(2);
        }),
    )
    .expect_err("must not load")
    .to_string();
    assert!(e.contains("not a database vector"), "{e}");
}

#[test]
fn a_change_no_outcome_shows_still_fails_the_requests_family() {
    let reauth = 3;
    let fails_naming = |what: &str, f: &dyn Fn(&mut Value)| {
        let report = verify_text(Family::Requests, &database_and_batch(reauth, f)).expect("loads");
        assert_eq!(report.failures.len(), 1, "{what}: {:?}", report.failures);
        assert!(report.failures[0].1.contains(what), "{:?}", report.failures);
    };
    // A code bit under a zero mask bit: the nodes never see it.
    fails_naming("requests[0].left.code: bit", &|v| {
        let t = &mut v["vectors"][1]["case"]["batch"]["requests"][0]["left"];
        let mask = t["mask"].as_str().expect("hex").to_string();
        let at = mask.find('0').expect("a masked digit");
        let code = t["code"].as_str().expect("hex");
        let digit = if &code[at..=at] == "0" { "1" } else { "0" };
        t["code"] = Value::String(format!("{}{digit}{}", &code[..at], &code[at + 1..]));
    });
    // The threshold moves no outcome of this batch, but every comparison value.
    fails_naming("comparisons[0][0].left", &|v| {
        let a = &mut v["vectors"][1]["case"]["batch"]["threshold_a"];
        *a = serde_json::json!(a.as_u64().expect("a") + 1);
    });
    // A deletion is compared with nobody: a template there would be checked by nothing.
    fails_naming("requests[6].left, right", &|v| {
        let requests = &mut v["vectors"][1]["case"]["batch"]["requests"];
        assert_eq!(requests[6]["request_type"], "deletion");
        requests[6]["left"] = requests[0]["left"].clone();
        requests[6]["right"] = requests[0]["right"].clone();
    });
}

fn load_error(family: Family, f: impl FnOnce(&mut Value)) -> String {
    verify_text(family, &edit(family, f))
        .expect_err("must not load")
        .to_string()
}

#[test]
fn the_loader_refuses_what_it_does_not_know() {
    let e = load_error(Family::Ring, |v| {
        v["vectors"][0]["surprise"] = Value::Bool(true);
    });
    assert!(e.contains("unknown field"), "{e}");
    let e = load_error(Family::Ring, |v| {
        v["vectors"][0]["case"]["constants"]["surprise"] = Value::Bool(true);
    });
    assert!(e.contains("unknown field"), "{e}");
    let e = load_error(Family::Ring, |v| {
        v["vectors"][0]["flags"] = serde_json::json!(["quantum"]);
    });
    assert!(e.contains("unknown variant"), "{e}");
    let e = load_error(Family::Ring, |v| {
        v["vectors"][0]["case"] = serde_json::json!({"frobnicate": {}});
    });
    assert!(e.contains("unknown variant"), "{e}");
    let e = load_error(Family::Ring, |v| {
        v["family"] = Value::String("telepathy".to_string());
    });
    assert!(e.contains("unknown variant"), "{e}");
    let e = load_error(Family::Ring, |v| {
        v["family"] = Value::String("layout".to_string());
    });
    assert!(e.contains("holds family layout"), "{e}");
    let e = load_error(Family::Ring, |v| {
        v["format_version"] = serde_json::json!(2);
    });
    assert!(e.contains("format_version"), "{e}");
    let e = load_error(Family::Ring, |v| {
        v["vectors"][1]["id"] = serde_json::json!(7);
    });
    assert!(e.contains("ids"), "{e}");
    let e = load_error(Family::Ring, |v| {
        v["vectors"] = serde_json::json!([]);
    });
    assert!(e.contains("no vectors"), "{e}");
    let e = load_error(Family::Ring, |v| {
        v["vectors"][1]["case"]["mul"]["a"] = Value::String("ABCD".to_string());
    });
    assert!(e.contains("lowercase"), "{e}");
    let e = load_error(Family::EnvelopeRejections, |v| {
        v["vectors"][3]["case"]["reject"]["base"] = serde_json::json!(2);
    });
    assert!(e.contains("not a base vector"), "{e}");
}

#[test]
fn a_directory_with_an_unknown_or_missing_family_is_refused() {
    let dir = scratch("families");
    for family in Family::ALL {
        std::fs::write(dir.join(family.file_name()), text(family)).expect("copy");
    }
    assert!(families_in(&dir).is_ok());
    std::fs::write(dir.join("telepathy.json"), "{}").expect("write");
    let e = families_in(&dir).expect_err("unknown family file");
    assert!(e.to_string().contains("unknown family file telepathy.json"));
    std::fs::remove_file(dir.join("telepathy.json")).expect("remove");
    std::fs::remove_file(dir.join("ring.json")).expect("remove");
    let e = families_in(&dir).expect_err("missing family");
    assert!(e.to_string().contains("ring.json"));
    let _ = std::fs::remove_dir_all(&dir);
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for target in ["template_json", "envelope", "payload"] {
        let mut names: Vec<_> = std::fs::read_dir(dir.join(target))
            .expect("corpus dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for n in names {
            let bytes = std::fs::read(dir.join(target).join(&n)).expect("read");
            out.push((format!("{target}/{n}"), bytes));
        }
    }
    out
}

#[test]
fn the_checked_in_fuzz_corpus_is_built_from_the_vectors() {
    let dir = scratch("corpus");
    corpus::write_corpus(&default_vectors_dir(), &dir).expect("writes");
    let checked_in = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    let fresh = files(&dir);
    let ours = files(&checked_in);
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&fresh), names(&ours));
    for ((name, a), (_, b)) in fresh.iter().zip(&ours) {
        assert!(
            a == b,
            "{name} differs: run `cargo run -p conformance-vectors -- corpus`"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

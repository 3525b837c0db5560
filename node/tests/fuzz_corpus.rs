//! The node fuzz targets' seed corpus (`fuzz/corpus/{peer_message,orb_request,config}`) is
//! what the node's fuzz fixtures build from the conformance vectors: node-to-node messages
//! the node's own code builds, the sealing vectors' requests sealed again to the fixture's
//! intake keys, and the configs `keygen` writes.
//!
//! `OCELLI_WRITE_FUZZ_CORPUS=1 cargo test -p ocelli-node --test fuzz_corpus` rewrites the
//! checked-in seeds after a deliberate change.

use std::path::{Path, PathBuf};

use conformance_vectors::common::rng;
use conformance_vectors::families::envelope_sealing;
use conformance_vectors::format::VectorFile;
use conformance_vectors::{default_vectors_dir, load_file};
use ocelli_node::fuzzing::{self as node_fuzzing, INTAKE_NOW_MS};
use ocelli_node::keys::sample_config;
use sdk_orb::envelope::seal_envelope_to_vec;
use sdk_orb::PartyId;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> Res<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join(name), bytes)?;
    Ok(())
}

/// Writes the three node targets' seeds under `out`.
fn write_node_corpus(out: &Path) -> Res<()> {
    let dir = out.join("peer_message");
    for (name, bytes) in &node_fuzzing::peer_message_seeds() {
        write(&dir, name, bytes)?;
    }
    let sealing = load_file::<envelope_sealing::Spec>(&default_vectors_dir())?;
    orb_request_corpus(&sealing, &out.join("orb_request"))?;
    config_corpus(&out.join("config"))?;
    Ok(())
}

/// The sealing vectors' requests and irises, sealed with the vectors' RNG seeds to the
/// node fixture's keys and captured at its clock (so every party's intake accepts them),
/// then result requests for their ids.
fn orb_request_corpus(
    sealing: &VectorFile<envelope_sealing::Case>,
    dir: &Path,
) -> Result<usize, Box<dyn std::error::Error>> {
    let (nodes, orb) = node_fuzzing::intake_keys();
    let mut ids = Vec::new();
    let mut n = 0;
    for v in &sealing.vectors {
        let envelope_sealing::Case::Seal {
            rng_seed,
            request,
            left,
            right,
            ..
        } = &v.case;
        let mut meta = request.meta()?;
        meta.timestamp_ms = INTAKE_NOW_MS;
        let envelope = seal_envelope_to_vec(
            &mut rng(&rng_seed.array::<32>("rng_seed")?),
            &meta,
            &left.template()?,
            &right.template()?,
            &nodes,
            &orb,
        )
        .map_err(|e| format!("envelope_sealing #{}: {e}", v.id))?;
        let name = format!("submit-envelope_sealing-{:02}", v.id);
        write(dir, &name, &node_fuzzing::submit_input(&envelope))?;
        ids.push(meta.request_id.0);
        n += 1;
    }
    let first = ids.first().ok_or("envelope_sealing: no vectors")?;
    let id_refs: Vec<&[u8]> = ids.iter().map(|id| &id[..]).collect();
    let small = [
        ("submit-empty", node_fuzzing::submit_input(&[])),
        ("get_result", node_fuzzing::get_result_input(first)),
        (
            "get_result-short-id",
            node_fuzzing::get_result_input(&first[..15]),
        ),
        (
            "stream_results",
            node_fuzzing::stream_results_input(&id_refs),
        ),
        (
            "stream_results-all",
            node_fuzzing::stream_results_input(&[]),
        ),
    ];
    for (name, bytes) in &small {
        write(dir, name, bytes)?;
    }
    Ok(n + small.len())
}

/// The configs `keygen` writes for the three parties, and variants: overrides, optional
/// sections left out, and invalid values.
fn config_corpus(dir: &Path) -> Result<usize, Box<dyn std::error::Error>> {
    let party1 = sample_config(PartyId::ALL[1], 50050)?;
    let minimal = "party_id = 2\ndata_dir = \"d\"\n\
        [listen]\norb = \"[::1]:1\"\npeer = \"[::1]:2\"\nmetrics = \"0.0.0.0:3\"\n\
        [tls]\nca = \"ca.pem\"\ncert = \"c.pem\"\nkey = \"k.pem\"\n\
        [keys]\nhpke_secret = \"h\"\nresult_signing = \"r\"\norb_allow_list = \"o\"\n\
        [matching]\nenabled = false\n\
        [[peers]]\nparty_id = 0\naddress = \"10.0.0.1:4\"\ncert = \"p0.pem\"\n\
        [[peers]]\nparty_id = 1\naddress = \"10.0.0.2:5\"\ncert = \"p1.pem\"\n\
        server_name = \"node1.example\"\n";
    let seeds = [
        (
            "sample-party0",
            node_fuzzing::config_input(&sample_config(PartyId::ALL[0], 50050)?, &[]),
        ),
        ("sample-party1", node_fuzzing::config_input(&party1, &[])),
        (
            "sample-party2",
            node_fuzzing::config_input(&sample_config(PartyId::ALL[2], 7000)?, &[]),
        ),
        (
            "sample-party1-overrides",
            node_fuzzing::config_input(
                &party1,
                &[
                    ("OCELLI_PARTY_ID", "2"),
                    ("OCELLI_LISTEN_ORB", "[::1]:9000"),
                    ("OCELLI_BATCH_MAX_SIZE", "128"),
                    ("OCELLI_MATCHING_THRESHOLD", "0.3"),
                    ("OCELLI_MATCHING_PRIVACY_MAX", "true"),
                ],
            ),
        ),
        (
            "sample-party1-bad-override",
            node_fuzzing::config_input(&party1, &[("OCELLI_INTAKE_MAX_ENVELOPE_BYTES", "-1")]),
        ),
        (
            "sample-party1-bad-threshold",
            node_fuzzing::config_input(
                &party1.replace("threshold = 0.345", "threshold = nan"),
                &[],
            ),
        ),
        (
            "minimal-matching-off",
            node_fuzzing::config_input(minimal, &[]),
        ),
    ];
    for (name, bytes) in &seeds {
        write(dir, name, bytes)?;
    }
    Ok(seeds.len())
}

const TARGETS: [&str; 3] = ["peer_message", "orb_request", "config"];

fn checked_in() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus")
}

fn files(dir: &Path, target: &str) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.join(target))
        .expect("corpus dir")
        .map(|e| {
            let e = e.expect("entry");
            let bytes = std::fs::read(e.path()).expect("read");
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn the_checked_in_node_fuzz_corpus_is_built_from_the_vectors() -> Res<()> {
    if std::env::var_os("OCELLI_WRITE_FUZZ_CORPUS").is_some() {
        write_node_corpus(&checked_in())?;
    }
    let scratch = tempfile::tempdir()?;
    write_node_corpus(scratch.path())?;
    for target in TARGETS {
        let fresh = files(scratch.path(), target);
        let ours = files(&checked_in(), target);
        let names = |v: &[(String, Vec<u8>)]| v.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
        assert_eq!(names(&fresh), names(&ours), "{target}: seed names differ");
        for ((name, a), (_, b)) in fresh.iter().zip(&ours) {
            assert!(
                a == b,
                "{target}/{name} differs: run `OCELLI_WRITE_FUZZ_CORPUS=1 cargo test -p ocelli-node --test fuzz_corpus`"
            );
        }
    }
    Ok(())
}

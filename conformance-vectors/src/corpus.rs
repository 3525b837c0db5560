//! The fuzz seed corpus, built from the checked-in vectors: `fuzz/corpus/<target>/<name>`.
//!
//! The SDK targets' seeds are vector inputs as they are. The node targets' seeds come from
//! the node's fuzz fixtures (`ocelli_node::fuzzing`): node-to-node messages its own code
//! builds, the sealing vectors' requests sealed again to the fixture's intake keys, and the
//! node config that `keygen` writes.

use std::path::Path;

use ocelli_node::fuzzing::{self as node_fuzzing, INTAKE_NOW_MS};
use sdk_orb::envelope::{
    encode_payload, open_payload, payload_len, seal_envelope_to_vec, EnvelopeView,
};
use sdk_orb::{PartyId, RequestId};

use crate::common::rng;
use crate::families::{envelope_rejections, envelope_sealing, payload_rejections, template_codec};
use crate::{load_file, Error};

/// Envelopes are about 230 KB; these vectors of `envelope_rejections` join the two of
/// `envelope_sealing` in the corpus (the base and two parse-stage rejections).
const ENVELOPE_REJECTIONS_IN_CORPUS: [u32; 3] = [1, 5, 10];

/// Files written per fuzz target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// `(target, files)`.
    pub targets: Vec<(&'static str, usize)>,
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error(format!("{}: {e}", dir.display())))?;
    let path = dir.join(name);
    std::fs::write(&path, bytes).map_err(|e| Error(format!("{}: {e}", path.display())))
}

/// Writes the seed corpus of every fuzz target under `out` from the vectors in
/// `vectors`. Existing files of the same names are overwritten; others are left alone.
///
/// # Errors
/// A vector file that does not load, or I/O failures.
pub fn write_corpus(vectors: &Path, out: &Path) -> Result<Summary, Error> {
    let mut summary = Summary::default();

    let dir = out.join("template_json");
    let file = load_file::<template_codec::Spec>(vectors)?;
    for v in &file.vectors {
        let input = match &v.case {
            template_codec::Case::Accept { input, .. }
            | template_codec::Case::Reject { input, .. } => input,
        };
        write(&dir, &format!("template_codec-{:02}", v.id), &input.0)?;
    }
    summary.targets.push(("template_json", file.vectors.len()));

    let dir = out.join("envelope");
    let mut n = 0;
    let sealing = load_file::<envelope_sealing::Spec>(vectors)?;
    for v in &sealing.vectors {
        let envelope_sealing::Case::Seal { envelope, .. } = &v.case;
        write(&dir, &format!("envelope_sealing-{:02}", v.id), &envelope.0)?;
        n += 1;
    }
    let rejections = load_file::<envelope_rejections::Spec>(vectors)?;
    let base = match rejections.vectors.first().map(|v| &v.case) {
        Some(envelope_rejections::Case::Base { envelope, keys, .. }) => (envelope, keys),
        _ => {
            return Err(Error(
                "envelope_rejections: vector 1 is not the base".to_string(),
            ))
        }
    };
    for id in ENVELOPE_REJECTIONS_IN_CORPUS {
        let v = rejections
            .vectors
            .get(id as usize - 1)
            .ok_or_else(|| Error(format!("envelope_rejections: no vector {id}")))?;
        let bytes = match &v.case {
            envelope_rejections::Case::Base { envelope, .. } => envelope.0.clone(),
            envelope_rejections::Case::Reject {
                length, patches, ..
            } => crate::envelope::apply(&base.0 .0, *length, patches)?,
        };
        write(&dir, &format!("envelope_rejections-{id:02}"), &bytes)?;
        n += 1;
    }
    summary.targets.push(("envelope", n));

    let dir = out.join("payload");
    let payloads = load_file::<payload_rejections::Spec>(vectors)?;
    for v in &payloads.vectors {
        let payload_rejections::Case::Reject { payload, .. } = &v.case;
        write(&dir, &format!("payload_rejections-{:02}", v.id), &payload.0)?;
    }
    // One whole payload the target accepts: it decodes as party (first byte mod 3) = 2 for
    // the all-zero request id, so re-encode the base envelope's party-2 shares that way.
    let keys = base.1.parse()?;
    let view = EnvelopeView::parse(&base.0 .0).map_err(|e| Error(e.to_string()))?;
    let party = PartyId::ALL[2];
    let shares = open_payload(&view, party, &keys.secret[2]).map_err(|e| Error(e.to_string()))?;
    let mut buf = vec![0u8; payload_len(party)];
    encode_payload(party, &RequestId([0; 16]), &shares, &mut buf)
        .map_err(|e| Error(e.to_string()))?;
    write(&dir, "envelope_rejections-01-party-2", &buf)?;
    summary
        .targets
        .push(("payload", payloads.vectors.len() + 1));

    let dir = out.join("peer_message");
    let seeds = node_fuzzing::peer_message_seeds();
    for (name, bytes) in &seeds {
        write(&dir, name, bytes)?;
    }
    summary.targets.push(("peer_message", seeds.len()));

    let n = orb_request_corpus(&sealing, &out.join("orb_request"))?;
    summary.targets.push(("orb_request", n));

    let n = config_corpus(&out.join("config"))?;
    summary.targets.push(("config", n));
    Ok(summary)
}

/// The sealing vectors' requests and irises, sealed with the vectors' RNG seeds to the
/// node fixture's keys and captured at its clock (so every party's intake accepts them),
/// then result requests for their ids.
fn orb_request_corpus(
    sealing: &crate::format::VectorFile<envelope_sealing::Case>,
    dir: &Path,
) -> Result<usize, Error> {
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
        .map_err(|e| Error(format!("envelope_sealing #{}: {e}", v.id)))?;
        let name = format!("submit-envelope_sealing-{:02}", v.id);
        write(dir, &name, &node_fuzzing::submit_input(&envelope))?;
        ids.push(meta.request_id.0);
        n += 1;
    }
    let first = ids
        .first()
        .ok_or_else(|| Error("envelope_sealing: no vectors".to_string()))?;
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
fn config_corpus(dir: &Path) -> Result<usize, Error> {
    use ocelli_node::keys::sample_config;
    let party1 = sample_config(1, 50050);
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
            node_fuzzing::config_input(&sample_config(0, 50050), &[]),
        ),
        ("sample-party1", node_fuzzing::config_input(&party1, &[])),
        (
            "sample-party2",
            node_fuzzing::config_input(&sample_config(2, 7000), &[]),
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

//! The SDK fuzz targets' seed corpus, built from the checked-in vectors:
//! `fuzz/corpus/<target>/<name>`, the vector inputs as they are.
//!
//! The node targets' seeds (`peer_message`, `orb_request`, `config`) come from the node's fuzz
//! fixtures and are written by the node's own test, `node/tests/fuzz_corpus.rs`, so the
//! vectors do not depend on the service.

use std::path::Path;

use sdk_orb::envelope::{encode_payload, open_payload, payload_len, EnvelopeView};
use sdk_orb::{PartyId, RequestId};

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

    Ok(summary)
}

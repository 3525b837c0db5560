//! Known-answer vectors for ocelli: a deterministic generator, the checked-in vector files
//! (`vectors/<family>.json`) and a replay tool that checks the SDK and the node library
//! against every vector.
//!
//! The contract:
//! - Generation is deterministic: fixed seeds, seeded ChaCha20 RNGs passed into the SDK. The
//!   same build writes the same bytes, so a changed formula shows up as a vector diff.
//! - Loading is strict: an unknown family, field, flag or case, a wrong format version, a
//!   duplicate or missing vector id all fail the load. No vector is skipped.
//! - Replay runs every vector and reports per family; a panic inside the SDK or the node is a
//!   failure of that vector, not of the tool.
//!
//! See `docs/conformance.md` for the format and each family.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub mod common;
pub mod corpus;
pub mod envelope;
pub mod families;
pub mod format;

use format::{Vector, VectorFile, FORMAT, FORMAT_VERSION};

/// A family of vectors: one file `vectors/<name>.json`. The SDK families come first, then the
/// node-side ones (`comparison`, `requests`), which replay through the protocol core, `ocelli_mpc`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Family {
    /// open-iris template JSON: accepted templates and rejected ones with their error.
    TemplateCodec,
    /// Masked bit values, code and mask dot products, distances, match decisions.
    MaskedBitvectors,
    /// Rotations of plain bits and of share coefficients.
    Rotations,
    /// The share layout: plain bit index of each ring coefficient.
    Layout,
    /// GR(2^16, 4) constants, arithmetic, inverses and basis conversions.
    Ring,
    /// Degree-1 Shamir shares for given randomness and from seeded RNGs.
    Shamir,
    /// Trimmed masks and the mask dot product.
    TrimmedMasks,
    /// Node-side query preprocessing (Lagrange coefficient, basis B).
    Preprocess,
    /// Party-local dot-product shares that sum to the plaintext dot products.
    DotShares,
    /// Envelope header (HPKE AAD, digest prefix), HPKE info strings, sizes.
    EnvelopeHeader,
    /// Complete envelopes from a seeded RNG: HPKE sealing, digest, signature, opening.
    EnvelopeSealing,
    /// Complete version 2 envelopes (X-Wing HPKE, one party's shares as a seed).
    EnvelopeSealingV2,
    /// Envelopes nodes must reject, with the exact error at each stage.
    EnvelopeRejections,
    /// Version 2 envelopes nodes must reject, with the exact error at each stage and at intake.
    EnvelopeRejectionsV2,
    /// Decrypted payloads nodes must reject, with the exact error.
    PayloadRejections,
    /// Decrypted version 2 payloads nodes must reject, with the exact error.
    PayloadRejectionsV2,
    /// The node's comparison phase: the two-part split, the lift, `x = A md - 2^16 cd` and its
    /// MSB, per party and opened.
    Comparison,
    /// Whole batches: a database and requests of every type, with the expected outcomes.
    Requests,
}

impl Family {
    /// Every family, in file order.
    pub const ALL: [Family; 18] = [
        Family::TemplateCodec,
        Family::MaskedBitvectors,
        Family::Rotations,
        Family::Layout,
        Family::Ring,
        Family::Shamir,
        Family::TrimmedMasks,
        Family::Preprocess,
        Family::DotShares,
        Family::EnvelopeHeader,
        Family::EnvelopeSealing,
        Family::EnvelopeSealingV2,
        Family::EnvelopeRejections,
        Family::EnvelopeRejectionsV2,
        Family::PayloadRejections,
        Family::PayloadRejectionsV2,
        Family::Comparison,
        Family::Requests,
    ];

    /// The snake_case name, as in the file name and the `family` field.
    pub fn name(self) -> &'static str {
        match self {
            Family::TemplateCodec => "template_codec",
            Family::MaskedBitvectors => "masked_bitvectors",
            Family::Rotations => "rotations",
            Family::Layout => "layout",
            Family::Ring => "ring",
            Family::Shamir => "shamir",
            Family::TrimmedMasks => "trimmed_masks",
            Family::Preprocess => "preprocess",
            Family::DotShares => "dot_shares",
            Family::EnvelopeHeader => "envelope_header",
            Family::EnvelopeSealing => "envelope_sealing",
            Family::EnvelopeSealingV2 => "envelope_sealing_v2",
            Family::EnvelopeRejections => "envelope_rejections",
            Family::EnvelopeRejectionsV2 => "envelope_rejections_v2",
            Family::PayloadRejections => "payload_rejections",
            Family::PayloadRejectionsV2 => "payload_rejections_v2",
            Family::Comparison => "comparison",
            Family::Requests => "requests",
        }
    }

    /// The family named `name`, if any.
    pub fn from_name(name: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == name)
    }

    /// `<name>.json`.
    pub fn file_name(self) -> String {
        format!("{}.json", self.name())
    }
}

impl core::fmt::Display for Family {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// A load or generation failure: the file or the tool is wrong, not a vector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error(pub String);

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<String> for Error {
    fn from(s: String) -> Error {
        Error(s)
    }
}

/// Inputs the generator reads besides the SDK: the open-iris fixtures.
#[derive(Clone, Debug)]
pub struct Sources {
    /// `random_pair.json`, parsed.
    pub random_pair: serde_json::Value,
    /// `all_rotations.json`, parsed.
    pub all_rotations: serde_json::Value,
}

impl Sources {
    /// Reads the fixtures from `dir` (the `open-iris` folder).
    ///
    /// # Errors
    /// A missing or unparsable fixture.
    pub fn load(dir: &Path) -> Result<Sources, Error> {
        let read = |name: &str| -> Result<serde_json::Value, Error> {
            let path = dir.join(name);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| Error(format!("{}: {e}", path.display())))?;
            serde_json::from_str(&text).map_err(|e| Error(format!("{}: {e}", path.display())))
        };
        Ok(Sources {
            random_pair: read("random_pair.json")?,
            all_rotations: read("all_rotations.json")?,
        })
    }

    /// The fixtures in the repository: `sdk-orb/testdata/open-iris` (their origin and
    /// licences are in its README).
    pub fn default_dir() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk-orb/testdata/open-iris")
    }
}

/// What a family module provides.
pub trait Spec {
    /// The family-specific part of a vector.
    type Case: Serialize + DeserializeOwned;
    /// The family.
    const FAMILY: Family;
    /// The `description` field.
    const DESCRIPTION: &'static str;

    /// The vectors, computed with the SDK (and the node library) from fixed seeds and fixtures.
    ///
    /// # Errors
    /// A fixture that does not say what it should, or the code under test disagreeing with a
    /// cross-check.
    fn generate(sources: &Sources) -> Result<Vec<Vector<Self::Case>>, String>;

    /// Load-time checks across vectors (references between vectors).
    ///
    /// # Errors
    /// A dangling reference.
    fn check_file(_vectors: &[Vector<Self::Case>]) -> Result<(), String> {
        Ok(())
    }

    /// Replays one vector (its case and the flags that carry meaning) against the SDK or the
    /// node library; `all` gives access to vectors it refers to.
    ///
    /// # Errors
    /// The first mismatch.
    fn verify(vector: &Vector<Self::Case>, all: &[Vector<Self::Case>]) -> Result<(), String>;
}

/// The outcome of replaying one family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The family.
    pub family: Family,
    /// Vectors replayed (all of them).
    pub vectors: usize,
    /// Vectors that passed.
    pub passed: usize,
    /// `(id, reason)` of each failed vector.
    pub failures: Vec<(u32, String)>,
}

impl Report {
    /// Whether every vector passed.
    pub fn ok(&self) -> bool {
        self.failures.is_empty() && self.passed == self.vectors
    }
}

fn to_text<S: Spec>(sources: &Sources) -> Result<String, Error> {
    let vectors = S::generate(sources).map_err(|e| Error(format!("{}: {e}", S::FAMILY)))?;
    let file = VectorFile {
        format: FORMAT.to_string(),
        format_version: FORMAT_VERSION,
        family: S::FAMILY,
        description: S::DESCRIPTION.to_string(),
        generator: "cargo run -p conformance-vectors -- generate".to_string(),
        vectors,
    };
    check::<S>(&file)?;
    let mut text = serde_json::to_string_pretty(&file).map_err(|e| Error(e.to_string()))?;
    text.push('\n');
    Ok(text)
}

fn check<S: Spec>(file: &VectorFile<S::Case>) -> Result<(), Error> {
    let fail = |m: String| Err(Error(format!("{}: {m}", S::FAMILY)));
    if file.format != FORMAT {
        return fail(format!("format {:?}, expected {FORMAT:?}", file.format));
    }
    if file.format_version != FORMAT_VERSION {
        return fail(format!(
            "format_version {}, this tool reads {FORMAT_VERSION}",
            file.format_version
        ));
    }
    if file.family != S::FAMILY {
        return fail(format!("file holds family {}", file.family));
    }
    if file.vectors.is_empty() {
        return fail("no vectors".to_string());
    }
    for (i, v) in file.vectors.iter().enumerate() {
        if v.id as usize != i + 1 {
            return fail(format!(
                "vector ids must be 1, 2, 3, ...; found {} at {}",
                v.id,
                i + 1
            ));
        }
        let mut flags = v.flags.clone();
        flags.sort();
        flags.dedup();
        if flags.len() != v.flags.len() {
            return fail(format!("vector {}: repeated flag", v.id));
        }
    }
    S::check_file(&file.vectors).map_err(|e| Error(format!("{}: {e}", S::FAMILY)))
}

/// Parses and checks a vector file of the family `S` (see [`verify_text`] for what fails).
///
/// # Errors
/// As [`verify_text`].
pub fn load<S: Spec>(text: &str) -> Result<VectorFile<S::Case>, Error> {
    let file: VectorFile<S::Case> =
        serde_json::from_str(text).map_err(|e| Error(format!("{}: {e}", S::FAMILY)))?;
    check::<S>(&file)?;
    Ok(file)
}

/// Replays every vector of a loaded file.
pub fn replay<S: Spec>(file: &VectorFile<S::Case>) -> Report {
    let mut report = Report {
        family: S::FAMILY,
        vectors: file.vectors.len(),
        passed: 0,
        failures: Vec::new(),
    };
    for v in &file.vectors {
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| S::verify(v, &file.vectors)));
        match outcome {
            Ok(Ok(())) => report.passed += 1,
            Ok(Err(e)) => report.failures.push((v.id, e)),
            Err(_) => report.failures.push((v.id, "panicked".to_string())),
        }
    }
    report
}

fn verify_text_with<S: Spec>(text: &str) -> Result<Report, Error> {
    Ok(replay::<S>(&load::<S>(text)?))
}

macro_rules! dispatch {
    ($family:expr, $f:ident ( $($arg:expr),* )) => {
        match $family {
            Family::TemplateCodec => $f::<families::template_codec::Spec>($($arg),*),
            Family::MaskedBitvectors => $f::<families::masked_bitvectors::Spec>($($arg),*),
            Family::Rotations => $f::<families::rotations::Spec>($($arg),*),
            Family::Layout => $f::<families::layout::Spec>($($arg),*),
            Family::Ring => $f::<families::ring::Spec>($($arg),*),
            Family::Shamir => $f::<families::shamir::Spec>($($arg),*),
            Family::TrimmedMasks => $f::<families::trimmed_masks::Spec>($($arg),*),
            Family::Preprocess => $f::<families::preprocess::Spec>($($arg),*),
            Family::DotShares => $f::<families::dot_shares::Spec>($($arg),*),
            Family::EnvelopeHeader => $f::<families::envelope_header::Spec>($($arg),*),
            Family::EnvelopeSealing => $f::<families::envelope_sealing::Spec>($($arg),*),
            Family::EnvelopeSealingV2 => $f::<families::envelope_sealing_v2::Spec>($($arg),*),
            Family::EnvelopeRejections => $f::<families::envelope_rejections::Spec>($($arg),*),
            Family::EnvelopeRejectionsV2 => $f::<families::envelope_rejections_v2::Spec>($($arg),*),
            Family::PayloadRejections => $f::<families::payload_rejections::Spec>($($arg),*),
            Family::PayloadRejectionsV2 => $f::<families::payload_rejections_v2::Spec>($($arg),*),
            Family::Comparison => $f::<families::comparison::Spec>($($arg),*),
            Family::Requests => $f::<families::requests::Spec>($($arg),*),
        }
    };
}

/// The JSON text of `family`'s vector file, exactly as checked in.
///
/// # Errors
/// See [`Spec::generate`].
pub fn generate(family: Family, sources: &Sources) -> Result<String, Error> {
    with_stack(|| dispatch!(family, to_text(sources)))
}

/// Stack for generation and replay: the SDK keeps 12,800-coefficient arrays on the stack,
/// which unoptimised builds do not fold together.
const STACK_BYTES: usize = 64 << 20;

fn with_stack<T: Send>(f: impl FnOnce() -> Result<T, Error> + Send) -> Result<T, Error> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(STACK_BYTES)
            .spawn_scoped(s, f)
            .map_err(|e| Error(format!("cannot start a worker thread: {e}")))?
            .join()
            .map_err(|_| Error("generation or replay panicked outside a vector".to_string()))?
    })
}

/// Loads `text` as `family`'s vector file and replays every vector.
///
/// # Errors
/// The file does not load: wrong format or version, another family, an unknown field, flag
/// or case, bad hex, bad ids or references. Failing vectors are in the [`Report`], not here.
pub fn verify_text(family: Family, text: &str) -> Result<Report, Error> {
    with_stack(|| dispatch!(family, verify_text_with(text)))
}

/// Writes every family's file into `dir`.
///
/// # Errors
/// Generation or I/O failures.
pub fn generate_dir(dir: &Path, sources: &Sources) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error(format!("{}: {e}", dir.display())))?;
    for family in Family::ALL {
        let path = dir.join(family.file_name());
        let text = generate(family, sources)?;
        std::fs::write(&path, text).map_err(|e| Error(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}

/// The families whose files are in `dir`, checking that every `.json` file there is a known
/// family and that every known family is present.
///
/// # Errors
/// An unknown file, a missing family, or an unreadable directory.
pub fn families_in(dir: &Path) -> Result<Vec<Family>, Error> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error(format!("{}: {e}", dir.display())))?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error(e.to_string()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        let family =
            Family::from_name(stem).ok_or_else(|| Error(format!("unknown family file {name}")))?;
        found.push(family);
    }
    found.sort();
    for family in Family::ALL {
        if !found.contains(&family) {
            return Err(Error(format!(
                "{}: missing from {}",
                family.file_name(),
                dir.display()
            )));
        }
    }
    Ok(found)
}

/// Reads and loads `dir/<family>.json` for the family `S`.
///
/// # Errors
/// As [`load`], and I/O failures.
pub fn load_file<S: Spec>(dir: &Path) -> Result<VectorFile<S::Case>, Error> {
    let path = dir.join(S::FAMILY.file_name());
    let text =
        std::fs::read_to_string(&path).map_err(|e| Error(format!("{}: {e}", path.display())))?;
    load::<S>(&text)
}

/// Reads `dir/<family>.json` and replays it.
///
/// # Errors
/// As [`verify_text`], and I/O failures.
pub fn verify_file(dir: &Path, family: Family) -> Result<Report, Error> {
    let path = dir.join(family.file_name());
    let text =
        std::fs::read_to_string(&path).map_err(|e| Error(format!("{}: {e}", path.display())))?;
    verify_text(family, &text)
}

/// The checked-in vectors: `conformance-vectors/vectors`.
pub fn default_vectors_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors")
}

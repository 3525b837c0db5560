//! Entry points for the node's fuzz targets (`fuzz/fuzz_targets/`): each takes untrusted
//! bytes through the node's own decoding and validation, as far as that goes without a
//! store, a runtime or a network, and checks the invariants that hold for every accepted
//! input. Compiled in normal builds so they never rot.
//!
//! The store is replaced by fixed fixtures: a node at a known batch with a few pending
//! requests ([`peer_fixture`]), and intake keys derived from public labels
//! ([`intake_keys`]). They are test material; no deployment uses them. The seed corpus
//! (`conformance-vectors corpus`) builds its inputs with the `*_input` and
//! [`peer_message_seeds`] functions here, so seeds and fixtures agree.

mod fixture;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use prost::Message;
use shared_proto::v1::{
    BatchAbort, BatchCommit, BatchCommitAck, BatchProposal, BatchVote, FetchBatchRequest,
    GetResultRequest, ResultStatus, StreamResultsRequest, SubmitRequest, Vote,
};

pub use self::fixture::{
    config_input, get_result_input, intake_keys, orb_tag, peer_fixture, peer_message_seeds,
    peer_tag, stream_results_input, submit_input, INTAKE_NOW_MS,
};
use self::fixture::{fixture_meta, fixture_queue, intake_policies};
use crate::agreement::coordinator::{catching_up, tally, vote_on, CatchingUp};
use crate::batch::plan::Planned;
use crate::config::NodeConfig;
use crate::ids::{PartyId, RequestId};
use crate::intake::RejectReason;
use crate::shares::StoredShares;
use crate::store::{RequestRecord, RequestState};
use ocelli_mpc::session::words_of_round;
use ocelli_mpc::share::{encode, Word};
use ocelli_mpc::Peer;

/// Node-to-node messages: decode the message the first byte names, run the receiving
/// node's own checks on it against [`peer_fixture`], and check that whatever decodes
/// re-encodes to an equal value.
///
/// # Panics
/// When an invariant breaks (that is the finding).
pub fn peer_message(data: &[u8]) {
    let Some((&tag, bytes)) = data.split_first() else {
        return;
    };
    match tag % peer_tag::COUNT {
        peer_tag::PROPOSAL => {
            if let Some(p) = decoded::<BatchProposal>(bytes) {
                proposal(&p);
            }
        }
        peer_tag::COMMIT => {
            if let Some(c) = decoded::<BatchCommit>(bytes) {
                commit(&c);
            }
        }
        peer_tag::VOTE => {
            if let Some(v) = decoded::<BatchVote>(bytes) {
                vote(v);
            }
        }
        peer_tag::MPC_LINK => mpc_link(bytes),
        peer_tag::FETCH => {
            let _ = decoded::<FetchBatchRequest>(bytes);
        }
        peer_tag::COMMIT_ACK => {
            let _ = decoded::<BatchCommitAck>(bytes);
        }
        _ => {
            if decoded::<BatchAbort>(bytes).is_some() {
                // What the handler does with an abort.
                fixture_queue().release_all_but(None);
            }
        }
    }
}

/// Orb-facing requests: decode the request the first byte names; a submitted envelope
/// goes through the whole intake check of each party (fixed keys, [`INTAKE_NOW_MS`]),
/// request ids through the handlers' parsing.
///
/// # Panics
/// When an invariant breaks.
pub fn orb_request(data: &[u8]) {
    let Some((&tag, bytes)) = data.split_first() else {
        return;
    };
    match tag % orb_tag::COUNT {
        orb_tag::SUBMIT => {
            if let Some(r) = decoded::<SubmitRequest>(bytes) {
                let _accepted_by = submit(&r.envelope);
            }
        }
        orb_tag::GET_RESULT => {
            if let Some(r) = decoded::<GetResultRequest>(bytes) {
                let parsed = crate::server::parse_id(&r.request_id);
                assert_eq!(parsed.is_ok(), r.request_id.len() == 16);
                if let Ok(id) = parsed {
                    assert_eq!(id.0[..], r.request_id[..]);
                }
            }
        }
        _ => {
            if let Some(r) = decoded::<StreamResultsRequest>(bytes) {
                let parsed = crate::server::parse_ids(&r.request_ids);
                let all_16 = r.request_ids.iter().all(|b| b.len() == 16);
                let few = r.request_ids.len() <= crate::server::MAX_STREAM_IDS;
                assert_eq!(parsed.is_ok(), all_16 && few);
                if let Ok(ids) = parsed {
                    assert!(ids.len() <= r.request_ids.len());
                }
            }
        }
    }
}

/// Node configuration: the bytes before the first NUL are the TOML file (lossy UTF-8),
/// the lines after it `VAR=value` environment overrides. Parse, override, validate;
/// nothing panics, overriding twice changes nothing, and a valid config names both peers
/// and stays valid once its paths are resolved.
///
/// # Panics
/// When an invariant breaks.
pub fn config(data: &[u8]) {
    let (toml_bytes, env_bytes) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(toml_bytes);
    let env_text = String::from_utf8_lossy(env_bytes);
    let env: HashMap<&str, &str> = env_text
        .lines()
        .filter_map(|line| line.split_once('='))
        .collect();
    let get = |k: &str| env.get(k).map(|v| (*v).to_owned());

    let Ok(mut cfg) = NodeConfig::from_toml(&text) else {
        return;
    };
    if let Err(e) = cfg.apply_env(get) {
        let _ = e.to_string();
        return;
    }
    let once = format!("{cfg:?}");
    assert!(
        cfg.apply_env(get).is_ok(),
        "overrides applied once apply again"
    );
    assert_eq!(format!("{cfg:?}"), once, "overrides are idempotent");
    if let Err(e) = cfg.validate() {
        let _ = e.to_string();
        return;
    }
    for p in crate::ids::others(cfg.party_id) {
        assert!(cfg.peer(p).is_some(), "a valid config names {p}");
    }
    let _ = (cfg.batch.interval(), cfg.batch.commit_timeout());
    cfg.resolve_paths(Path::new("/fuzz"));
    assert!(cfg.data_dir.is_absolute() && cfg.tls.ca.is_absolute());
    assert!(
        cfg.validate().is_ok(),
        "resolving paths keeps a config valid"
    );
}

/// Decodes a message and checks that its encoding decodes to an equal value.
fn decoded<M: Message + Default + PartialEq>(bytes: &[u8]) -> Option<M> {
    let m = M::decode(bytes).ok()?;
    let again = M::decode(m.encode_to_vec().as_slice()).expect("a decoded message re-encodes");
    assert!(again == m, "decode(encode(m)) != m");
    Some(m)
}

/// Party 1 or 2 votes on a proposal.
fn proposal(p: &BatchProposal) {
    let mut queue = fixture_queue();
    let v = vote_on(
        &mut queue,
        peer_fixture::LAST_APPLIED_BATCH,
        p,
        |id| id.0 == peer_fixture::FINAL_REQUEST,
        |_| true,
    );
    assert_eq!(v.batch_id, p.batch_id);
    assert_eq!(v.votes.len(), p.items.len(), "one vote per item");
    for (item, &vote) in p.items.iter().zip(&v.votes) {
        if vote == Vote::Accept as i32 {
            let id = RequestId::from_slice(&item.request_id).expect("accepted ids are 16 bytes");
            assert_eq!(
                queue.digest(&id).map(|d| d.0.to_vec()),
                Some(item.envelope_digest.clone()),
                "accepted only with the held digest"
            );
        }
    }
}

/// Party 1 or 2 applies a commit (party 0 a fetched one), up to the evaluation: the
/// sequence check, the requests it holds, and for a replayed commit its recorded
/// outcomes turned into results and share changes.
fn commit(c: &BatchCommit) {
    let meta = fixture_meta();
    if crate::batch::plan::check_commit(c, &meta).is_err() {
        return;
    }
    let mut eval = Vec::new();
    let mut held = Vec::new();
    let mut missing = Vec::new();
    for id in crate::batch::plan::committed_ids(c) {
        match peer_fixture::PENDING.iter().find(|p| p.id == id.0) {
            Some(p) => {
                let rec = RequestRecord {
                    state: RequestState::Pending as u32,
                    digest: p.digest.to_vec(),
                    received_ms: p.received_ms,
                    request_type: RequestRecord::encode_request_type(p.request_type),
                    serial_id: p.serial_id,
                    or_policy: false,
                    batch_id: 0,
                    submitter: Vec::new(),
                    or_serial_ids: Vec::new(),
                };
                eval.push(
                    crate::batch::plan::eval_request(id, &rec, StoredShares::build(|_| {}))
                        .expect("the fixture's request types are known"),
                );
                held.push((id, rec));
            }
            None => missing.push((id, Vec::new())),
        }
    }
    // Without recorded outcomes the node evaluates: the three-party computation, out of
    // reach here.
    if !c.outcomes_recorded {
        return;
    }
    let Ok(outcomes) = crate::batch::plan::recorded_outcomes(c, eval.len()) else {
        return;
    };
    // The batch log keeps the outcomes; a replay must read back the same ones.
    let mut logged = c.clone();
    logged.outcomes = outcomes
        .iter()
        .map(crate::batch::plan::record_outcome)
        .collect();
    let replayed =
        BatchCommit::decode(logged.encode_to_vec().as_slice()).expect("a logged commit decodes");
    assert!(
        crate::batch::plan::recorded_outcomes(&replayed, eval.len()).ok() == Some(outcomes.clone()),
        "replayed outcomes differ"
    );

    let runs = held.len();
    let missing_count = missing.len();
    let Planned {
        results,
        shares,
        next_serial,
    } = crate::batch::plan::plan(c, meta.next_serial, eval, held, outcomes, missing, |s| {
        peer_fixture::ENROLLED.contains(&s.0)
    });
    let listed = c
        .timed_out
        .iter()
        .chain(&c.digest_mismatch)
        .chain(&c.unopenable)
        .filter(|i| i.request_id.len() == 16)
        .count();
    assert_eq!(
        results.len(),
        runs + missing_count + listed,
        "one result each"
    );
    let mut answered = std::collections::HashSet::new();
    for (id, _, _) in &results {
        assert!(answered.insert(*id), "a batch answers a request once");
    }
    let enrolled: Vec<u64> = results
        .iter()
        .filter(|(_, _, r)| r.status == ResultStatus::UniqueEnrolled as i32)
        .map(|(_, _, r)| r.serial_id)
        .collect();
    let expected: Vec<u64> = (meta.next_serial..next_serial).collect();
    assert_eq!(enrolled, expected, "enrolments take consecutive serial ids");
    for (_, _, r) in &results {
        assert_eq!(r.batch_id, c.batch_id);
        assert_eq!(r.request_id.len(), 16);
        assert!(
            r.matched_serial_ids.windows(2).all(|w| w[0] < w[1]),
            "matched serial ids are sorted and distinct"
        );
    }
    for (serial, _) in &shares {
        assert!(
            enrolled.contains(&serial.0)
                || peer_fixture::PENDING
                    .iter()
                    .any(|p| p.serial_id == serial.0),
            "a share change targets an enrolment or a request's target"
        );
    }
}

/// Party 0 receives a vote: a peer that is ahead or behind is caught up first; otherwise
/// the candidates are sorted into a commit.
fn vote(v: BatchVote) {
    let candidates = fixture_queue().oldest(usize::MAX);
    let accept_all = BatchVote {
        batch_id: v.batch_id,
        votes: vec![Vote::Accept as i32; candidates.len()],
        last_applied_batch_id: peer_fixture::LAST_APPLIED_BATCH,
        expired: Vec::new(),
        attested_attempt: 0,
    };
    let [_, one, two] = PartyId::ALL;
    let votes = BTreeMap::from([(one, v), (two, accept_all)]);
    match catching_up(peer_fixture::LAST_APPLIED_BATCH, &votes) {
        CatchingUp::Fetch { party, to } => {
            assert_eq!(party, one);
            assert!(to > peer_fixture::LAST_APPLIED_BATCH);
        }
        CatchingUp::Replay(behind) => {
            assert_eq!(behind.len(), 1);
            assert!(behind
                .iter()
                .all(|&(p, from)| p == one && from <= peer_fixture::LAST_APPLIED_BATCH));
        }
        CatchingUp::No => {
            let mut c = BatchCommit::default();
            tally(
                &candidates,
                &votes,
                peer_fixture::CUTOFF_MS,
                |_| true,
                &mut c,
            );
            let mut seen = std::collections::HashSet::new();
            let placed = c
                .request_ids
                .iter()
                .chain(c.timed_out.iter().map(|i| &i.request_id))
                .chain(c.digest_mismatch.iter().map(|i| &i.request_id));
            for id in placed {
                assert!(
                    seen.insert(id.clone()),
                    "a candidate is placed at most once"
                );
                assert!(candidates.iter().any(|k| k.id.0[..] == id[..]));
            }
        }
    }
}

/// What a dialer sends on an MPC link: the session id, then frames. Each frame's length is
/// checked against the cap before its payload is taken, and a round's receive takes exactly
/// the words it expects (every word type the protocol sends).
fn mpc_link(bytes: &[u8]) {
    use crate::links::{frame_header, frame_len, FRAME_HEADER};
    let Some((session, mut rest)) = bytes.split_first_chunk::<8>() else {
        return;
    };
    while let Some((header, after)) = rest.split_first_chunk::<FRAME_HEADER>() {
        let Ok(len) = frame_len(*header) else {
            return;
        };
        let Some((payload, after)) = after.split_at_checked(len) else {
            return;
        };
        assert_eq!(frame_header(payload).ok(), Some(*header));
        let expected = usize::from(session[0]);
        words::<u16>(payload, expected);
        words::<u32>(payload, expected);
        words::<u64>(payload, expected);
        rest = after;
    }
}

fn words<W: Word + PartialEq + std::fmt::Debug>(payload: &[u8], expected: usize) {
    // As many words as fit, and a count the input picks.
    for n in [payload.len() / W::BYTES, expected] {
        match words_of_round::<W>(Peer::Prev, n, payload) {
            Ok(w) => {
                assert_eq!(w.len(), n);
                assert_eq!(encode(&w), payload, "words re-encode to the message");
            }
            Err(e) => {
                assert_ne!(Some(payload.len()), n.checked_mul(W::BYTES));
                let _ = e.to_string();
            }
        }
    }
}

/// Each party's intake check on an envelope; what one accepts, every party accepts the
/// same way, and a second submission of it is a replay. Returns how many accepted it.
fn submit(envelope: &[u8]) -> usize {
    let mut accepted = Vec::new();
    for policy in intake_policies() {
        match policy.check(envelope, INTAKE_NOW_MS, |_| Ok(false)) {
            Ok(a) => {
                let view = sdk_orb::envelope::EnvelopeView::parse(envelope)
                    .expect("an accepted envelope parses");
                assert_eq!(a.id.0, view.request_id().0);
                assert_eq!(a.digest.0, view.digest().0);
                let again = policy.check(envelope, INTAKE_NOW_MS, |_| Ok(true));
                assert!(matches!(again, Err(r) if r.reason == RejectReason::Replay));
                accepted.push((a.id, a.digest));
            }
            Err(r) => {
                assert_eq!(
                    r.reason == RejectReason::Oversized,
                    envelope.len() > policy.max_bytes,
                    "oversized exactly when over the limit"
                );
                let status: tonic::Status = r.clone().into();
                assert_eq!(status.code(), r.reason.code());
            }
        }
    }
    assert!(
        accepted.is_empty() || accepted.len() == 3,
        "the parties agree on an envelope's fate"
    );
    assert!(accepted.windows(2).all(|w| w[0] == w[1]));
    accepted.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_seeds_reach_the_deep_paths() {
        let seeds = peer_message_seeds();
        for (name, input) in &seeds {
            peer_message(input);
            assert!(!input.is_empty(), "{name}");
        }
        // The recorded commit runs all five pending requests and enrols the first.
        let (_, input) = seeds
            .iter()
            .find(|(n, _)| *n == "commit-recorded")
            .expect("seed present");
        let c = BatchCommit::decode(&input[1..]).expect("decodes");
        assert_eq!(c.request_ids.len(), 5);
        assert_eq!(crate::batch::plan::committed_ids(&c).count(), 5);
        assert!(crate::batch::plan::check_commit(&c, &fixture_meta()).is_ok());
        let (_, input) = seeds
            .iter()
            .find(|(n, _)| *n == "commit-repeated-request")
            .expect("seed present");
        let c = BatchCommit::decode(&input[1..]).expect("decodes");
        assert!(crate::batch::plan::check_commit(&c, &fixture_meta()).is_err());
        // The mixed vote: accept, already final, digest mismatch, accept, accept.
        let (_, input) = seeds
            .iter()
            .find(|(n, _)| *n == "vote-mixed")
            .expect("seed present");
        let v = BatchVote::decode(&input[1..]).expect("decodes");
        let expect = [
            Vote::Accept,
            Vote::AlreadyFinal,
            Vote::DigestMismatch,
            Vote::Accept,
            Vote::Accept,
        ]
        .map(|v| v as i32);
        assert_eq!(v.votes, expect);
    }

    /// The checked-in seeds (`conformance-vectors corpus`) reach the deep paths: the
    /// sealed envelopes pass every party's intake.
    #[test]
    fn checked_in_orb_seeds_pass_the_intake() -> Result<(), Box<dyn std::error::Error>> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/orb_request");
        let mut sealed = 0;
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let input = std::fs::read(&path)?;
            orb_request(&input);
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with("submit-envelope_sealing") {
                let r = SubmitRequest::decode(&input[1..])?;
                assert_eq!(submit(&r.envelope), 3, "{name}");
                sealed += 1;
            }
        }
        assert_eq!(sealed, 2);
        Ok(())
    }

    #[test]
    fn orb_requests_and_configs_never_panic_on_simple_inputs() {
        orb_request(&get_result_input(&[7; 16]));
        orb_request(&get_result_input(&[7; 15]));
        orb_request(&stream_results_input(&[&[1; 16], &[2; 16]]));
        orb_request(&stream_results_input(&[&[1; 3]]));
        orb_request(&submit_input(b"not an envelope"));
        orb_request(&[]);
        let sample = crate::keys::sample_config(PartyId::ALL[1], 50050).expect("sample");
        config(&config_input(&sample, &[]));
        config(&config_input(
            &sample,
            &[
                ("OCELLI_BATCH_MAX_SIZE", "7"),
                ("OCELLI_MATCHING_THRESHOLD", "NaN"),
            ],
        ));
        config(b"party_id = 3\0OCELLI_PARTY_ID=x\n");
    }

    #[test]
    fn a_valid_sample_config_passes_the_target_checks() {
        let sample = crate::keys::sample_config(PartyId::ALL[2], 50050).expect("sample");
        let cfg = NodeConfig::from_toml(&sample).expect("sample parses");
        cfg.validate().expect("sample is valid");
        config(&config_input(&sample, &[("OCELLI_BATCH_MAX_SIZE", "9")]));
    }
}

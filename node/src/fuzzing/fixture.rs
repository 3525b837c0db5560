//! What the fuzz targets run against, and the inputs that reach it: the tags that pick a
//! message type, the node-to-node fixture ([`peer_fixture`]), the intake fixture's keys,
//! and the builders of seed inputs that `conformance-vectors corpus` writes.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use prost::Message;
use sha2::{Digest, Sha256};
use shared_proto::v1::{
    BatchAbort, BatchCommit, BatchCommitAck, BatchItem, BatchProposal, BatchVote,
    FetchBatchRequest, GetResultRequest, StreamResultsRequest, SubmitRequest,
};

use crate::agreement::coordinator::{tally, vote_on};
use crate::batch::Outcome;
use crate::config::IntakeConfig;
use crate::ids::{EnvelopeDigest, PartyId, RequestId, SerialId};
use crate::intake::IntakePolicy;
use crate::queue::{Candidate, PendingQueue};
use crate::store::Meta;
use ocelli_mpc::share::encode;

/// First byte of a `peer_message` input: which node-to-node message the rest encodes.
pub mod peer_tag {
    /// `BatchProposal`, as party 1 or 2 receives it.
    pub const PROPOSAL: u8 = 0;
    /// `BatchCommit`, as party 1 or 2 receives it, or party 0 from `FetchBatch`.
    pub const COMMIT: u8 = 1;
    /// `BatchVote`, as party 0 receives it.
    pub const VOTE: u8 = 2;
    /// What a dialer sends on an MPC link (not protobuf): the session id, then frames.
    pub const MPC_LINK: u8 = 3;
    /// `FetchBatchRequest`, as party 1 or 2 receives it.
    pub const FETCH: u8 = 4;
    /// `BatchCommitAck`, as party 0 receives it.
    pub const COMMIT_ACK: u8 = 5;
    /// `BatchAbort`, as party 1 or 2 receives it.
    pub const ABORT: u8 = 6;
    /// Tags in use; the first byte is taken modulo this.
    pub const COUNT: u8 = 7;
}

/// First byte of an `orb_request` input: which orb-facing request the rest encodes.
pub mod orb_tag {
    /// `SubmitRequest`.
    pub const SUBMIT: u8 = 0;
    /// `GetResultRequest`.
    pub const GET_RESULT: u8 = 1;
    /// `StreamResultsRequest`.
    pub const STREAM_RESULTS: u8 = 2;
    /// Tags in use; the first byte is taken modulo this.
    pub const COUNT: u8 = 3;
}

/// The node a `peer_message` input arrives at: its counters, pending queue, request log
/// and share database.
pub mod peer_fixture {
    use sdk_orb::RequestType;

    /// The last batch it applied.
    pub const LAST_APPLIED_BATCH: u64 = 6;
    /// The serial id its next enrolment gets.
    pub const NEXT_SERIAL: u64 = 4;
    /// Enrolled serial ids.
    pub const ENROLLED: [u64; 3] = [1, 2, 3];
    /// The MPC session its links carry.
    pub const MPC_SESSION: u64 = 0x0c31_1100_0000_0007;
    /// Party 0 times out candidates received before this (ms).
    pub const CUTOFF_MS: u64 = 2_500;
    /// A request the log holds as final (not pending).
    pub const FINAL_REQUEST: [u8; 16] = [0x16; 16];

    /// A pending request: held in the queue and the request log with its envelope.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Pending {
        /// Request id.
        pub id: [u8; 16],
        /// Envelope digest.
        pub digest: [u8; 32],
        /// Request type.
        pub request_type: RequestType,
        /// Target serial id (deletion, reauth, reset).
        pub serial_id: u64,
        /// Arrival time, ms.
        pub received_ms: u64,
    }

    /// The pending requests, oldest first: one of each type; the deletion and the
    /// re-authentication target enrolled entries, the reset one that does not exist.
    pub const PENDING: [Pending; 5] = [
        pending(1, RequestType::Uniqueness, 0),
        pending(2, RequestType::UniquenessCheck, 0),
        pending(3, RequestType::Deletion, 2),
        pending(4, RequestType::Reauth, 3),
        pending(5, RequestType::Reset, 9),
    ];

    const fn pending(n: u8, request_type: RequestType, serial_id: u64) -> Pending {
        Pending {
            id: [0x10 + n; 16],
            digest: [0x20 + n; 32],
            request_type,
            serial_id,
            received_ms: 1_000 * n as u64,
        }
    }
}

/// The intake fixture's clock: seed envelopes are captured at this time.
pub const INTAKE_NOW_MS: u64 = 1_790_000_000_000;

/// The seed inputs of `peer_message`, built by the node's own code against
/// [`peer_fixture`]: party 0's proposal of the pending queue, a peer's vote on it, the
/// commit the votes make, that commit as the batch log records it (with outcomes), and
/// MPC frames. `(name, input)`; deterministic.
pub fn peer_message_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let candidates = fixture_queue().oldest(usize::MAX);
    let proposal = BatchProposal {
        batch_id: peer_fixture::LAST_APPLIED_BATCH + 1,
        items: candidates
            .iter()
            .map(|c| BatchItem {
                request_id: c.id.0.to_vec(),
                envelope_digest: c.digest.0.to_vec(),
                reported_by: 0,
            })
            .collect(),
    };
    let mut queue = fixture_queue();
    let accept_all = vote_on(
        &mut queue,
        peer_fixture::LAST_APPLIED_BATCH,
        &proposal,
        |_| false,
        |_| true,
    );
    // A peer that has already answered the second request and holds another envelope
    // under the third.
    let mut partial = proposal.clone();
    partial.items[1].request_id = peer_fixture::FINAL_REQUEST.to_vec();
    partial.items[2].envelope_digest = vec![0xee; 32];
    let mut queue = fixture_queue();
    let mixed = vote_on(
        &mut queue,
        peer_fixture::LAST_APPLIED_BATCH,
        &partial,
        |id| id.0 == peer_fixture::FINAL_REQUEST,
        |_| true,
    );
    let mut ahead = accept_all.clone();
    ahead.last_applied_batch_id = peer_fixture::LAST_APPLIED_BATCH + 2;

    let commit = fixture_commit(&candidates, &accept_all);
    let mut recorded = commit.clone();
    recorded.outcomes_recorded = true;
    recorded.outcomes = [
        Outcome::Unique,
        Outcome::Match {
            entries: vec![SerialId(1)],
            earlier: vec![0],
        },
        Outcome::Apply,
        Outcome::Reauth(true),
        Outcome::Apply,
    ]
    .iter()
    .map(crate::batch::plan::record_outcome)
    .collect();
    let mut mixed_commit = fixture_commit(&candidates, &mixed);
    mixed_commit.outcomes_recorded = true;
    mixed_commit.outcomes = [
        Outcome::Match {
            entries: Vec::new(),
            earlier: Vec::new(),
        },
        Outcome::Reauth(false),
        Outcome::NotEvaluated,
    ]
    .iter()
    .map(crate::batch::plan::record_outcome)
    .collect();
    // A request both run and listed as timed out (refused).
    let mut repeated = recorded.clone();
    repeated.timed_out.push(BatchItem {
        request_id: repeated.request_ids[0].clone(),
        envelope_digest: peer_fixture::PENDING[0].digest.to_vec(),
        reported_by: 0,
    });

    // A replayed commit that also lists a request no node could open.
    let mut unopenable = recorded.clone();
    unopenable.unopenable.push(BatchItem {
        request_id: vec![0x0b; 16],
        envelope_digest: vec![0x0c; 32],
        reported_by: 0,
    });

    // The session id, then each payload as a frame.
    let link = |payloads: &[Vec<u8>]| {
        let mut v = vec![peer_tag::MPC_LINK];
        v.extend_from_slice(&peer_fixture::MPC_SESSION.to_le_bytes());
        for p in payloads {
            v.extend_from_slice(&crate::links::frame_header(p).expect("a small frame"));
            v.extend_from_slice(p);
        }
        v
    };
    let tagged = |tag: u8, m: &dyn MessageBytes| {
        let mut v = vec![tag];
        v.extend_from_slice(&m.bytes());
        v
    };
    vec![
        ("proposal", tagged(peer_tag::PROPOSAL, &proposal)),
        ("proposal-partial", tagged(peer_tag::PROPOSAL, &partial)),
        ("vote-accept", tagged(peer_tag::VOTE, &accept_all)),
        ("vote-mixed", tagged(peer_tag::VOTE, &mixed)),
        ("vote-ahead", tagged(peer_tag::VOTE, &ahead)),
        ("commit", tagged(peer_tag::COMMIT, &commit)),
        ("commit-recorded", tagged(peer_tag::COMMIT, &recorded)),
        (
            "commit-mixed-recorded",
            tagged(peer_tag::COMMIT, &mixed_commit),
        ),
        (
            "commit-repeated-request",
            tagged(peer_tag::COMMIT, &repeated),
        ),
        (
            "commit-recorded-unopenable",
            tagged(peer_tag::COMMIT, &unopenable),
        ),
        ("mpc-hello", link(&[])),
        (
            "mpc-u16",
            link(&[encode(&[1u16, 0xffff, 2, 3, 0x8000, 4, 5])]),
        ),
        ("mpc-u32", link(&[encode(&[7u32, 0xdead_beef, 0])])),
        (
            "mpc-u64",
            link(&[encode(&[u64::MAX, 0x0123_4567_89ab_cdef])]),
        ),
        (
            "mpc-rounds",
            link(&[Vec::new(), encode(&[9u16; 7]), encode(&[3u64; 7])]),
        ),
        (
            "fetch",
            tagged(
                peer_tag::FETCH,
                &FetchBatchRequest {
                    batch_id: peer_fixture::LAST_APPLIED_BATCH,
                },
            ),
        ),
        (
            "commit-ack",
            tagged(
                peer_tag::COMMIT_ACK,
                &BatchCommitAck {
                    batch_id: peer_fixture::LAST_APPLIED_BATCH + 1,
                    results_digest: vec![0x5a; 32],
                    signature: None,
                    evaluation_failed: false,
                },
            ),
        ),
        (
            "abort",
            tagged(
                peer_tag::ABORT,
                &BatchAbort {
                    batch_id: peer_fixture::LAST_APPLIED_BATCH + 1,
                },
            ),
        ),
    ]
}

/// The intake fixture's keys, derived from public labels: the three nodes' HPKE public
/// keys and the orb's signing key (the only key on the fixture's allow-list). For sealing
/// seed envelopes; never deploy them.
pub fn intake_keys() -> (sdk_orb::keys::NodePublicKeys, sdk_orb::keys::OrbSigningKey) {
    let public = PartyId::ALL.map(|p| {
        sdk_orb::keys::NodeSecretKey::from_bytes(&node_secret(p))
            .map(|k| k.public_key())
            .expect("32 bytes are a valid X25519 secret key")
    });
    let orb = sdk_orb::keys::OrbSigningKey::from_bytes(&label_key("orb"));
    (sdk_orb::keys::NodePublicKeys(public), orb)
}

/// An `orb_request` input: a `SubmitRequest` carrying `envelope`.
pub fn submit_input(envelope: &[u8]) -> Vec<u8> {
    tagged_input(
        orb_tag::SUBMIT,
        &SubmitRequest {
            envelope: envelope.to_vec(),
            or_serial_ids: Vec::new(),
        },
    )
}

/// An `orb_request` input: a `GetResultRequest` for `request_id`.
pub fn get_result_input(request_id: &[u8]) -> Vec<u8> {
    tagged_input(
        orb_tag::GET_RESULT,
        &GetResultRequest {
            request_id: request_id.to_vec(),
        },
    )
}

/// An `orb_request` input: a `StreamResultsRequest` for `request_ids`.
pub fn stream_results_input(request_ids: &[&[u8]]) -> Vec<u8> {
    tagged_input(
        orb_tag::STREAM_RESULTS,
        &StreamResultsRequest {
            request_ids: request_ids.iter().map(|b| b.to_vec()).collect(),
        },
    )
}

/// A `config` input: the TOML text, then the overrides as `VAR=value` lines.
pub fn config_input(toml: &str, env: &[(&str, &str)]) -> Vec<u8> {
    let mut v = toml.as_bytes().to_vec();
    if !env.is_empty() {
        v.push(0);
        for (k, val) in env {
            v.extend_from_slice(format!("{k}={val}\n").as_bytes());
        }
    }
    v
}

/// A message's encoding, object-safe (for the seed table).
trait MessageBytes {
    fn bytes(&self) -> Vec<u8>;
}

impl<M: Message> MessageBytes for M {
    fn bytes(&self) -> Vec<u8> {
        self.encode_to_vec()
    }
}

fn tagged_input(tag: u8, m: &impl Message) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(&m.encode_to_vec());
    v
}

pub(super) fn fixture_queue() -> PendingQueue {
    let mut q = PendingQueue::default();
    for p in peer_fixture::PENDING {
        q.push(
            RequestId(p.id),
            EnvelopeDigest(p.digest),
            p.received_ms,
            None,
        );
    }
    q
}

pub(super) fn fixture_meta() -> Meta {
    Meta {
        last_applied_batch: peer_fixture::LAST_APPLIED_BATCH,
        next_serial: peer_fixture::NEXT_SERIAL,
    }
}

/// The commit party 0 makes of `candidates` when both peers vote `vote`.
fn fixture_commit(candidates: &[Candidate], vote: &BatchVote) -> BatchCommit {
    let votes = BTreeMap::from([
        (PartyId::ALL[1], vote.clone()),
        (PartyId::ALL[2], vote.clone()),
    ]);
    let mut commit = BatchCommit {
        batch_id: peer_fixture::LAST_APPLIED_BATCH + 1,
        next_serial_id: peer_fixture::NEXT_SERIAL,
        mpc_session: peer_fixture::MPC_SESSION,
        attempt: 1,
        ..BatchCommit::default()
    };
    tally(
        candidates,
        &votes,
        peer_fixture::CUTOFF_MS,
        |_| true,
        &mut commit,
    );
    commit
}

/// One intake policy per party, with the fixture keys.
pub(super) fn intake_policies() -> &'static [IntakePolicy; 3] {
    static POLICIES: OnceLock<[IntakePolicy; 3]> = OnceLock::new();
    POLICIES.get_or_init(|| {
        let orb = intake_keys().1.verifying_key();
        PartyId::ALL.map(|p| {
            IntakePolicy::new(p, &node_secret(p), [orb], &IntakeConfig::default())
                .expect("32-byte keys are valid")
        })
    })
}

fn label_key(label: &str) -> [u8; 32] {
    Sha256::digest(format!("ocelli/fuzz/intake/{label}")).into()
}

fn node_secret(party: PartyId) -> [u8; 32] {
    label_key(&format!("party{}", party.get()))
}

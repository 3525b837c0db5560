//! The node's intake against the `envelope_rejections_v2` vectors: every envelope, taken in
//! by the vector's party under its envelope-version setting, gets exactly the recorded
//! rejection reason (the base envelope: accepted), at the envelope's capture time with an
//! empty request log.

use conformance_vectors::families::envelope_rejections_v2::{input, Case, NodeVersions, Spec};
use conformance_vectors::{default_vectors_dir, load_file};
use ocelli_node::config::{EnvelopeConfig, IntakeConfig};
use ocelli_node::intake::IntakePolicy;
use sdk_orb::PartyId;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Party `p`'s intake with the base's X-Wing key (unless `v1_only`) and orb key; its version 1
/// key is unused by this family.
fn policy(p: u8, node: NodeVersions, seed: &[u8; 32], orb: &[u8; 32]) -> Res<IntakePolicy> {
    let cfg = EnvelopeConfig {
        accept_v1_until: None,
        refuse_v1: node == NodeVersions::V2Only,
    };
    let hybrid = (node != NodeVersions::V1Only).then_some(seed);
    Ok(IntakePolicy::new(
        PartyId::try_from(p)?,
        &[7; 32],
        [ed25519_dalek::VerifyingKey::from_bytes(orb)?],
        &IntakeConfig::default(),
    )?
    .with_envelope_versions(hybrid, &cfg)?)
}

#[test]
fn the_intake_gives_each_vector_its_recorded_reason() -> Res {
    let file = load_file::<Spec>(&default_vectors_dir())?;
    let Case::Base { keys, request, .. } = &file.vectors[0].case else {
        return Err("vector 1 is not the base".into());
    };
    let orb = keys.orb_public_key.array::<32>("orb_public_key")?;
    let seeds = (0..3)
        .map(|p| keys.node_seeds[p].array::<32>("node_seeds"))
        .collect::<Result<Vec<_>, _>>()?;
    let now = request.timestamp_ms;
    let mut checked = 0;
    for v in &file.vectors {
        let bytes = input(v, &file.vectors)?;
        let runs: Vec<(u8, NodeVersions, &str)> = match &v.case {
            Case::Base { .. } => (0..3)
                .flat_map(|p| [NodeVersions::Both, NodeVersions::V2Only].map(|n| (p, n, "accept")))
                .collect(),
            Case::Reject {
                party,
                node,
                intake,
                ..
            } => vec![(*party, *node, intake.as_str())],
        };
        for (p, node, expected) in runs {
            let got = policy(p, node, &seeds[usize::from(p)], &orb)?
                .check(&bytes, now, |_| Ok(false))
                .map_or_else(|r| r.reason.as_str(), |_| "accept");
            assert_eq!(got, expected, "vector {} ({}), party {p}", v.id, v.comment);
            checked += 1;
        }
    }
    println!(
        "{checked} intake checks over {} vectors",
        file.vectors.len()
    );
    assert!(checked > file.vectors.len());
    Ok(())
}

//! One comparison-phase run of a pass and what is opened from it: match bits, OR over
//! rotations, the per-pair eye rule, then opening the plain pairs (default mode) or folding
//! them into the per-request OR (privacy-max), and folding the mirrored pairs into the
//! per-request mirror OR, which is never opened per pair.

use super::plan::{Against, Pair};
use super::{MatchResult, PassInputs, PipelineConfig, PipelineRequest};
use crate::bits::{plane_to_bits, words_for};
use crate::circuit::{Circuit, SharedBits};
use crate::compare::{or, or_blocks};
use crate::network::NetworkError;
use sdk_orb::rotation::ROTATION_COUNT;

/// Runs one pass. `any_shared` holds two blocks of `words_for(requests.len())` words: the
/// plain pairs' OR per request (privacy-max), then the mirrored pairs' OR per request.
pub(super) fn run_pass<C: Circuit>(
    circuit: &mut C,
    pass: PassInputs,
    requests: &[PipelineRequest<'_>],
    config: &PipelineConfig,
    results: &mut [MatchResult],
    any_shared: &mut C::Bits,
) -> Result<(), NetworkError> {
    let w = pass.padded / 64;
    let bits = circuit.match_bits(&pass.cd, &pass.md, config.threshold_a)?;
    // [rotation][eye][pair] -> [eye][pair]
    let per_eye = or_blocks(circuit, &bits, ROTATION_COUNT)?;
    let left = per_eye.slice(0..w);
    let right = per_eye.slice(w..2 * w);
    let both = circuit.and(&left, &right)?;
    // OR rule: l ^ r ^ (l & r); the rule is public per pair, so masking is local.
    let mut policy = vec![0u64; w];
    for (p, pair) in pass.pairs.iter().enumerate() {
        if requests[pair.request].or_rule(pair.against) {
            policy[p / 64] |= 1 << (p % 64);
        }
    }
    let person = both.xor(&left.xor(&right).and_public(&policy));
    let mirrored = |a: Against| matches!(a, Against::Mirror);
    let has_mirror = pass.pairs.iter().any(|pair| mirrored(pair.against));

    if !config.privacy_max {
        // Open the plain pairs only; mirrored pairs stay shared.
        let plain: Vec<usize> = (0..pass.pairs.len())
            .filter(|&p| !mirrored(pass.pairs[p].against))
            .collect();
        if !plain.is_empty() {
            let to_open = if has_mirror {
                person.gather(&plain.iter().map(|&p| Some(p)).collect::<Vec<_>>())
            } else {
                person.clone()
            };
            let opened = circuit.open(&to_open)?;
            for (i, bit) in plane_to_bits(&opened, plain.len()).into_iter().enumerate() {
                if bit {
                    let Pair {
                        request: j,
                        against,
                    } = pass.pairs[plain[i]];
                    results[j].any = true;
                    match against {
                        Against::Entry(d) => results[j].entries.push(d),
                        Against::Earlier(k) => results[j].earlier.push(k),
                        Against::Mirror => unreachable!("mirrored pairs are not opened"),
                    }
                }
            }
        }
    }
    if config.privacy_max || has_mirror {
        // Gather each request's folded pairs into slots [slot][accumulator] and OR over slots:
        // plain pairs (privacy-max only) into slot position j, mirrored ones into rw * 64 + j.
        let rw = words_for(requests.len());
        let width = 2 * rw * 64;
        let mut slots_of = vec![0usize; 2 * rw * 64];
        let mut slot_pairs: Vec<Vec<Option<usize>>> = Vec::new();
        for (
            p,
            &Pair {
                request: j,
                against,
            },
        ) in pass.pairs.iter().enumerate()
        {
            let at = if mirrored(against) {
                rw * 64 + j
            } else if config.privacy_max {
                j
            } else {
                continue;
            };
            let slot = slots_of[at];
            slots_of[at] += 1;
            if slot_pairs.len() <= slot {
                slot_pairs.push(vec![None; width]);
            }
            slot_pairs[slot][at] = Some(p);
        }
        let slots = slot_pairs.len();
        let positions: Vec<Option<usize>> = slot_pairs.into_iter().flatten().collect();
        let gathered = person.gather(&positions);
        let per_request = or_blocks(circuit, &gathered, slots)?;
        *any_shared = or(circuit, any_shared, &per_request)?;
    }
    Ok(())
}

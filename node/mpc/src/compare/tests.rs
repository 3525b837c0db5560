use super::*;
use crate::bits::{plane_to_bits, to_planes};
use crate::local::{additive_u16, open_bits, open_u32, run_three};
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use sdk_orb::plaintext::{threshold_coefficient, DotProducts, DEFAULT_THRESHOLD};

#[test]
fn lift_recovers_md_in_z_2_32_for_every_carry_pattern() {
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let mut values: Vec<u16> = vec![0, 1, 2, 12_800, 6_400, 65_535, 32_768];
    values.extend((0..500).map(|_| (rng.next_u32() % 12_801) as u16));
    let shares = additive_u16(&mut rng, &values);
    let out = run_three(2, |s| {
        let r = s.reshare_u16(&shares[s.party().index()]).expect("reshare");
        lift(s, &r).expect("lift")
    });
    let opened = open_u32([&out[0].0, &out[1].0, &out[2].0]);
    let expected: Vec<u32> = values.iter().map(|&v| u32::from(v)).collect();
    assert_eq!(opened, expected);
}

#[test]
fn msb_of_shared_u32_values() {
    let mut rng = ChaCha20Rng::seed_from_u64(3);
    let mut values: Vec<u32> = vec![0, 1, u32::MAX, 1 << 31, (1 << 31) - 1, 1 << 30];
    values.extend((0..300).map(|_| rng.next_u32()));
    let comps: Vec<[u32; 3]> = values
        .iter()
        .map(|&v| {
            let (a, b) = (rng.next_u32(), rng.next_u32());
            [a, b, v.wrapping_sub(a).wrapping_sub(b)]
        })
        .collect();
    let out = run_three(4, |s| {
        let i = s.party().index();
        let x = Replicated::new(
            comps.iter().map(|c| c[i]).collect(),
            comps.iter().map(|c| c[(i + 2) % 3]).collect(),
        );
        msb(s, &x).expect("msb")
    });
    let opened = open_bits([&out[0].0, &out[1].0, &out[2].0]);
    let bits = plane_to_bits(&opened, values.len());
    for (v, b) in values.iter().zip(bits) {
        assert_eq!(b, v >> 31 == 1, "value {v:#x}");
    }
}

/// Random (cd, md) pairs of genuine masked bitvectors, many close to the threshold.
fn dot_products(rng: &mut ChaCha20Rng, a: u32, n: usize) -> Vec<DotProducts> {
    let mut out = vec![
        DotProducts { cd: 0, md: 0 },
        DotProducts {
            cd: 12_800,
            md: 12_800,
        },
        DotProducts {
            cd: -12_800,
            md: 12_800,
        },
        DotProducts { cd: 1, md: 1 },
        DotProducts { cd: -1, md: 1 },
    ];
    while out.len() < n {
        let md = rng.next_u32() % 12_801;
        let cd = if rng.next_u32().is_multiple_of(2) {
            // Near the threshold: cd = A md / 2^16 plus a small offset.
            let center = ((u64::from(a) * u64::from(md)) >> 16) as i64;
            center + i64::from(rng.next_u32() % 7) - 3
        } else {
            i64::from(rng.next_u32() % (2 * md + 1)) - i64::from(md)
        };
        // cd has the parity of md and lies in [-md, md].
        let cd = cd.clamp(-i64::from(md), i64::from(md));
        let cd = if (cd - i64::from(md)) % 2 != 0 {
            cd - 1
        } else {
            cd
        };
        if cd >= -i64::from(md) {
            out.push(DotProducts { cd: cd as i32, md });
        }
    }
    out
}

#[test]
fn match_bits_equal_the_plaintext_rule() {
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    let a = threshold_coefficient(DEFAULT_THRESHOLD);
    assert_eq!(a, 20_316);
    let pairs = dot_products(&mut rng, a, 2_000);
    let cd: Vec<u16> = pairs.iter().map(|p| p.cd as u16).collect();
    let md: Vec<u16> = pairs.iter().map(|p| p.md as u16).collect();
    let cd_shares = additive_u16(&mut rng, &cd);
    let md_shares = additive_u16(&mut rng, &md);
    let out = run_three(6, |s| {
        let i = s.party().index();
        match_bits(s, &cd_shares[i], &md_shares[i], a).expect("compare")
    });
    let opened = open_bits([&out[0].0, &out[1].0, &out[2].0]);
    let bits = plane_to_bits(&opened, pairs.len());
    let mut matches = 0;
    for (p, b) in pairs.iter().zip(bits) {
        assert_eq!(b, p.matches(a), "{p:?}");
        matches += usize::from(b);
    }
    assert!(matches > 100 && matches < pairs.len() - 100, "{matches}");
    // md = 0 never matches.
    assert!(!plane_to_bits(&opened, 1)[0]);
    // Rounds are independent of the batch size.
    let rounds = out[0].1.rounds;
    assert_eq!(rounds, 1 + (1 + 1 + 4 + 2) + (1 + 1 + 5), "rounds");
}

#[test]
fn or_over_blocks_and_padding_bits() {
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    // 31 blocks of 100 bits each (2 words per block, padded).
    let n = 100;
    let w = words_for(n);
    let blocks: Vec<Vec<u16>> = (0..31)
        .map(|_| {
            (0..n)
                .map(|_| u16::from(rng.next_u32() % 40 == 0))
                .collect()
        })
        .collect();
    let planes: Vec<u64> = blocks.iter().flat_map(|b| to_planes(b, 1)).collect();
    let comps: Vec<[u64; 3]> = planes
        .iter()
        .map(|&v| {
            let (a, b) = (rng.next_u64(), rng.next_u64());
            [a, b, v ^ a ^ b]
        })
        .collect();
    let out = run_three(8, |s| {
        let i = s.party().index();
        let x = Replicated::new(
            comps.iter().map(|c| c[i]).collect(),
            comps.iter().map(|c| c[(i + 2) % 3]).collect(),
        );
        or_blocks(s, &x, 31).expect("or")
    });
    let opened = open_bits([&out[0].0, &out[1].0, &out[2].0]);
    assert_eq!(opened.len(), w);
    for (e, b) in plane_to_bits(&opened, n).into_iter().enumerate() {
        assert_eq!(b, blocks.iter().any(|blk| blk[e] == 1), "element {e}");
    }
    assert_eq!(out[0].1.rounds, 5, "ceil(log2(31)) levels");
}

#[test]
fn bit_injection_gives_arithmetic_shares_of_each_bit() {
    let mut rng = ChaCha20Rng::seed_from_u64(9);
    let words: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
    let comps: Vec<[u64; 3]> = words
        .iter()
        .map(|&v| {
            let (a, b) = (rng.next_u64(), rng.next_u64());
            [a, b, v ^ a ^ b]
        })
        .collect();
    let out = run_three(10, |s| {
        let i = s.party().index();
        let x = Replicated::new(
            comps.iter().map(|c| c[i]).collect(),
            comps.iter().map(|c| c[(i + 2) % 3]).collect(),
        );
        crate::inject::inject_bits(s, &x).expect("inject")
    });
    for i in 0..3 {
        assert!(
            out[i].0.prev == out[(i + 2) % 3].0.own,
            "consistent components"
        );
    }
    for e in 0..64 * words.len() {
        let v = out[0].0.own[e]
            .wrapping_add(out[1].0.own[e])
            .wrapping_add(out[2].0.own[e]);
        assert_eq!(u64::from(v), (words[e / 64] >> (e % 64)) & 1, "bit {e}");
    }
}

/// Chi-squared statistic of the byte values against uniform (255 degrees of freedom: mean
/// 255, standard deviation about 22.6).
fn chi_squared(bytes: &[u8]) -> f64 {
    let mut counts = [0u64; 256];
    for &b in bytes {
        counts[b as usize] += 1;
    }
    let expected = bytes.len() as f64 / 256.0;
    counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum()
}

#[test]
fn a_partys_view_of_the_comparison_phase_is_uniform_and_input_independent() {
    // Constant secrets (every cd and md zero, then every cd = md = 12,800): an opened
    // intermediate (cd, md, the lifted md, x, carries, match bits) would be constant bytes in
    // some message. Every received message must instead look uniform, and the message sizes
    // must not depend on the inputs.
    let n = 4096;
    let a = threshold_coefficient(DEFAULT_THRESHOLD);
    let mut sizes = Vec::new();
    for value in [0u16, 12_800] {
        let zeros = vec![0u16; n];
        let constant = vec![value; n];
        let out = run_three(20, |s| {
            // Party 0 holds the whole value as its additive share, the others zero: the
            // resharing must hide even that.
            let (cd, md) = if s.party().index() == 0 {
                (&constant, &constant)
            } else {
                (&zeros, &zeros)
            };
            match_bits(s, cd, md, a).expect("compare")
        });
        for (party, (_, _, received)) in out.iter().enumerate() {
            assert!(!received.is_empty());
            for (round, (from, message)) in received.iter().enumerate() {
                assert!(
                    message.len() >= 64,
                    "party {party} round {round}: {} bytes",
                    message.len()
                );
                let chi = chi_squared(message);
                // Small messages get a looser bound; 255 +- 6 standard deviations otherwise.
                let bound = if message.len() < 4096 { 600.0 } else { 400.0 };
                assert!(
                    chi < bound,
                    "party {party} round {round} from {from:?}: chi-squared {chi}"
                );
            }
        }
        sizes.push(
            out.iter()
                .map(|(_, _, r)| r.iter().map(|(_, m)| m.len()).collect::<Vec<_>>())
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(sizes[0], sizes[1], "message sizes depend on the inputs");
}

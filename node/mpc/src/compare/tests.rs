use super::*;
use crate::bits::{plane_to_bits, to_planes};
use crate::local::{additive_u16, assert_views_uniform, open_bits, run_three};
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use sdk_orb::plaintext::{threshold_coefficient, DotProducts, DEFAULT_THRESHOLD};

#[test]
fn split_parts_sum_to_the_value_and_the_pair_agrees() {
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let values: Vec<u16> = (0..300).map(|_| rng.next_u32() as u16).collect();
    let shares = additive_u16(&mut rng, &values);
    let out = run_three(2, |s| split(s, &shares[s.party().index()]).expect("split"));
    assert_eq!(out[0].0, out[2].0, "parties 0 and 2 hold the same part");
    for (e, &v) in values.iter().enumerate() {
        assert_eq!(out[1].0[e].wrapping_add(out[0].0[e]), v, "value {e}");
    }
    assert_eq!(out[1].1.bytes_sent, 0);
    assert_eq!(out[0].1.bytes_sent, 600);
}

/// Components `(c_0, c_1, c_2)` of an XOR sharing of `v`, for `party`'s (own, prev).
fn shared_planes(rng: &mut ChaCha20Rng, values: &[u32]) -> [Replicated<u64>; 3] {
    let planes = to_planes(values, 32);
    let c0: Vec<u64> = planes.iter().map(|_| rng.next_u64()).collect();
    let c1: Vec<u64> = planes.iter().map(|_| rng.next_u64()).collect();
    let c2: Vec<u64> = (0..planes.len())
        .map(|j| planes[j] ^ c0[j] ^ c1[j])
        .collect();
    let comps = [c0, c1, c2];
    core::array::from_fn(|i| Replicated::new(comps[i].clone(), comps[(i + 2) % 3].clone()))
}

#[test]
fn carry_into_every_position_count() {
    let mut rng = ChaCha20Rng::seed_from_u64(3);
    let mut a: Vec<u32> = vec![0, u32::MAX, 0x7FFF_FFFF, 1, 0x8000_0000, 0x5555_5555];
    let mut b: Vec<u32> = vec![0, 1, 1, 0x7FFF_FFFF, 0x7FFF_FFFF, 0xAAAA_AAAB];
    a.extend((0..200).map(|_| rng.next_u32()));
    b.extend((0..200).map(|_| rng.next_u32()));
    let w = words_for(a.len());
    let sa = shared_planes(&mut rng, &a);
    let sb = shared_planes(&mut rng, &b);
    for top in [1, 2, 3, 4, 5, 8, 9, 16, 31, 32] {
        let out = run_three(4, |s| {
            let i = s.party().index();
            crate::binary::carry_into(s, &sa[i], &sb[i], w, top).expect("carry")
        });
        let opened = plane_to_bits(&open_bits([&out[0].0, &out[1].0, &out[2].0]), a.len());
        let low = |v: u32| u64::from(v) & ((1u64 << top) - 1);
        for e in 0..a.len() {
            let expected = (low(a[e]) + low(b[e])) >> top == 1;
            assert_eq!(opened[e], expected, "top {top}: {:#x} + {:#x}", a[e], b[e]);
        }
    }
}

#[test]
fn x_is_exact_for_every_wrap_pattern_of_the_parts() {
    // md up to 2^15 - 1, where the lift's top-bit rule still holds; the split's pads make the
    // parts' top bits (u, v) take all four patterns.
    let mut rng = ChaCha20Rng::seed_from_u64(11);
    let a = threshold_coefficient(DEFAULT_THRESHOLD);
    let mut pairs: Vec<(i32, u32)> = vec![(0, 0), (1, 1), (-1, 1), (12_800, 12_800), (0, 32_767)];
    while pairs.len() < 600 {
        let md = rng.next_u32() % 32_768;
        let cd = (rng.next_u32() % (2 * md + 1)) as i32 - md as i32;
        pairs.push((cd, md));
    }
    let cd: Vec<u16> = pairs.iter().map(|p| p.0 as u16).collect();
    let md: Vec<u16> = pairs.iter().map(|p| p.1 as u16).collect();
    let cd_shares = additive_u16(&mut rng, &cd);
    let md_shares = additive_u16(&mut rng, &md);
    let out = run_three(12, |s| {
        let i = s.party().index();
        compare(s, &cd_shares[i], &md_shares[i], a).expect("compare")
    });
    let (single, pair) = (&out[1].0, &out[0].0);
    let mut patterns = [false; 4];
    for (e, &(c, m)) in pairs.iter().enumerate() {
        let (u, v) = (single.md[e] >> 15, pair.md[e] >> 15);
        patterns[usize::from(2 * u + v)] = true;
        assert_eq!(
            single.cross[e].wrapping_add(pair.cross[e]),
            (a as u16).wrapping_mul(u * v),
            "cross term {e}"
        );
        let x = single.x[e].wrapping_add(pair.x[e]);
        let expected = (i64::from(a) * i64::from(m) - (1i64 << 16) * i64::from(c)) as u32;
        assert_eq!(x, expected, "x of (cd {c}, md {m})");
    }
    assert_eq!(patterns, [true; 4], "top-bit patterns (u, v) seen");
    assert_eq!(
        out[0].0.x, out[2].0.x,
        "parties 0 and 2 hold the same part of x"
    );
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

/// Additive shares of the pairs' `cd` and of their `md` over Z_{2^16}.
fn additive_pairs(rng: &mut ChaCha20Rng, pairs: &[DotProducts]) -> ([Vec<u16>; 3], [Vec<u16>; 3]) {
    let cd: Vec<u16> = pairs.iter().map(|p| p.cd as u16).collect();
    let md: Vec<u16> = pairs.iter().map(|p| p.md as u16).collect();
    (additive_u16(rng, &cd), additive_u16(rng, &md))
}

#[test]
fn match_bits_equal_the_plaintext_rule() {
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    let a = threshold_coefficient(DEFAULT_THRESHOLD);
    assert_eq!(a, 20_316);
    let pairs = dot_products(&mut rng, a, 2_000);
    let (cd_shares, md_shares) = additive_pairs(&mut rng, &pairs);
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
    // Rounds are independent of the batch size: split, cross term, exchange, then the carry:
    // four ripple rounds and a tree over eight blocks.
    for party in &out {
        assert_eq!(party.1.rounds, 1 + 1 + 1 + 4 + 3, "rounds");
    }
}

#[test]
fn every_party_sends_thirteen_and_three_quarter_bytes_per_comparison() {
    let n = 64 * 40;
    let zeros = vec![0u16; n];
    let out = run_three(13, |s| {
        match_bits(s, &zeros, &zeros, 20_316).expect("compare");
        let sent = s.traffic();
        (sent.bytes_sent, sent.messages_sent)
    });
    // Split 4 (parties 0 and 2), cross term 2 (parties 0 and 1), exchange 4 (party 1) or 2
    // (party 2), then 62 AND gates of the adder, one bit each.
    for (party, ((bytes, _), _, _)) in out.iter().enumerate() {
        assert_eq!(*bytes * 4, 55 * n as u64, "party {party}: {bytes} bytes");
    }
    let messages: Vec<u64> = out.iter().map(|((_, m), _, _)| *m).collect();
    assert_eq!(messages, [1 + 1 + 7, 1 + 1 + 7, 1 + 1 + 7]);
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
            // split must hide even that.
            let (cd, md) = if s.party().index() == 0 {
                (&constant, &constant)
            } else {
                (&zeros, &zeros)
            };
            match_bits(s, cd, md, a).expect("compare")
        });
        sizes.push(assert_views_uniform([&out[0].2, &out[1].2, &out[2].2]));
    }
    assert_eq!(sizes[0], sizes[1], "message sizes depend on the inputs");
}

/// `A` of bucket edges from 0 (`A = 2^16`, past u16) to 0.5 (`A = 0`) in steps of 0.025.
fn edge_coefficients() -> Vec<u32> {
    (0..=20)
        .map(|i| threshold_coefficient(f64::from(i) * 0.025))
        .collect()
}

#[test]
fn compare_each_applies_each_comparisons_own_coefficient() {
    let mut rng = ChaCha20Rng::seed_from_u64(30);
    // Each comparison its own edge.
    let edges = edge_coefficients();
    let pairs = dot_products(&mut rng, threshold_coefficient(DEFAULT_THRESHOLD), 1_000);
    let a: Vec<u32> = (0..pairs.len()).map(|e| edges[e % edges.len()]).collect();
    let (cd_shares, md_shares) = additive_pairs(&mut rng, &pairs);
    let out = run_three(31, |s| {
        let i = s.party().index();
        compare_each(s, &cd_shares[i], &md_shares[i], &a).expect("compare")
    });
    let opened = open_bits([&out[0].0.matches, &out[1].0.matches, &out[2].0.matches]);
    for (e, b) in plane_to_bits(&opened, pairs.len()).into_iter().enumerate() {
        assert_eq!(b, pairs[e].matches(a[e]), "{:?} at A = {}", pairs[e], a[e]);
    }
}

#[test]
fn compare_each_with_one_coefficient_is_compare() {
    let mut rng = ChaCha20Rng::seed_from_u64(32);
    let a = threshold_coefficient(DEFAULT_THRESHOLD);
    let pairs = dot_products(&mut rng, a, 300);
    let (cd_shares, md_shares) = additive_pairs(&mut rng, &pairs);
    let each = vec![a; pairs.len()];
    let runs = [false, true].map(|per_element| {
        run_three(33, |s| {
            let i = s.party().index();
            let c = if per_element {
                compare_each(s, &cd_shares[i], &md_shares[i], &each)
            } else {
                compare(s, &cd_shares[i], &md_shares[i], a)
            };
            c.expect("compare").matches
        })
    });
    for (party, (one, each)) in runs[0].iter().zip(&runs[1]).enumerate() {
        assert_eq!(one.0, each.0, "party {party}'s bits");
        assert_eq!(one.2, each.2, "party {party}'s view");
    }
}

#[test]
fn match_bits_at_each_coefficient_equal_the_plaintext_rule_and_share_the_split() {
    let mut rng = ChaCha20Rng::seed_from_u64(34);
    let a = edge_coefficients();
    let n = 64 * 10;
    let pairs = dot_products(&mut rng, threshold_coefficient(DEFAULT_THRESHOLD), n);
    let (cd_shares, md_shares) = additive_pairs(&mut rng, &pairs);
    let out = run_three(35, |s| {
        let i = s.party().index();
        match_bits_at_each(s, &cd_shares[i], &md_shares[i], &a).expect("compare")
    });
    let bits = plane_to_bits(&open_bits([&out[0].0, &out[1].0, &out[2].0]), n * a.len());
    for (j, &aj) in a.iter().enumerate() {
        for (e, p) in pairs.iter().enumerate() {
            assert_eq!(bits[j * n + e], p.matches(aj), "{p:?} at A = {aj}");
        }
    }
    // Once per (cd, md): the split (parties 0 and 2, 4 bytes), the cross term (parties 0 and
    // 1, 2 bytes), forwarding q (party 2, 2 bytes). Per comparison: party 1's binary input (4
    // bytes) and the adder's 62 gates.
    let m = (n * a.len()) as u64;
    let n = n as u64;
    let gates = 62 * m / 8;
    let sent: Vec<u64> = out.iter().map(|p| p.1.bytes_sent).collect();
    assert_eq!(sent, [6 * n + gates, 2 * n + 4 * m + gates, 6 * n + gates]);
    assert_eq!(out[0].1.rounds, 10);
}

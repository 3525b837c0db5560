//! `shamir`: degree-1 sharing over GR(2^16, 4) for given randomness, and from a seeded RNG.

use serde::{Deserialize, Serialize};

use sdk_orb::ring::GaloisRingElement as El;
use sdk_orb::shamir::{
    code_coefs, hazmat_share_with_randomness, mask_coefs, reconstruct, share_element, share_eye,
    EyeShares,
};
use sdk_orb::{PartyId, CODE_COEFS, MASK_COEFS, PARTIES};

use crate::common::{
    element, hex_element, random_template, ring_elements, rng, seed, PackedTemplate,
};
use crate::format::{expect_eq, Digest16, Flag, Hex, HexU16, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// A sharing vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// One element: plain values `a` (basis A), randomness `r`; party `i` gets
    /// `S a + r alpha_i`.
    Element {
        /// Four plain values.
        plain: HexU16,
        /// The random element.
        randomness: HexU16,
        /// Shares of parties 0, 1, 2.
        shares: Vec<HexU16>,
    },
    /// Both halves of one eye shared with the randomness stream of `rng_seed`: first one
    /// element (8 bytes) per code element, then one per trimmed-mask element.
    Eye {
        /// The template.
        template: PackedTemplate,
        /// ChaCha20 seed of the randomness.
        rng_seed: Hex,
        /// Plain code coefficients (masked values in the share layout, 12,800).
        plain_code: Digest16,
        /// Plain trimmed mask coefficients (6,400).
        plain_mask: Digest16,
        /// Code shares of parties 0, 1, 2.
        code_shares: Vec<Digest16>,
        /// Trimmed mask shares of parties 0, 1, 2.
        mask_shares: Vec<Digest16>,
    },
}

/// Plain code and trimmed-mask coefficients, and the three parties' shares.
pub type PlainAndShares = (Vec<u16>, Vec<u16>, [EyeShares; PARTIES]);

/// Shares of one eye from `seed` two ways: `share_eye` with the seeded RNG, and
/// `hazmat_share_with_randomness` with elements read from the same stream. They must agree,
/// and any two parties must reconstruct the plain coefficients.
///
/// # Errors
/// A disagreement.
pub fn eye_shares(
    template: &PackedTemplate,
    rng_seed: &[u8; 32],
) -> Result<PlainAndShares, String> {
    let t = template.template()?;
    let mut out = [EyeShares::zero(), EyeShares::zero(), EyeShares::zero()];
    for o in out.iter_mut() {
        o.code.0.fill(0xA5A5);
        o.mask.0.fill(0xA5A5);
    }
    share_eye(&mut rng(rng_seed), &t, &mut out);
    let mut plain_code = vec![0u16; CODE_COEFS];
    let mut plain_mask = vec![0u16; MASK_COEFS];
    let mut c = [0u16; CODE_COEFS];
    let mut m = [0u16; MASK_COEFS];
    code_coefs(&t, &mut c);
    mask_coefs(&t, &mut m);
    plain_code.copy_from_slice(&c);
    plain_mask.copy_from_slice(&m);

    let hs = shares_from_stream(&t, &mut rng(rng_seed))?;
    for p in 0..PARTIES {
        if out[p] != hs[p] {
            return Err(format!(
                "party {p}: share_eye differs from sharing with the stream's randomness"
            ));
        }
    }
    for (p, q) in [(0, 1), (0, 2), (1, 2)] {
        let mut back_c = vec![0u16; CODE_COEFS];
        let mut back_m = vec![0u16; MASK_COEFS];
        let (pp, pq) = (PartyId::ALL[p], PartyId::ALL[q]);
        reconstruct((pp, &out[p].code.0), (pq, &out[q].code.0), &mut back_c);
        reconstruct((pp, &out[p].mask.0), (pq, &out[q].mask.0), &mut back_m);
        if back_c != plain_code || back_m != plain_mask {
            return Err(format!(
                "parties {p} and {q} do not reconstruct the plain values"
            ));
        }
    }
    Ok((plain_code, plain_mask, out))
}

/// One eye's shares with randomness read from `stream` through
/// `hazmat_share_with_randomness`: 3,200 code elements, then 1,600 trimmed-mask elements,
/// 8 bytes each. Written into garbage-filled buffers first.
///
/// # Errors
/// Never for a valid template; kept fallible for the party split.
pub fn shares_from_stream(
    t: &sdk_orb::template::IrisTemplate,
    stream: &mut rand_chacha::ChaCha20Rng,
) -> Result<[EyeShares; PARTIES], String> {
    let mut c = [0u16; CODE_COEFS];
    let mut m = [0u16; MASK_COEFS];
    code_coefs(t, &mut c);
    mask_coefs(t, &mut m);
    let code_r = ring_elements(stream, CODE_COEFS / 4);
    let mask_r = ring_elements(stream, MASK_COEFS / 4);
    let mut out = [EyeShares::zero(), EyeShares::zero(), EyeShares::zero()];
    for o in out.iter_mut() {
        o.code.0.fill(0xA5A5);
        o.mask.0.fill(0xA5A5);
    }
    let [a, b, d] = &mut out;
    hazmat_share_with_randomness(&c, &code_r, [&mut a.code.0, &mut b.code.0, &mut d.code.0]);
    hazmat_share_with_randomness(&m, &mask_r, [&mut a.mask.0, &mut b.mask.0, &mut d.mask.0]);
    Ok(out)
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::Shamir;
    const DESCRIPTION: &'static str = "Degree-1 Shamir sharing: f(X) = S a + r X, party i \
        holds f(alpha_i) with alpha = (1, x, 1 + x). Per element for given randomness, and \
        for whole eyes with randomness read from a ChaCha20 stream (8 bytes, four \
        little-endian u16, per element; code elements first, then trimmed mask elements). \
        Any two parties reconstruct the plain values.";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let mut out: Vec<(String, Vec<Flag>, Case)> = Vec::new();
        let mut stream = rng(&seed("shamir/elements"));
        let random = ring_elements(&mut stream, 4);
        let element_cases: [(&str, [u16; 4], El, Vec<Flag>); 4] = [
            (
                "zero randomness: every party holds S a",
                [1, 0xFFFF, 0, 1],
                El::ZERO,
                vec![Flag::EdgeCase, Flag::ZeroRandomness],
            ),
            (
                "masked values of one element",
                [1, 0xFFFF, 0, 1],
                random[0],
                vec![Flag::Synthetic],
            ),
            (
                "mask values of one element",
                [1, 1, 0, 1],
                random[1],
                vec![Flag::Synthetic],
            ),
            (
                "arbitrary values",
                random[2].0,
                random[3],
                vec![Flag::Synthetic],
            ),
        ];
        for (comment, plain, r, flags) in element_cases {
            out.push((
                comment.to_string(),
                flags,
                Case::Element {
                    plain: HexU16(plain.to_vec()),
                    randomness: hex_element(r),
                    shares: share_element(&plain, r)
                        .iter()
                        .map(|&e| hex_element(e))
                        .collect(),
                },
            ));
        }
        for (label, fraction) in [("shamir/eye1", 0.2), ("shamir/eye2", 0.0)] {
            let template = PackedTemplate::of(&random_template(label, fraction));
            let s = seed(&format!("{label}/randomness"));
            let (pc, pm, shares) = eye_shares(&template, &s)?;
            out.push((
                format!("a random eye, {}% of pairs masked", fraction * 100.0),
                vec![Flag::Synthetic],
                Case::Eye {
                    template,
                    rng_seed: Hex(s.to_vec()),
                    plain_code: Digest16::of(&pc),
                    plain_mask: Digest16::of(&pm),
                    code_shares: shares.iter().map(|e| Digest16::of(&e.code.0)).collect(),
                    mask_shares: shares.iter().map(|e| Digest16::of(&e.mask.0)).collect(),
                },
            ));
        }
        Ok(Vector::numbered(out))
    }

    fn verify(vector: &Vector<Case>, _all: &[Vector<Case>]) -> Result<(), String> {
        match &vector.case {
            Case::Element {
                plain,
                randomness,
                shares,
            } => {
                let plain = plain.array::<4>("plain")?;
                let r = element(randomness, "randomness")?;
                let got: Vec<HexU16> = share_element(&plain, r)
                    .iter()
                    .map(|&e| hex_element(e))
                    .collect();
                expect_eq("shares", &got, shares)?;
                // The same through the array entry point, into garbage-filled buffers.
                let mut o = [[0xA5A5u16; 4]; PARTIES];
                let [a, b, c] = &mut o;
                hazmat_share_with_randomness(&plain, &[r], [a, b, c]);
                let arr: Vec<HexU16> = o.iter().map(|s| HexU16(s.to_vec())).collect();
                expect_eq("shares (hazmat_share_with_randomness)", &arr, shares)?;
                if vector.flags.contains(&Flag::ZeroRandomness) {
                    expect_eq("zero randomness", &r, &El::ZERO)?;
                }
                Ok(())
            }
            Case::Eye {
                template,
                rng_seed,
                plain_code,
                plain_mask,
                code_shares,
                mask_shares,
            } => {
                let (pc, pm, shares) = eye_shares(template, &rng_seed.array::<32>("rng_seed")?)?;
                plain_code.check(&pc, "plain_code")?;
                plain_mask.check(&pm, "plain_mask")?;
                expect_eq("code_shares", &code_shares.len(), &PARTIES)?;
                expect_eq("mask_shares", &mask_shares.len(), &PARTIES)?;
                for (p, s) in shares.iter().enumerate() {
                    code_shares[p].check(&s.code.0, &format!("party {p} code share"))?;
                    mask_shares[p].check(&s.mask.0, &format!("party {p} mask share"))?;
                }
                Ok(())
            }
        }
    }
}

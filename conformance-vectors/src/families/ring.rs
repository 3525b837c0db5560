//! `ring`: GR(2^16, 4) constants, arithmetic, inverses and basis conversions.

use rand_core::RngCore;
use serde::{Deserialize, Serialize};

use sdk_orb::preprocess::LAGRANGE_AT_ZERO;
use sdk_orb::ring::{GaloisRingElement as El, Matrix4, M, S, S_INV};
use sdk_orb::shamir::EVALUATION_POINTS;

use crate::common::{element, hex_element, rng, seed};
use crate::format::{expect_eq, Flag, HexU16, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// A ring vector. Elements are four monomial coefficients `c0 + c1 x + c2 x^2 + c3 x^3`;
/// matrices are four rows of four values, row-major.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// The constants of the encoding, compared with the implementation's.
    Constants {
        /// Basis A to monomial: `element = S a`.
        s: Vec<HexU16>,
        /// Its inverse.
        s_inv: Vec<HexU16>,
        /// Monomial to basis B.
        m: Vec<HexU16>,
        /// Shamir evaluation points of parties 0, 1, 2.
        evaluation_points: Vec<HexU16>,
        /// Degree-2 Lagrange coefficients at zero of parties 0, 1, 2.
        lagrange_at_zero: Vec<HexU16>,
    },
    /// `a + b`.
    Add {
        /// Left.
        a: HexU16,
        /// Right.
        b: HexU16,
        /// Sum.
        expected: HexU16,
    },
    /// `a - b`.
    Sub {
        /// Left.
        a: HexU16,
        /// Right.
        b: HexU16,
        /// Difference.
        expected: HexU16,
    },
    /// `a * b` mod `x^4 - x - 1`.
    Mul {
        /// Left.
        a: HexU16,
        /// Right.
        b: HexU16,
        /// Product.
        expected: HexU16,
    },
    /// `a * x`.
    MulX {
        /// Input.
        a: HexU16,
        /// Product.
        expected: HexU16,
    },
    /// `a^-1`, null for a non-unit.
    Inverse {
        /// Input.
        a: HexU16,
        /// Inverse.
        expected: Option<HexU16>,
    },
    /// `S a`: four plain values to an element.
    FromBasisA {
        /// Plain values.
        a: HexU16,
        /// Monomial coefficients.
        expected: HexU16,
    },
    /// `S^-1 c`: an element to its four plain values.
    ToBasisA {
        /// Monomial coefficients.
        a: HexU16,
        /// Plain values.
        expected: HexU16,
    },
    /// `M c`: monomial coefficients to basis B.
    ToBasisB {
        /// Monomial coefficients.
        a: HexU16,
        /// Basis-B coefficients.
        expected: HexU16,
    },
}

fn rows(m: &Matrix4) -> Vec<HexU16> {
    m.iter().map(|r| HexU16(r.to_vec())).collect()
}

fn elements(e: &[El]) -> Vec<HexU16> {
    e.iter().map(|&e| hex_element(e)).collect()
}

fn check_rows(what: &str, got: &[HexU16], expected: &[HexU16]) -> Result<(), String> {
    expect_eq(&format!("{what} rows"), &got.len(), &expected.len())?;
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        expect_eq(&format!("{what} row {i}"), g, e)?;
    }
    Ok(())
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::Ring;
    const DESCRIPTION: &'static str = "GR(2^16, 4) = Z_{2^16}[x] / (x^4 - x - 1): the \
        matrices S, S^-1 and M, the evaluation points and Lagrange coefficients, addition, \
        subtraction, multiplication, multiplication by x, inverses, and the conversions to \
        and from basis A and to basis B. Elements and matrix rows are the hex of four \
        little-endian u16.";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let mut r = rng(&seed("ring"));
        let mut random = || {
            let v = r.next_u64();
            El([
                v as u16,
                (v >> 16) as u16,
                (v >> 32) as u16,
                (v >> 48) as u16,
            ])
        };
        let h = hex_element;
        let mut out: Vec<(String, Vec<Flag>, Case)> = vec![(
            "the constants".to_string(),
            vec![],
            Case::Constants {
                s: rows(&S),
                s_inv: rows(&S_INV),
                m: rows(&M),
                evaluation_points: elements(&EVALUATION_POINTS),
                lagrange_at_zero: elements(&LAGRANGE_AT_ZERO),
            },
        )];
        let x3 = El([0, 0, 0, 1]);
        out.push((
            "x^3 * x = x + 1".to_string(),
            vec![Flag::EdgeCase],
            Case::Mul {
                a: h(x3),
                b: h(El::X),
                expected: h(x3 * El::X),
            },
        ));
        let max = El([0xFFFF; 4]);
        out.push((
            "all coefficients -1 squared (wrap-around)".to_string(),
            vec![Flag::EdgeCase],
            Case::Mul {
                a: h(max),
                b: h(max),
                expected: h(max * max),
            },
        ));
        for _ in 0..4 {
            let (a, b) = (random(), random());
            out.push((
                "random product".to_string(),
                vec![Flag::Synthetic],
                Case::Mul {
                    a: h(a),
                    b: h(b),
                    expected: h(a * b),
                },
            ));
        }
        for _ in 0..2 {
            let (a, b) = (random(), random());
            out.push((
                "random sum".to_string(),
                vec![Flag::Synthetic],
                Case::Add {
                    a: h(a),
                    b: h(b),
                    expected: h(a + b),
                },
            ));
            out.push((
                "random difference".to_string(),
                vec![Flag::Synthetic],
                Case::Sub {
                    a: h(a),
                    b: h(b),
                    expected: h(a - b),
                },
            ));
        }
        for a in [random(), max] {
            out.push((
                "multiplication by x".to_string(),
                vec![Flag::Synthetic],
                Case::MulX {
                    a: h(a),
                    expected: h(a.mul_x()),
                },
            ));
        }
        let alpha = EVALUATION_POINTS;
        for (comment, a) in [
            ("inverse of x (evaluation point of party 1)", alpha[1]),
            ("inverse of 1 + x (evaluation point of party 2)", alpha[2]),
            ("inverse of x - (1 + x) = -1", alpha[1] - alpha[2]),
            ("inverse of lambda_1", LAGRANGE_AT_ZERO[0]),
        ] {
            out.push((
                comment.to_string(),
                vec![Flag::EdgeCase],
                Case::Inverse {
                    a: h(a),
                    expected: a.inverse_vartime().map(h),
                },
            ));
        }
        let mut units = 0;
        while units < 2 {
            let a = random();
            if let Some(inv) = a.inverse_vartime() {
                units += 1;
                out.push((
                    "inverse of a random unit".to_string(),
                    vec![Flag::Synthetic],
                    Case::Inverse {
                        a: h(a),
                        expected: Some(h(inv)),
                    },
                ));
            }
        }
        for a in [El([2, 4, 0, 6]), El::ZERO] {
            out.push((
                "a non-unit (every coefficient even) has no inverse".to_string(),
                vec![Flag::EdgeCase, Flag::NonUnit],
                Case::Inverse {
                    a: h(a),
                    expected: a.inverse_vartime().map(h),
                },
            ));
        }
        for a in [
            [1, 0, 0, 0],
            [0, 1, 0, 0],
            [0, 0, 1, 0],
            [0, 0, 0, 1],
            [1, 0xFFFF, 0, 1],
        ] {
            out.push((
                format!("S {a:?}"),
                vec![Flag::EdgeCase],
                Case::FromBasisA {
                    a: HexU16(a.to_vec()),
                    expected: h(El::from_basis_a(&a)),
                },
            ));
        }
        for _ in 0..2 {
            let a = random();
            out.push((
                "S^-1 of a random element".to_string(),
                vec![Flag::Synthetic],
                Case::ToBasisA {
                    a: h(a),
                    expected: HexU16(a.to_basis_a().to_vec()),
                },
            ));
            out.push((
                "M of a random element".to_string(),
                vec![Flag::Synthetic],
                Case::ToBasisB {
                    a: h(a),
                    expected: HexU16(a.to_basis_b().to_vec()),
                },
            ));
        }
        Ok(Vector::numbered(out))
    }

    fn verify(vector: &Vector<Case>, _all: &[Vector<Case>]) -> Result<(), String> {
        let el = |h: &HexU16| element(h, "element");
        let got = match &vector.case {
            Case::Constants {
                s,
                s_inv,
                m,
                evaluation_points,
                lagrange_at_zero,
            } => {
                check_rows("S", &rows(&S), s)?;
                check_rows("S^-1", &rows(&S_INV), s_inv)?;
                check_rows("M", &rows(&M), m)?;
                check_rows(
                    "evaluation points",
                    &elements(&EVALUATION_POINTS),
                    evaluation_points,
                )?;
                return check_rows(
                    "Lagrange coefficients",
                    &elements(&LAGRANGE_AT_ZERO),
                    lagrange_at_zero,
                );
            }
            Case::Inverse { a, expected } => {
                let inv = el(a)?.inverse_vartime();
                expect_eq(
                    "non_unit flag",
                    &vector.flags.contains(&Flag::NonUnit),
                    &inv.is_none(),
                )?;
                return expect_eq("inverse", &inv.map(hex_element), expected);
            }
            Case::Add { a, b, expected } => (el(a)? + el(b)?, expected),
            Case::Sub { a, b, expected } => (el(a)? - el(b)?, expected),
            Case::Mul { a, b, expected } => (el(a)? * el(b)?, expected),
            Case::MulX { a, expected } => (el(a)?.mul_x(), expected),
            Case::FromBasisA { a, expected } => {
                (El::from_basis_a(&a.array::<4>("plain values")?), expected)
            }
            Case::ToBasisA { a, expected } => (El(el(a)?.to_basis_a()), expected),
            Case::ToBasisB { a, expected } => (El(el(a)?.to_basis_b()), expected),
        };
        expect_eq("result", &hex_element(got.0), got.1)
    }
}

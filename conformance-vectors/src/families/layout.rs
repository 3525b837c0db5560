//! `layout`: which plain bit each share coefficient holds.

use serde::{Deserialize, Serialize};

use sdk_orb::layout::{plain_bit_index, PLAIN_BIT_INDEX};
use sdk_orb::CODE_COEFS;

use crate::format::{expect_eq, Flag, HexU16, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// A layout vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// The whole permutation: entry `i` is the plain bit index of coefficient `i`.
    Table {
        /// 12,800 indices.
        plain_bit_index: HexU16,
    },
    /// One entry, for reading.
    Entry {
        /// Coefficient index.
        coef: usize,
        /// Plain bit index `800 row + 4 col + 2 wavelet + part`.
        plain_bit: usize,
    },
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::Layout;
    const DESCRIPTION: &'static str = "The share layout: coefficient i holds plain bit \
        800 r + 4 c + 2 w + b with b = i / 6400, w = (i % 6400) / 3200, r1 = (i % 3200) / 800, \
        c = (i % 800) / 4, r2 = i % 4, r = 4 r2 + r1.";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let mut out = vec![Vector {
            id: 1,
            comment: "the full table".to_string(),
            flags: vec![],
            case: Case::Table {
                plain_bit_index: HexU16(PLAIN_BIT_INDEX.to_vec()),
            },
        }];
        for coef in [0, 1, 3, 4, 799, 800, 3199, 3200, 6399, 6400, CODE_COEFS - 1] {
            out.push(Vector {
                id: out.len() as u32 + 1,
                comment: format!("coefficient {coef}"),
                flags: vec![Flag::EdgeCase],
                case: Case::Entry {
                    coef,
                    plain_bit: plain_bit_index(coef),
                },
            });
        }
        Ok(out)
    }

    fn verify(vector: &Vector<Case>, _all: &[Vector<Case>]) -> Result<(), String> {
        match &vector.case {
            Case::Table { plain_bit_index } => {
                expect_eq("length", &plain_bit_index.0.len(), &CODE_COEFS)?;
                match PLAIN_BIT_INDEX
                    .iter()
                    .zip(&plain_bit_index.0)
                    .position(|(a, b)| a != b)
                {
                    None => Ok(()),
                    Some(i) => Err(format!(
                        "coefficient {i}: plain bit {}, expected {}",
                        PLAIN_BIT_INDEX[i], plain_bit_index.0[i]
                    )),
                }
            }
            Case::Entry { coef, plain_bit } => {
                if *coef >= CODE_COEFS {
                    return Err(format!("coefficient {coef} out of range"));
                }
                expect_eq("plain bit", &plain_bit_index(*coef), plain_bit)
            }
        }
    }
}

//! The Galois ring GR(2^16, 4) = `Z_{2^16}[x] / (x^4 - x - 1)` and its basis conversions.
//!
//! Elements are four monomial coefficients `[c0, c1, c2, c3]` meaning
//! `c0 + c1 x + c2 x^2 + c3 x^3`. All arithmetic wraps mod 2^16.

use core::ops::{Add, AddAssign, Mul, Neg, Sub, SubAssign};
use zeroize::Zeroize;

/// One element of GR(2^16, 4), monomial coefficients.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Zeroize)]
pub struct GaloisRingElement(pub [u16; 4]);

impl core::fmt::Debug for GaloisRingElement {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "GR{:?}", self.0)
    }
}

/// A 4x4 matrix over Z_{2^16}, row-major.
pub type Matrix4 = [[u16; 4]; 4];

/// Plain values (basis "A") to monomial coefficients: `element = S * a`.
pub const S: Matrix4 = [
    [1, 0, 0, 0],
    [58082, 1, 0, 0],
    [60579, 25194, 1, 0],
    [17325, 51956, 57011, 1],
];

/// The inverse of [`S`]: monomial coefficients back to plain values.
pub const S_INV: Matrix4 = [
    [1, 0, 0, 0],
    [7454, 1, 0, 0],
    [35057, 40342, 1, 0],
    [37176, 61738, 8525, 1],
];

/// Monomial coefficients to basis "B". `M` is the Hankel matrix of a linear functional `T`
/// (`M[i][j] = T(x^(i+j))`), so `coefs(y)^T M coefs(d) = T(y * d)` for ring elements `y`, `d`,
/// and `S^T M S = I`, so `T(S a * S b) = <a, b>`: the plain inner product of the basis-A values.
/// Because `T` is linear, it can be applied share by share to a degree-2 Shamir product.
pub const M: Matrix4 = [
    [16038, 45700, 28361, 37176],
    [45700, 28361, 37176, 61738],
    [28361, 37176, 61738, 8525],
    [37176, 61738, 8525, 1],
];

/// `m * v` mod 2^16.
pub fn mat_vec(m: &Matrix4, v: &[u16; 4]) -> [u16; 4] {
    let mut out = [0u16; 4];
    for (o, row) in out.iter_mut().zip(m) {
        *o = row
            .iter()
            .zip(v)
            .fold(0u16, |acc, (&a, &b)| acc.wrapping_add(a.wrapping_mul(b)));
    }
    out
}

impl GaloisRingElement {
    /// The additive identity.
    pub const ZERO: GaloisRingElement = GaloisRingElement([0; 4]);
    /// The multiplicative identity.
    pub const ONE: GaloisRingElement = GaloisRingElement([1, 0, 0, 0]);
    /// The generator `x`.
    pub const X: GaloisRingElement = GaloisRingElement([0, 1, 0, 0]);

    /// Encodes four plain values (basis A) as a ring element: `S * a`.
    pub fn from_basis_a(a: &[u16; 4]) -> GaloisRingElement {
        GaloisRingElement(mat_vec(&S, a))
    }

    /// Decodes a ring element to its four plain values (basis A): `S^-1 * coefs`.
    pub fn to_basis_a(self) -> [u16; 4] {
        mat_vec(&S_INV, &self.0)
    }

    /// The coefficients in basis B: `M * coefs`.
    pub fn to_basis_b(self) -> [u16; 4] {
        mat_vec(&M, &self.0)
    }

    /// The element whose coefficients are the four little-endian u16 in `bytes` (how sampled
    /// randomness becomes ring elements).
    pub fn from_le_bytes(bytes: &[u8; 8]) -> GaloisRingElement {
        GaloisRingElement(core::array::from_fn(|i| {
            u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])
        }))
    }

    /// Writes the four coefficients as little-endian u16 into `out` (8 bytes), the inverse of
    /// [`GaloisRingElement::from_le_bytes`]: how shares are serialised.
    ///
    /// # Panics
    /// If `out` is not 8 bytes long.
    pub fn write_le_bytes(self, out: &mut [u8]) {
        assert_eq!(out.len(), 8);
        for (o, c) in out.chunks_exact_mut(2).zip(self.0) {
            o.copy_from_slice(&c.to_le_bytes());
        }
    }

    /// Multiplication by `x`, cheaper than a general product: `x^4 = x + 1`.
    pub fn mul_x(self) -> GaloisRingElement {
        let [a0, a1, a2, a3] = self.0;
        GaloisRingElement([a3, a0.wrapping_add(a3), a1, a2])
    }

    /// Division by `x`, the inverse of [`GaloisRingElement::mul_x`].
    pub fn div_x(self) -> GaloisRingElement {
        let [c0, c1, c2, c3] = self.0;
        GaloisRingElement([c1.wrapping_sub(c0), c2, c3, c0])
    }

    /// Whether the element is a unit: its reduction mod 2 is non-zero in GF(16).
    pub fn is_unit(self) -> bool {
        self.0.iter().any(|c| c & 1 == 1)
    }

    /// The multiplicative inverse, or `None` for a non-unit. Variable time: for public
    /// constants (Lagrange coefficients, evaluation points), not for secrets.
    pub fn inverse_vartime(self) -> Option<GaloisRingElement> {
        if !self.is_unit() {
            return None;
        }
        // The unit group has order 15 * 2^60, so a^-1 = a^(15 * 2^60 - 1).
        let exponent: u64 = 15 * (1u64 << 60) - 1;
        let mut result = GaloisRingElement::ONE;
        let mut base = self;
        let mut e = exponent;
        while e > 0 {
            if e & 1 == 1 {
                result = result * base;
            }
            base = base * base;
            e >>= 1;
        }
        Some(result)
    }
}

impl Add for GaloisRingElement {
    type Output = GaloisRingElement;
    fn add(self, rhs: GaloisRingElement) -> GaloisRingElement {
        let mut out = self;
        out += rhs;
        out
    }
}

impl AddAssign for GaloisRingElement {
    fn add_assign(&mut self, rhs: GaloisRingElement) {
        for (a, b) in self.0.iter_mut().zip(rhs.0) {
            *a = a.wrapping_add(b);
        }
    }
}

impl Sub for GaloisRingElement {
    type Output = GaloisRingElement;
    fn sub(self, rhs: GaloisRingElement) -> GaloisRingElement {
        let mut out = self;
        out -= rhs;
        out
    }
}

impl SubAssign for GaloisRingElement {
    fn sub_assign(&mut self, rhs: GaloisRingElement) {
        for (a, b) in self.0.iter_mut().zip(rhs.0) {
            *a = a.wrapping_sub(b);
        }
    }
}

impl Neg for GaloisRingElement {
    type Output = GaloisRingElement;
    fn neg(self) -> GaloisRingElement {
        GaloisRingElement::ZERO - self
    }
}

impl Mul for GaloisRingElement {
    type Output = GaloisRingElement;
    fn mul(self, rhs: GaloisRingElement) -> GaloisRingElement {
        let a = self.0;
        let b = rhs.0;
        let mut c = [0u16; 7];
        for i in 0..4 {
            for j in 0..4 {
                c[i + j] = c[i + j].wrapping_add(a[i].wrapping_mul(b[j]));
            }
        }
        // Reduce with x^4 = x + 1, highest degree first.
        for k in (4..7).rev() {
            c[k - 4] = c[k - 4].wrapping_add(c[k]);
            c[k - 3] = c[k - 3].wrapping_add(c[k]);
        }
        GaloisRingElement([c[0], c[1], c[2], c[3]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{RngCore, SeedableRng};

    fn random(rng: &mut ChaCha20Rng) -> GaloisRingElement {
        GaloisRingElement::from_le_bytes(&rng.next_u64().to_le_bytes())
    }

    fn mat_mul(a: &Matrix4, b: &Matrix4) -> Matrix4 {
        let mut out = [[0u16; 4]; 4];
        for i in 0..4 {
            for j in 0..4 {
                for k in 0..4 {
                    out[i][j] = out[i][j].wrapping_add(a[i][k].wrapping_mul(b[k][j]));
                }
            }
        }
        out
    }

    #[test]
    fn s_inverse_is_the_inverse_of_s() {
        let identity = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]];
        assert_eq!(mat_mul(&S, &S_INV), identity);
        assert_eq!(mat_mul(&S_INV, &S), identity);
    }

    #[test]
    fn m_is_the_matrix_of_a_linear_functional() {
        // Hankel: M[i][j] depends on i + j only, so coefs(y)^T M coefs(d) = T(y * d).
        for i in 1..4 {
            for j in 0..3 {
                assert_eq!(M[i][j], M[i - 1][j + 1]);
            }
        }
        let mut rng = ChaCha20Rng::seed_from_u64(6);
        let bilinear = |y: GaloisRingElement, d: GaloisRingElement| {
            y.to_basis_b()
                .iter()
                .zip(d.0)
                .fold(0u16, |acc, (&a, b)| acc.wrapping_add(a.wrapping_mul(b)))
        };
        for _ in 0..100 {
            let (a, b, c) = (random(&mut rng), random(&mut rng), random(&mut rng));
            assert_eq!(bilinear(a * b, c), bilinear(a, b * c));
        }
    }

    #[test]
    fn x_to_the_fourth_is_x_plus_one() {
        let x = GaloisRingElement::X;
        assert_eq!(x * x * x * x, GaloisRingElement([1, 1, 0, 0]));
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        for _ in 0..100 {
            let a = random(&mut rng);
            assert_eq!(a.mul_x(), a * x);
            assert_eq!(a.div_x().mul_x(), a);
            let mut b = [0u8; 8];
            a.write_le_bytes(&mut b);
            assert_eq!(GaloisRingElement::from_le_bytes(&b), a);
            assert_eq!(a.div_x(), a * x.inverse_vartime().expect("x is a unit"));
        }
    }

    #[test]
    fn ring_axioms_hold() {
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        for _ in 0..200 {
            let (a, b, c) = (random(&mut rng), random(&mut rng), random(&mut rng));
            assert_eq!(a * b, b * a);
            assert_eq!((a * b) * c, a * (b * c));
            assert_eq!(a * (b + c), a * b + a * c);
            assert_eq!(a - a, GaloisRingElement::ZERO);
            assert_eq!(a + (-a), GaloisRingElement::ZERO);
            assert_eq!(a * GaloisRingElement::ONE, a);
        }
    }

    #[test]
    fn units_have_inverses_and_non_units_do_not() {
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let mut units = 0;
        for _ in 0..200 {
            let a = random(&mut rng);
            match a.inverse_vartime() {
                Some(inv) => {
                    units += 1;
                    assert_eq!(a * inv, GaloisRingElement::ONE);
                }
                None => assert!(!a.is_unit()),
            }
        }
        assert!(units > 150);
        assert_eq!(GaloisRingElement([2, 4, 0, 6]).inverse_vartime(), None);
    }

    #[test]
    fn basis_a_round_trips() {
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        for _ in 0..100 {
            let e = random(&mut rng);
            assert_eq!(GaloisRingElement::from_basis_a(&e.to_basis_a()), e);
        }
    }

    #[test]
    fn basis_b_of_a_product_gives_the_plain_inner_product() {
        // S^T M S = I: the basis-B coefficients of one encoded element dotted with the
        // monomial coefficients of another give the plain inner product.
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        for _ in 0..200 {
            let a = random(&mut rng).0;
            let b = random(&mut rng).0;
            let q = GaloisRingElement::from_basis_a(&a);
            let d = GaloisRingElement::from_basis_a(&b);
            let lhs = q
                .to_basis_b()
                .iter()
                .zip(d.0)
                .fold(0u16, |acc, (&x, y)| acc.wrapping_add(x.wrapping_mul(y)));
            let rhs = a
                .iter()
                .zip(b)
                .fold(0u16, |acc, (&x, y)| acc.wrapping_add(x.wrapping_mul(y)));
            assert_eq!(lhs, rhs);
        }
    }
}

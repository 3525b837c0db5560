//! Plaintext reference: masked bitvectors, their dot products and the fractional Hamming
//! distance. For tests, tools and the reference matcher; nodes never see plaintext.

use crate::rotation::rotations;
use crate::template::IrisTemplate;
use crate::CODE_BITS;

/// Default match threshold on the fractional Hamming distance.
pub const DEFAULT_THRESHOLD: f64 = 0.345;
/// The scale B applied to `cd` when comparing: `B * cd > A * md`.
pub const COMPARE_SCALE_B: u32 = 1 << 16;

/// A masked bit: `m - 2 (c AND m)` in Z_{2^16}: `1` usable and 0, `0xFFFF` (-1) usable and 1,
/// `0` masked.
pub const fn masked_value(code: bool, mask: bool) -> u16 {
    let c = code as u16;
    let m = mask as u16;
    m.wrapping_sub(2 * (c & m))
}

/// The code and mask dot products of two masked bitvectors over Z (not reduced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DotProducts {
    /// `#equal - #differing` over the bits usable in both.
    pub cd: i32,
    /// `#common`: bits usable in both.
    pub md: u32,
}

impl DotProducts {
    /// The fractional Hamming distance, or `None` without common bits.
    pub fn distance(self) -> Option<f64> {
        if self.md == 0 {
            return None;
        }
        let differing = (self.md as i64 - self.cd as i64) / 2;
        Some(differing as f64 / self.md as f64)
    }

    /// The exact integer decision the MPC pipeline computes: `B * cd > A * md` with
    /// `B = 2^16` and `A` from [`threshold_coefficient`]. Strict, so `md = 0` never matches.
    pub fn matches(self, a: u32) -> bool {
        (COMPARE_SCALE_B as i64) * (self.cd as i64) > (a as i64) * (self.md as i64)
    }
}

/// `A = floor((1 - 2t) * 2^16)` for threshold `t` (20316 for 0.345).
///
/// # Panics
/// If `t` is not in `0.0..=0.5`.
pub fn threshold_coefficient(t: f64) -> u32 {
    assert!((0.0..=0.5).contains(&t), "threshold must lie in 0..=0.5");
    let a = (1.0 - 2.0 * t) * COMPARE_SCALE_B as f64;
    // Truncation is floor for the non-negative values allowed here.
    a as u32
}

/// The code and mask dot products of `probe` against `gallery` (no rotation).
pub fn dot_products(probe: &IrisTemplate, gallery: &IrisTemplate) -> DotProducts {
    let mut differing = 0u32;
    let mut common = 0u32;
    for (((&cp, &mp), &cg), &mg) in probe
        .code()
        .words()
        .iter()
        .zip(probe.mask().words())
        .zip(gallery.code().words())
        .zip(gallery.mask().words())
    {
        let both = mp & mg;
        common += both.count_ones();
        differing += ((cp ^ cg) & both).count_ones();
    }
    DotProducts {
        cd: common as i32 - 2 * differing as i32,
        md: common,
    }
}

/// Fractional Hamming distance without rotation; `None` without common bits.
pub fn fractional_hamming_distance(probe: &IrisTemplate, gallery: &IrisTemplate) -> Option<f64> {
    dot_products(probe, gallery).distance()
}

/// The smallest fractional Hamming distance over the 31 rotations of `probe`, with the
/// rotation that reached it (the first one on ties); `None` if no rotation has common bits.
pub fn min_distance_over_rotations(
    probe: &IrisTemplate,
    gallery: &IrisTemplate,
) -> Option<(f64, i32)> {
    let mut best: Option<(f64, i32)> = None;
    for k in rotations() {
        if let Some(d) = fractional_hamming_distance(&probe.rotated(k), gallery) {
            if best.is_none_or(|(b, _)| d < b) {
                best = Some((d, k));
            }
        }
    }
    best
}

/// Masked bitvector values in plain bit order.
pub fn masked_bitvector(template: &IrisTemplate, out: &mut [u16; CODE_BITS]) {
    for (i, v) in out.iter_mut().enumerate() {
        *v = masked_value(template.code().get(i), template.mask().get(i));
    }
}

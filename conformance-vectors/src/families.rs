//! One module per family: its case type, its generator and its replay.

pub mod comparison;
pub mod dot_shares;
pub mod envelope_header;
pub mod envelope_rejections;
pub mod envelope_rejections_v2;
pub mod envelope_sealing;
pub mod envelope_sealing_v2;
pub mod layout;
pub mod masked_bitvectors;
pub mod payload_rejections;
pub mod payload_rejections_v2;
pub mod preprocess;
pub mod requests;
pub mod ring;
pub mod rotations;
pub mod shamir;
pub mod template_codec;
pub mod trimmed_masks;

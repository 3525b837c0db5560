//! Identifiers the node keys its state by, each defined once where the protocol defines it:
//! request ids and envelope digests by the SDK, serial ids by the protocol core.

pub use ocelli_mpc::requests::SerialId;
pub use sdk_orb::envelope::EnvelopeDigest;
pub use sdk_orb::RequestId;

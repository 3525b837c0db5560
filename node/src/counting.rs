//! Counting the distance statistics ([`crate::stats`]) in the batches: which pairs each
//! batch counts and when a period opens ([`period`]), and the count in a batch's MPC session
//! ([`batch`]).

pub mod batch;
pub mod period;

//! Identifiers the node keys its state by, each defined once where the protocol defines it:
//! request ids, envelope digests and party ids by the SDK, serial ids by the protocol core.

pub use ocelli_mpc::requests::SerialId;
pub use sdk_orb::envelope::EnvelopeDigest;
pub use sdk_orb::{PartyId, RequestId};

/// The two parties other than `me`, the lower id first.
pub fn others(me: PartyId) -> [PartyId; 2] {
    let (next, prev) = (me.next(), me.prev());
    if next < prev {
        [next, prev]
    } else {
        [prev, next]
    }
}

/// The peer of `me` that is not `peer`: with three parties, naming two names the third.
pub fn third(me: PartyId, peer: PartyId) -> PartyId {
    if peer == me.next() {
        me.prev()
    } else {
        me.next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_others_of_a_party_are_the_two_peers_in_order_and_each_names_the_third() {
        let [zero, one, two] = PartyId::ALL;
        assert_eq!(others(zero), [one, two]);
        assert_eq!(others(one), [zero, two]);
        assert_eq!(others(two), [zero, one]);
        for me in PartyId::ALL {
            let [a, b] = others(me);
            assert_eq!((third(me, a), third(me, b)), (b, a));
        }
    }
}

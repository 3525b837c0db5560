//! How many connections a port holds before they authenticate, and for how long.
//!
//! Every accepted connection takes a [`Slot`] and keeps it until its TLS handshake has verified
//! a configured client certificate, or until it closes. Slots are capped per port and per
//! source address. A new connection over a cap is always admitted: what makes room is the
//! oldest connection of its own address (over the per-address cap), or of the address holding
//! the most slots (over the port's cap). A stranger's idle connections thereby push out only
//! each other; they never keep a newcomer out, and they reach a client on another address only
//! once the stranger holds no more slots than that client does.
//!
//! A slot carries its connection's deadline ([`Closer`]): the unauthenticated time allowed from
//! the accept, brought forward to now by an eviction, or to shortly after a refused call. The
//! connection's socket ([`super::BufferedTcp`]) fails its reads and writes from then on.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;

use futures::task::AtomicWaker;
use prometheus::{IntCounter, IntGauge};
use tokio::time::Instant;

use crate::config::ConnectionsConfig;
use crate::metrics::Metrics;

/// The slots of one listening port.
#[derive(Debug)]
pub struct Admission {
    max: usize,
    max_per_address: usize,
    timeout: Duration,
    slots: Mutex<Slots>,
    held: IntGauge,
    evicted: IntCounter,
}

#[derive(Debug, Default)]
struct Slots {
    /// Oldest first, per source address; never an empty queue.
    by_address: HashMap<IpAddr, VecDeque<(u64, Closer)>>,
    total: usize,
    next_id: u64,
}

impl Admission {
    /// The slots of the port named `port` in the metrics (`orb`, `peer`), with the caps and the
    /// time allowed of `limits`.
    pub fn new(port: &str, limits: &ConnectionsConfig, metrics: &Metrics) -> Arc<Self> {
        Arc::new(Self {
            max: limits.max_unauthenticated.max(1),
            max_per_address: limits.max_unauthenticated_per_address.max(1),
            timeout: limits.unauthenticated_timeout(),
            slots: Mutex::new(Slots::default()),
            held: metrics.unauthenticated.with_label_values(&[port]),
            evicted: metrics.evicted.with_label_values(&[port]),
        })
    }

    fn slots(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a connection from `address` accepted now, closing another connection where
    /// a cap is reached.
    pub fn admit(self: &Arc<Self>, address: IpAddr) -> Slot {
        let closer = Closer::new(self.timeout);
        let mut slots = self.slots();
        let from_address = slots.by_address.get(&address).map_or(0, VecDeque::len);
        if from_address >= self.max_per_address {
            self.evict_oldest(&mut slots, address);
        }
        if slots.total >= self.max {
            let heaviest = slots
                .by_address
                .iter()
                .max_by_key(|(_, q)| (q.len(), std::cmp::Reverse(q.front().map(|(id, _)| *id))))
                .map(|(a, _)| *a);
            if let Some(heaviest) = heaviest {
                self.evict_oldest(&mut slots, heaviest);
            }
        }
        let id = slots.next_id;
        slots.next_id += 1;
        slots
            .by_address
            .entry(address)
            .or_default()
            .push_back((id, closer.clone()));
        slots.total += 1;
        self.held
            .set(i64::try_from(slots.total).unwrap_or(i64::MAX));
        Slot {
            admission: self.clone(),
            address,
            id,
            closer,
        }
    }

    fn evict_oldest(&self, slots: &mut Slots, address: IpAddr) {
        let Some(queue) = slots.by_address.get_mut(&address) else {
            return;
        };
        if let Some((_, closer)) = queue.pop_front() {
            closer.close_by(Instant::now());
            slots.total -= 1;
            self.evicted.inc();
        }
        if queue.is_empty() {
            slots.by_address.remove(&address);
        }
    }

    fn release(&self, address: IpAddr, id: u64) {
        let mut slots = self.slots();
        let Some(queue) = slots.by_address.get_mut(&address) else {
            return;
        };
        // Gone already where it was evicted.
        if let Some(at) = queue.iter().position(|(i, _)| *i == id) {
            queue.remove(at);
            if queue.is_empty() {
                slots.by_address.remove(&address);
            }
            slots.total -= 1;
        }
        self.held
            .set(i64::try_from(slots.total).unwrap_or(i64::MAX));
    }
}

/// An unauthenticated connection's place in its port's [`Admission`], given back on drop.
#[derive(Debug)]
pub struct Slot {
    admission: Arc<Admission>,
    address: IpAddr,
    id: u64,
    closer: Closer,
}

impl Slot {
    /// The connection's deadline.
    pub fn closer(&self) -> &Closer {
        &self.closer
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.admission.release(self.address, self.id);
    }
}

/// When an unauthenticated connection is closed: a deadline that can only come sooner, and
/// the task to wake when it does.
#[derive(Clone, Debug)]
pub struct Closer(Arc<CloseState>);

#[derive(Debug)]
struct CloseState {
    /// The instant `at` counts from.
    origin: Instant,
    /// The deadline, in nanoseconds after `origin`.
    at: AtomicU64,
    waker: AtomicWaker,
}

impl Closer {
    /// A deadline `allowed` from now.
    fn new(allowed: Duration) -> Self {
        Self(Arc::new(CloseState {
            origin: Instant::now(),
            at: AtomicU64::new(nanos(allowed)),
            waker: AtomicWaker::new(),
        }))
    }

    /// The deadline now.
    pub fn deadline(&self) -> Instant {
        self.0.origin + Duration::from_nanos(self.0.at.load(Ordering::Acquire))
    }

    /// Brings the deadline forward to `at` (never back) and wakes the connection's task.
    pub fn close_by(&self, at: Instant) {
        let at = nanos(at.saturating_duration_since(self.0.origin));
        self.0.at.fetch_min(at, Ordering::AcqRel);
        self.0.waker.wake();
    }

    /// Wakes `waker` when the deadline changes.
    pub fn register(&self, waker: &Waker) {
        self.0.waker.register(waker);
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(max: usize, max_per_address: usize) -> Arc<Admission> {
        let limits = ConnectionsConfig {
            max_unauthenticated: max,
            max_unauthenticated_per_address: max_per_address,
            ..ConnectionsConfig::default()
        };
        Admission::new("orb", &limits, &Metrics::new(sdk_orb::PartyId::ALL[0]))
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn closed(slot: &Slot) -> bool {
        slot.closer().deadline() <= Instant::now()
    }

    #[tokio::test]
    async fn an_address_over_its_cap_pushes_out_its_own_oldest() {
        let a = admission(100, 3);
        let first: Vec<Slot> = (0..3).map(|_| a.admit(ip(1))).collect();
        let other = a.admit(ip(2));
        assert!(!first.iter().any(closed));
        let newest = a.admit(ip(1));
        assert!(closed(&first[0]), "the oldest of the address goes");
        assert!(!closed(&first[1]) && !closed(&first[2]) && !closed(&newest));
        assert!(!closed(&other), "another address is not touched");
        assert_eq!(a.held.get(), 4);
        assert_eq!(a.evicted.get(), 1);
    }

    #[tokio::test]
    async fn a_full_port_pushes_out_the_oldest_of_the_heaviest_address() {
        let a = admission(5, 5);
        let client = a.admit(ip(1));
        let stranger: Vec<Slot> = (0..4).map(|_| a.admit(ip(9))).collect();
        let newcomer = a.admit(ip(3));
        assert!(closed(&stranger[0]));
        assert!(!closed(&client) && !closed(&newcomer));
        assert!(!stranger[1..].iter().any(closed));
        // Tied at one slot each: the oldest connection among them goes.
        let b = admission(2, 2);
        let (old, young) = (b.admit(ip(1)), b.admit(ip(2)));
        let third = b.admit(ip(3));
        assert!(closed(&old) && !closed(&young) && !closed(&third));
    }

    #[tokio::test]
    async fn slots_are_given_back_on_drop() {
        let a = admission(2, 2);
        let (s1, s2) = (a.admit(ip(1)), a.admit(ip(1)));
        assert_eq!(a.held.get(), 2);
        drop(s1);
        assert_eq!(a.held.get(), 1);
        let s3 = a.admit(ip(1));
        assert!(!closed(&s2) && !closed(&s3), "room was made by the drop");
        let s4 = a.admit(ip(1));
        assert!(closed(&s2));
        drop((s2, s3, s4));
        assert_eq!(a.held.get(), 0);
        assert!(a.slots().by_address.is_empty());
    }

    #[tokio::test]
    async fn a_deadline_only_comes_sooner() {
        let a = admission(2, 2);
        let slot = a.admit(ip(1));
        let allowed = slot.closer().deadline();
        assert!(allowed > Instant::now() + Duration::from_secs(4));
        let sooner = Instant::now() + Duration::from_secs(1);
        slot.closer().close_by(sooner);
        slot.closer().close_by(allowed);
        let at = slot.closer().deadline();
        assert!(at <= sooner && at + Duration::from_millis(1) > sooner);
    }
}

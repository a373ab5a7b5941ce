//! Spreading leases over competing holders: a [`Placement`] names the holder each lease should
//! go to (the gateway replicas place their channels' long connections by rendezvous hashing
//! over the live replicas), and [`Leases`](super::Leases) follows it without ever giving up the
//! lease's own guarantee (one holder at a time):
//!
//! - the preferred holder takes a free lease at once;
//! - any other holder takes it only after it stayed free for the grace time (the preferred one
//!   is dead, or does not serve it), and then keeps it: no hand-back, so a lease the preferred
//!   holder cannot serve does not bounce;
//! - a holder that took a lease as preferred hands it back (stops and releases it) once the
//!   placement has preferred another holder at two renewals in a row: a replica that joined
//!   takes its share within about one lease time.
//!
//! A holder SIGKILLed mid-way leaves its leases to expire; the live holders' placement stops
//! counting it and the new preferred holder takes each lease when it expires.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which holder a lease should go to.
pub trait Placement: Send + Sync + 'static {
    /// Whether this holder is the one `key` should go to now.
    fn prefers(&self, key: &str) -> bool;
}

/// A placement and the free-since times it waits on.
#[derive(Clone)]
pub(super) struct Placed {
    pub(super) placement: Arc<dyn Placement>,
    grace: Duration,
    free_since: Arc<Mutex<HashMap<String, Instant>>>,
}

/// What a holder may do with a lease it wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Take {
    /// Take it and keep it (it stayed free past the grace time).
    Orphan,
    /// Leave it for now.
    Wait,
}

impl Placed {
    pub(super) fn new(placement: Arc<dyn Placement>, grace: Duration) -> Self {
        Self {
            placement,
            grace,
            free_since: Arc::default(),
        }
    }

    /// Whether this holder is preferred for `key` (no round trip needed then).
    pub(super) fn prefers(&self, key: &str) -> bool {
        self.placement.prefers(key)
    }

    /// Decides for a lease this holder is not preferred for, given whether it is held at `now`.
    pub(super) fn take_unpreferred(&self, key: &str, held: bool, now: Instant) -> Take {
        let mut free_since = self.free_since.lock().unwrap_or_else(|p| p.into_inner());
        if held {
            free_since.remove(key);
            return Take::Wait;
        }
        let since = *free_since.entry(key.to_string()).or_insert(now);
        if now.saturating_duration_since(since) >= self.grace {
            free_since.remove(key);
            Take::Orphan
        } else {
            Take::Wait
        }
    }

    /// Forgets the free-since time of `key` (it was taken).
    pub(super) fn taken(&self, key: &str) {
        self.free_since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

/// Counts the renewals at which the placement preferred another holder; `true` once the lease
/// should be handed back.
#[derive(Default)]
pub(super) struct HandBack {
    strikes: u32,
}

impl HandBack {
    /// Renewals in a row without preference before the lease is handed back.
    const STRIKES: u32 = 2;

    pub(super) fn should_hand_back(&mut self, preferred: bool) -> bool {
        self.strikes = if preferred { 0 } else { self.strikes + 1 };
        self.strikes >= Self::STRIKES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Never;
    impl Placement for Never {
        fn prefers(&self, _key: &str) -> bool {
            false
        }
    }

    #[test]
    fn an_unpreferred_holder_waits_out_the_grace_of_a_free_lease_then_takes_it() {
        let placed = Placed::new(Arc::new(Never), Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(placed.take_unpreferred("k", false, t0), Take::Wait);
        let almost = t0 + Duration::from_millis(4_900);
        assert_eq!(placed.take_unpreferred("k", false, almost), Take::Wait);
        let after = t0 + Duration::from_secs(5);
        assert_eq!(placed.take_unpreferred("k", false, after), Take::Orphan);
    }

    #[test]
    fn a_lease_seen_held_restarts_the_grace() {
        let placed = Placed::new(Arc::new(Never), Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(placed.take_unpreferred("k", false, t0), Take::Wait);
        let later = t0 + Duration::from_secs(6);
        assert_eq!(placed.take_unpreferred("k", true, later), Take::Wait);
        assert_eq!(placed.take_unpreferred("k", false, later), Take::Wait);
    }

    #[test]
    fn a_lease_is_handed_back_after_two_renewals_preferring_another_holder_in_a_row() {
        let mut hand_back = HandBack::default();
        assert!(!hand_back.should_hand_back(false));
        assert!(!hand_back.should_hand_back(true));
        assert!(!hand_back.should_hand_back(false));
        assert!(hand_back.should_hand_back(false));
    }
}

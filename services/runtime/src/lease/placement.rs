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

    /// How long after a holder dies the placement may still prefer it. The grace an
    /// unpreferred holder waits is at least this plus the lease time, so a dead holder's lease
    /// goes to the holder placed next (which may later hand it back) rather than to whoever
    /// saw it free first (which would keep it: a replica joining later would not get it).
    fn forgets_within(&self) -> Duration {
        Duration::ZERO
    }

    /// Whether a lease this holder took as preferred should now go to another holder (it is
    /// handed back after two renewals saying so). Default: once it is no longer preferred.
    fn moves(&self, key: &str) -> bool {
        !self.prefers(key)
    }

    /// Told when this holder took (`true`) or dropped (`false`) the lease `key`.
    fn holds(&self, _key: &str, _held: bool) {}
}

impl std::fmt::Debug for dyn Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Placement")
    }
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
    /// Follows `placement` for leases lasting `ttl`: an unpreferred holder waits twice the
    /// lease time, and at least until the placement forgot a dead holder plus a lease time.
    pub(super) fn new(placement: Arc<dyn Placement>, ttl: Duration) -> Self {
        let grace = (ttl * 2).max(placement.forgets_within() + ttl);
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

    /// Prefers another holder, and may go on preferring a dead one for 4 s.
    struct ForgetsSlowly;
    impl Placement for ForgetsSlowly {
        fn prefers(&self, _key: &str) -> bool {
            false
        }
        fn forgets_within(&self) -> Duration {
            Duration::from_secs(4)
        }
    }

    #[test]
    fn an_unpreferred_holder_waits_out_twice_the_lease_time_of_a_free_lease_then_takes_it() {
        let placed = Placed::new(Arc::new(Never), Duration::from_millis(2_500));
        let t0 = Instant::now();
        assert_eq!(placed.take_unpreferred("k", false, t0), Take::Wait);
        let almost = t0 + Duration::from_millis(4_900);
        assert_eq!(placed.take_unpreferred("k", false, almost), Take::Wait);
        let after = t0 + Duration::from_secs(5);
        assert_eq!(placed.take_unpreferred("k", false, after), Take::Orphan);
    }

    #[test]
    fn with_a_short_lease_an_unpreferred_holder_waits_until_the_placement_forgot_a_dead_holder() {
        let placed = Placed::new(Arc::new(ForgetsSlowly), Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(placed.take_unpreferred("k", false, t0), Take::Wait);
        let twice_the_lease = t0 + Duration::from_millis(4_900);
        assert_eq!(
            placed.take_unpreferred("k", false, twice_the_lease),
            Take::Wait
        );
        let forgotten = t0 + Duration::from_secs(5);
        assert_eq!(placed.take_unpreferred("k", false, forgotten), Take::Orphan);
    }

    #[test]
    fn a_lease_seen_held_restarts_the_grace() {
        let placed = Placed::new(Arc::new(Never), Duration::from_millis(2_500));
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

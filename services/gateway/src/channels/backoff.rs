//! The channels' reconnect and retry waits: doubling from a base up to a cap, started again from
//! the base once a connection worked. Exact doubling (200 ms, 400 ms, 800 ms ...): the waits are
//! logged as `retry_in` and read back by tests. Holds no state beyond the loop that owns it.

use std::time::Duration;

/// Doubling waits from `base` up to `cap`.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    base: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    /// Starts at `base`; no wait grows past `cap`.
    pub(crate) fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            next: base.min(cap),
        }
    }

    /// The wait the next [`Backoff::sleep`] takes (what to log as `retry_in`).
    pub(crate) fn current(&self) -> Duration {
        self.next
    }

    /// Sleeps the current wait; the one after is twice as long (up to the cap).
    pub(crate) fn sleep(&mut self) -> tokio::time::Sleep {
        tokio::time::sleep(self.next_wait())
    }

    /// Returns the current wait, for a caller that sleeps it itself; the next is doubled.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let now = self.next;
        self.next = self.next.saturating_mul(2).min(self.cap);
        now
    }

    /// Starts again from the base (a connection worked).
    pub(crate) fn reset(&mut self) {
        self.next = self.base.min(self.cap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_from_the_base_stop_at_the_cap_and_start_again_after_a_reset() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(200), ms(1000));
        let waits: Vec<_> = (0..5).map(|_| b.next_wait()).collect();
        assert_eq!(waits, [ms(200), ms(400), ms(800), ms(1000), ms(1000)]);
        b.reset();
        assert_eq!(b.next_wait(), ms(200));
        assert_eq!(format!("{:?}", b.next_wait()), "400ms", "logged exactly");
    }
}

//! `WAIT` that cannot stall a connection. Redis holds back every later command of a client
//! behind its `WAIT`, and all of a process's traffic to one Redis node shares one multiplexed
//! connection. When replicas stop confirming (a primary just promoted, its replica resyncing),
//! queued `WAIT`s hold that connection one after another, each for its whole timeout, and
//! every session write behind them times out: in the Redis Cluster failover chaos test a
//! runner stalled for about 35 s this way, longer the more turns it ran at once. So
//! [`super::Store::replicate`] stays best effort, and bounded:
//! - a `WAIT` gives up after [`TIMEOUT_MS`];
//! - at most [`MAX_IN_FLIGHT`] are outstanding per store; a write past that is not waited for
//!   (the next `WAIT` on the same connection covers it, as `WAIT` counts all of a client's
//!   writes so far);
//! - after an unconfirmed or failed `WAIT`, none is sent for a backoff (1 s, doubling to 30 s
//!   while probes keep failing, reset by a confirmed one); then one probe at a time. Each
//!   change is logged once, not each write.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::{RedisResult, Value};

/// How long one `WAIT` waits for a replica (ms).
pub const TIMEOUT_MS: u64 = 250;
/// `WAIT`s outstanding at once per store.
pub const MAX_IN_FLIGHT: usize = 4;
/// First and longest pause in `WAIT`s after replicas stopped confirming.
const BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));

/// Whether `WAIT`s are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Replicas confirm: `WAIT` after writes.
    Open,
    /// Replicas did not confirm: no `WAIT` until then.
    Closed(Instant),
    /// One `WAIT` is asking whether replicas confirm again.
    Probing,
}

/// The `WAIT` budget of one store (shared by its clones).
#[derive(Debug)]
pub struct ReplicaGate {
    in_flight: AtomicUsize,
    state: Mutex<(State, Duration)>,
}

impl Default for ReplicaGate {
    fn default() -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            state: Mutex::new((State::Open, BACKOFF.0)),
        }
    }
}

/// Gives an in-flight slot back when the `WAIT` ends or its future is dropped; a probe
/// dropped before its answer lets the next write probe.
struct Slot<'a> {
    gate: &'a ReplicaGate,
    probe: bool,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.gate.in_flight.fetch_sub(1, Ordering::AcqRel);
        if self.probe {
            let mut state = self.gate.lock();
            if state.0 == State::Probing {
                state.0 = State::Closed(Instant::now());
            }
        }
    }
}

impl ReplicaGate {
    /// Sends the `WAIT` that `send` makes, if the gate lets one through now, and learns from
    /// its answer.
    pub async fn wait(&self, send: impl Future<Output = RedisResult<Value>>) {
        let Some(_slot) = self.admit() else { return };
        let answer = send.await;
        self.settle(&answer);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (State, Duration)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn admit(&self) -> Option<Slot<'_>> {
        let mut state = self.lock();
        let probe = match state.0 {
            State::Probing => return None,
            State::Closed(until) if Instant::now() < until => return None,
            // Waits sent before the pause may still be out; the probe is alone.
            State::Closed(_) if self.in_flight.load(Ordering::Acquire) > 0 => return None,
            State::Closed(_) => true,
            State::Open => false,
        };
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_IN_FLIGHT).then_some(n + 1)
            })
            .ok()?;
        if probe {
            state.0 = State::Probing;
        }
        Some(Slot { gate: self, probe })
    }

    fn settle(&self, answer: &RedisResult<Value>) {
        let confirmed = matches!(answer, Ok(Value::Int(n)) if *n >= 1);
        let mut state = self.lock();
        match (confirmed, state.0) {
            (true, State::Open) => {}
            (true, _) => {
                tracing::info!("replicas confirm writes again; waiting for them after writes");
                *state = (State::Open, BACKOFF.0);
            }
            // Another `WAIT` closed the gate already.
            (false, State::Closed(_)) => {}
            (false, _) => {
                let pause = state.1;
                match answer {
                    Ok(acked) => tracing::warn!(
                        ?acked,
                        pause_secs = pause.as_secs(),
                        "writes not confirmed by a replica in time; not waiting for replicas for a while"
                    ),
                    Err(e) => tracing::warn!(
                        error = %e,
                        pause_secs = pause.as_secs(),
                        "waiting for a replica failed; not waiting for replicas for a while"
                    ),
                }
                *state = (
                    State::Closed(Instant::now() + pause),
                    (pause * 2).min(BACKOFF.1),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(n: i64) -> RedisResult<Value> {
        Ok(Value::Int(n))
    }

    #[tokio::test]
    async fn at_most_max_in_flight_waits_are_outstanding() {
        let gate = ReplicaGate::default();
        let slots: Vec<_> = (0..MAX_IN_FLIGHT + 3)
            .filter_map(|_| gate.admit())
            .collect();
        assert_eq!(slots.len(), MAX_IN_FLIGHT);
        drop(slots);
        assert!(gate.admit().is_some(), "slots come back when waits end");
    }

    #[tokio::test]
    async fn an_unconfirmed_wait_pauses_waits_then_one_probe_reopens_the_gate() {
        let gate = ReplicaGate::default();
        let sent = AtomicUsize::new(0);
        let send = |n: i64| {
            let sent = &sent;
            async move {
                sent.fetch_add(1, Ordering::SeqCst);
                answer(n)
            }
        };
        gate.wait(send(0)).await;
        for _ in 0..10 {
            gate.wait(send(0)).await;
        }
        assert_eq!(sent.load(Ordering::SeqCst), 1, "paused after the first");
        // The pause is over: one probe at a time.
        gate.state.lock().unwrap().0 = State::Closed(Instant::now());
        let probe = gate.admit().expect("a probe goes through");
        assert!(gate.admit().is_none(), "only one probe");
        drop(probe);
        let probe = gate.admit();
        assert!(
            probe.is_some(),
            "a probe dropped unanswered lets the next write probe"
        );
        drop(probe);
        assert_eq!(
            gate.state.lock().unwrap().1,
            BACKOFF.0 * 2,
            "backoff doubles"
        );
        gate.wait(send(1)).await;
        assert_eq!(*gate.state.lock().unwrap(), (State::Open, BACKOFF.0));
        gate.wait(send(1)).await;
        assert_eq!(sent.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_failed_wait_pauses_waits_like_an_unconfirmed_one() {
        let gate = ReplicaGate::default();
        let failed: RedisResult<Value> =
            Err(redis::RedisError::from((redis::ErrorKind::Io, "timed out")));
        gate.wait(async { failed }).await;
        assert!(matches!(gate.state.lock().unwrap().0, State::Closed(_)));
        assert!(gate.admit().is_none());
    }
}

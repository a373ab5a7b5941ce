//! `WAIT` that cannot wedge a connection. Redis holds back every later command of a client
//! behind its `WAIT`, and all of a process's traffic to one Redis node shares one multiplexed
//! connection. When a primary has no replica that can confirm (just promoted, its replica
//! gone or resyncing), every `WAIT` sent to it takes its whole timeout, one after another, and
//! every session write queued behind them times out and is retried behind more `WAIT`s: in
//! the Redis Cluster failover chaos test a runner stalled for 35–80 s this way, more often
//! the more turns it ran at once. So [`super::Store::replicate`] stays best effort, and
//! pauses while waiting cannot help:
//! - a `WAIT` that is not confirmed in time asks the node for its `ROLE`; a primary that still
//!   lists a replica with a replication offset is only slow (the write is logged unconfirmed
//!   and the next write waits again), one without pauses the `WAIT`s;
//! - while paused (1 s, doubling to 10 s while the node still has no replica, reset once it
//!   has), writes are not waited for; nothing is lost by that, since no replica could confirm
//!   them. The pause is the store's, so during it a write to another primary is not waited
//!   for either (a second failover within the pause could lose it);
//! - after the pause one writer asks `ROLE` again, the others keep not waiting until it knows.
//!
//! A gate of one Redis server (`store.url`) asks `ROLE` before its first `WAIT`, so a primary
//! that never had a replica (one local Redis) is never waited on: the first write costs one
//! `ROLE`, no `WAIT` timeout. A Cluster's or Sentinel's gate starts waiting
//! ([`ReplicaGate::waiting`]): their replicas may still be in their first sync when the first
//! writes come, and a probe then would pause the waits for seconds, long enough for a failover
//! right after start to lose acknowledged writes (the Cluster chaos test saw answers doubled).
//!
//! Each change is logged once, not each write.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::{RedisResult, Value};

/// How long one `WAIT` waits for a replica (ms).
pub const TIMEOUT_MS: u64 = 1_000;
/// First and longest pause in `WAIT`s while a primary has no replica: how soon a replica that
/// attaches later is waited for.
const BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(10));

/// Whether `WAIT`s are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// `WAIT` after writes.
    Open,
    /// A primary had no replica: no `WAIT` until then.
    Paused(Instant),
    /// One writer is asking whether the primary has a replica again.
    Probing,
    /// Not asked yet: the first writer asks before any `WAIT`.
    Unknown,
}

/// The `WAIT` state of one store (shared by its clones).
#[derive(Debug)]
pub struct ReplicaGate {
    state: Mutex<Gate>,
}

/// The state, the next pause, and whether the last answer listed a replica (so only changes
/// are logged).
#[derive(Debug)]
struct Gate {
    state: State,
    pause: Duration,
    had_replica: bool,
}

impl Default for ReplicaGate {
    fn default() -> Self {
        Self {
            state: Mutex::new(Gate {
                state: State::Unknown,
                pause: BACKOFF.0,
                had_replica: false,
            }),
        }
    }
}

/// What this writer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    Wait,
    Probe,
    Skip,
}

/// Ends a probe that was dropped before its answer, so the next writer probes.
struct ProbeGuard<'a>(&'a ReplicaGate);

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        if matches!(state.state, State::Probing | State::Unknown) {
            state.state = State::Paused(Instant::now());
        }
    }
}

impl ReplicaGate {
    /// Returns a gate that waits after writes from the first one (for stores whose primaries
    /// are meant to have replicas: Cluster, Sentinel); the default asks `ROLE` first.
    pub fn waiting() -> Self {
        let gate = Self::default();
        gate.lock().state = State::Open;
        gate
    }

    /// Waits for a replica with `wait` (a `WAIT`) unless paused; `role` asks the same node
    /// for its `ROLE` when a `WAIT` was not confirmed or a pause is over.
    pub async fn replicate<W, R, F>(&self, wait: W, role: R)
    where
        W: Future<Output = RedisResult<Value>>,
        R: FnOnce() -> F,
        F: Future<Output = RedisResult<Value>>,
    {
        let turn = self.turn();
        let _probe = (turn == Turn::Probe).then(|| ProbeGuard(self));
        match turn {
            Turn::Skip => {}
            Turn::Probe => {
                if self.learn(&role().await) {
                    self.confirmed(&wait.await);
                }
            }
            Turn::Wait => {
                let answer = wait.await;
                if !self.confirmed(&answer) {
                    self.learn(&role().await);
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn turn(&self) -> Turn {
        let mut state = self.lock();
        match state.state {
            State::Open => Turn::Wait,
            State::Unknown => {
                state.state = State::Probing;
                Turn::Probe
            }
            State::Paused(until) if Instant::now() >= until => {
                state.state = State::Probing;
                Turn::Probe
            }
            State::Paused(_) | State::Probing => Turn::Skip,
        }
    }

    /// Whether `answer` (of a `WAIT`) says a replica confirmed; an unconfirmed write is logged.
    fn confirmed(&self, answer: &RedisResult<Value>) -> bool {
        match answer {
            Ok(Value::Int(n)) if *n >= 1 => true,
            Ok(acked) => {
                tracing::warn!(?acked, "write not confirmed by a replica in time");
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "waiting for a replica failed");
                false
            }
        }
    }

    /// Opens or pauses the gate by a `ROLE` answer; returns whether it is open.
    fn learn(&self, role: &RedisResult<Value>) -> bool {
        let has_replica = matches!(role, Ok(v) if has_replica(v));
        let mut state = self.lock();
        if has_replica {
            if !state.had_replica {
                tracing::info!("the primary has a replica; waiting for replicas after writes");
            }
            *state = Gate {
                state: State::Open,
                pause: BACKOFF.0,
                had_replica: true,
            };
            return true;
        }
        if let State::Paused(_) = state.state {
            return false; // another writer paused it already
        }
        let pause = state.pause;
        match role {
            Ok(_) if state.had_replica => tracing::warn!(
                pause_secs = pause.as_secs(),
                "a primary has no replica to confirm writes; not waiting for replicas for a while"
            ),
            Ok(_) => tracing::debug!(
                pause_secs = pause.as_secs(),
                "the primary has no replica; writes are not waited for"
            ),
            Err(e) => tracing::warn!(
                error = %e,
                pause_secs = pause.as_secs(),
                "asking a primary for its replicas failed; not waiting for replicas for a while"
            ),
        }
        *state = Gate {
            state: State::Paused(Instant::now() + pause),
            pause: (pause * 2).min(BACKOFF.1),
            had_replica: false,
        };
        false
    }
}

/// Whether a `ROLE` answer is a primary's listing a replica that has acknowledged a
/// replication offset (one still in its initial sync has not).
fn has_replica(role: &Value) -> bool {
    let Value::Array(parts) = role else {
        return false;
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => n.to_string(),
        _ => String::new(),
    };
    match parts.as_slice() {
        [kind, _offset, Value::Array(replicas)] if text(kind) == "master" => {
            replicas.iter().any(|r| match r {
                Value::Array(fields) => fields
                    .get(2)
                    .and_then(|o| text(o).parse::<u64>().ok())
                    .is_some_and(|o| o > 0),
                _ => false,
            })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_primary_has_a_replica_once_one_acknowledged_an_offset() {
        let role = |replicas: Vec<Value>| {
            Value::Array(vec![bulk("master"), Value::Int(42), Value::Array(replicas)])
        };
        let replica =
            |offset: &str| Value::Array(vec![bulk("127.0.0.1"), bulk("7001"), bulk(offset)]);
        assert!(!has_replica(&role(vec![])));
        assert!(!has_replica(&role(vec![replica("0")])), "still syncing");
        assert!(has_replica(&role(vec![replica("0"), replica("40")])));
        let replica_role = Value::Array(vec![
            bulk("slave"),
            bulk("127.0.0.1"),
            Value::Int(7000),
            bulk("connected"),
            Value::Int(42),
        ]);
        assert!(!has_replica(&replica_role));
    }

    #[tokio::test]
    async fn a_probe_dropped_before_its_answer_lets_the_next_writer_probe() {
        let gate = ReplicaGate::default();
        gate.lock().state = State::Paused(Instant::now());
        assert_eq!(gate.turn(), Turn::Probe);
        assert_eq!(gate.turn(), Turn::Skip, "one probe at a time");
        drop(ProbeGuard(&gate));
        assert_eq!(gate.turn(), Turn::Probe);
    }

    #[test]
    fn a_cluster_or_sentinel_gate_waits_from_the_first_write_and_a_nodes_asks_first() {
        assert_eq!(ReplicaGate::waiting().turn(), Turn::Wait);
        assert_eq!(ReplicaGate::default().turn(), Turn::Probe);
    }
}

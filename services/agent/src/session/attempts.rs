//! Attempts at a message's turn: each start is counted first (so a turn whose runner dies
//! counts too), an interruption is taken back (lease lost, a write fenced,
//! shutdown, or the turn was committed after all), a failure is retried by the next drain, and
//! after [`MAX_ATTEMPTS`] the message is answered with upstream's [`ERROR_REPLY`] so one poison
//! message cannot block its session.

use std::time::{Duration, Instant};

use redis::AsyncCommands as _;
use redis::Value;

use nanobot_core::checkpoint::Restore;
use nanobot_core::history::MAX_REPLAY_MESSAGES;
use nanobot_core::session::Session;
use nanobot_proto::{OutboundKind, keys};
use nanobot_runtime::{metrics, store};

use crate::base::bots::Bot;
use crate::base::deps::Deps;
use crate::base::error::{Error, Result};
use crate::base::lease::Lease;
use crate::turn::memory_jobs;
use crate::turn::parts::{Reply, Turn};

/// Upstream's reply when a turn fails.
pub const ERROR_REPLY: &str = nanobot_core::runner::prompts::TURN_ERROR_MESSAGE;
/// Attempts at one message's turn before it is answered with [`ERROR_REPLY`]: turns that
/// failed, and turns whose runner died mid-way (a message that kills its runner every time is
/// answered instead of crashing runner after runner). Interrupted turns do not count.
pub const MAX_ATTEMPTS: i64 = 5;
/// How long an attempt count is kept.
const ATTEMPTS_TTL_SECS: i64 = 24 * 3600;

/// What follows an attempt that ended with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterError {
    /// Not the message's fault (interrupted, or committed after all): the attempt is taken
    /// back and the message redelivered.
    TakeBack,
    /// Counted; the next drain tries again.
    Retry,
    /// The last attempt failed: the message is answered with [`ERROR_REPLY`].
    ErrorReply,
}

/// Decides what follows attempt number `attempt` that ended with an error.
pub fn after_error(attempt: i64, interrupted: bool, committed: bool) -> AfterError {
    if interrupted || committed {
        AfterError::TakeBack
    } else if attempt < MAX_ATTEMPTS {
        AfterError::Retry
    } else {
        AfterError::ErrorReply
    }
}

/// An attempt at a message's turn, started by [`start`].
#[derive(Debug)]
pub struct Started {
    /// Its number: 1 for the first start of the message's turn.
    pub attempt: i64,
    /// The session's replayable tail, loaded for the turn.
    pub session: Session,
}

/// Starts an attempt at the turn of message `id` of `session_key` unless the message was
/// answered (`None`). Its "seen" marker is checked, the attempt counted and the session's
/// replayable tail loaded in one round trip; the count of an answered message expires unused.
pub async fn start(deps: &Deps, bot: &Bot, session_key: &str, id: &str) -> Result<Option<Started>> {
    let attempts_key = keys::inbound_attempts(&bot.spec.id, session_key, id);
    let recent = bot.sessions.recent_read(session_key, MAX_REPLAY_MESSAGES);
    let mut pipe = redis::pipe();
    pipe.ignore_errors()
        .exists(keys::inbound_seen(&bot.spec.id, session_key, id))
        .incr(&attempts_key, 1)
        .expire(&attempts_key, ATTEMPTS_TTL_SECS)
        .ignore()
        .invoke_script(&recent);
    let mut conn = deps.redis.clone();
    let answers: Vec<Value> = pipe.query_async(&mut conn).await?;
    let mut answers = answers.into_iter();
    let mut next = || answers.next().unwrap_or(Value::Nil);
    let (seen, attempt, session) = (next(), next(), next());
    if store::answer::<bool>(seen)? {
        return Ok(None);
    }
    let attempt = store::answer::<i64>(attempt)?;
    let session = bot
        .sessions
        .recent_from(session_key, MAX_REPLAY_MESSAGES, session)
        .await?;
    Ok(Some(Started { attempt, session }))
}

/// Runs `turn` under `/stop` and the lease (see the module docs); `started` counted it.
pub async fn guarded(turn: &Turn<'_>, lease: &Lease, started: Started) -> Result<()> {
    let Turn {
        deps, bot, input, ..
    } = *turn;
    let Started {
        attempt: attempts,
        session,
    } = started;
    if attempts > MAX_ATTEMPTS {
        tracing::error!(
            attempts,
            "turn started too often without finishing (its runners died), answering with an error"
        );
        metrics::get().turn("error_reply", Duration::ZERO);
        return turn.commit(error_reply()).await;
    }
    let started = Instant::now();
    let registration = deps.active.register(&bot.spec.id, &input.session_key);
    let outcome = tokio::select! {
        r = turn.run(session) => Some(r),
        _ = registration.token.cancelled() => None,
        _ = lease.lost().cancelled() => Some(Err(Error::LeaseLost)),
    };
    drop(registration);
    let label = match &outcome {
        Some(Ok(_)) => "answered",
        None => "stopped",
        Some(Err(_)) if attempts < MAX_ATTEMPTS => "failed",
        Some(Err(_)) => "error_reply",
    };
    metrics::get().turn(label, started.elapsed());
    match outcome {
        Some(Ok(measured)) => {
            // Still under the lease, but no longer an active turn (`/status`, `/stop`).
            if let Some(measured) = measured {
                memory_jobs::maybe_consolidate(deps, bot, &input.session_key, measured).await;
            }
            Ok(())
        }
        None => stopped(turn).await,
        Some(Err(e)) => failed(turn, attempts, e).await,
    }
}

/// Ends a turn stopped by `/stop`: what it saved is restored into the history, and it is
/// committed without a reply.
async fn stopped(turn: &Turn<'_>) -> Result<()> {
    tracing::info!("turn stopped by /stop");
    let mut session = turn
        .sessions
        .load_recent(&turn.input.session_key, MAX_REPLAY_MESSAGES)
        .await?;
    turn.restore(&mut session, Restore::Close).await?;
    let stopped = Reply {
        text: None,
        ..Default::default()
    };
    turn.commit(stopped).await
}

/// Follows attempt number `attempts` at `turn`, which failed with `e` ([`after_error`]).
async fn failed(turn: &Turn<'_>, attempts: i64, e: Error) -> Result<()> {
    let Turn {
        deps, bot, input, ..
    } = *turn;
    let committed = match turn.seq {
        Some(seq) => turn.sessions.cursor(&input.session_key).await? >= seq,
        // Unknown while Redis fails: not counted against the message.
        None => deps
            .seen(&keys::inbound_seen(
                &bot.spec.id,
                &input.session_key,
                &input.id,
            ))
            .await
            .unwrap_or(true),
    };
    // Committed: the reply waits in the outbox for the next holder. Interrupted:
    // another runner holds the session now (lease lost, a write fenced), or this runner
    // is stopping.
    let interrupted = e.is_interruption() || deps.cancel.is_cancelled();
    match after_error(attempts, interrupted, committed) {
        AfterError::TakeBack => {
            let attempts_key = keys::inbound_attempts(&bot.spec.id, &input.session_key, &input.id);
            let mut conn = deps.redis.clone();
            let _: Result<i64, _> = conn.decr(&attempts_key, 1).await;
            Err(e)
        }
        AfterError::Retry => {
            tracing::warn!(attempts, "turn failed, will retry: {e:#}");
            Err(e)
        }
        AfterError::ErrorReply => {
            tracing::error!(attempts, "turn failed, answering with an error: {e:#}");
            turn.commit(error_reply()).await
        }
    }
}

/// Upstream's error reply, as the answer to a message that cannot be processed.
fn error_reply() -> Reply {
    Reply {
        text: Some((OutboundKind::Error, ERROR_REPLY.into())),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_attempt_is_retried_until_the_last_which_is_answered_with_an_error() {
        let verdicts: Vec<AfterError> = (1..=MAX_ATTEMPTS)
            .map(|attempt| after_error(attempt, false, false))
            .collect();
        let mut expected = vec![AfterError::Retry; MAX_ATTEMPTS as usize - 1];
        expected.push(AfterError::ErrorReply);
        assert_eq!(verdicts, expected);
    }

    #[test]
    fn an_interrupted_or_committed_attempt_is_taken_back_even_when_it_was_the_last() {
        for attempt in [1, MAX_ATTEMPTS] {
            assert_eq!(after_error(attempt, true, false), AfterError::TakeBack);
            assert_eq!(after_error(attempt, false, true), AfterError::TakeBack);
        }
    }
}

//! Running a session's turns across runners. Every runner holding an unanswered message of a
//! session waits for the session's lease; whoever takes it drains the session's mailbox in
//! stream order (so a holder that dies is replaced by any waiter once its lease expires, or by
//! JetStream redelivering its own messages). A turn's failures are retried a few times, then
//! answered with upstream's error text so one poison message cannot block its session.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, AckKind};
use rand::Rng as _;
use redis::AsyncCommands as _;
use tokio::sync::OwnedSemaphorePermit;

use nanobot_core::checkpoint::Restore;
use nanobot_core::history::MAX_REPLAY_MESSAGES;
use nanobot_core::session::{Commit, SessionWriter};
use nanobot_proto::{OutboundKind, keys};
use nanobot_runtime::metrics;

use super::Deps;
use crate::bots::Bot;
use crate::commands::Kind;
use crate::commit::{self, Reply};
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::mailbox::{FollowUps, Incoming};
use crate::memory_jobs;
use crate::outbox::{self, Outbox};
use crate::turn::{TurnCtx, TurnInput};
use crate::{pipeline, recovery};

/// Upstream's reply when a turn fails.
pub const ERROR_REPLY: &str = "Sorry, I encountered an error.";
/// Attempts at one message's turn before it is answered with [`ERROR_REPLY`]: turns that
/// failed, and turns whose runner died mid-way (a message that kills its runner every time is
/// answered instead of crashing runner after runner). Interrupted turns (lease lost, shutdown)
/// do not count.
const MAX_ATTEMPTS: i64 = 5;
/// How long an attempt count is kept.
const ATTEMPTS_TTL_SECS: i64 = 24 * 3600;
/// First and longest pause between attempts to take a busy session's lease.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(20), Duration::from_millis(400));

/// When a waiter stops waiting.
#[derive(Debug, Clone, Copy)]
pub enum Until<'a> {
    /// The session's cursor reached this stream sequence (the message was answered).
    Cursor(u64),
    /// This marker exists (a cron fire was answered).
    Seen(&'a str),
}

/// Counts this runner's messages waiting for their session (for `nanobot status`).
struct Waiting<'a>(&'a Deps);

impl<'a> Waiting<'a> {
    fn new(deps: &'a Deps) -> Self {
        deps.waiting.fetch_add(1, Ordering::Relaxed);
        Self(deps)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Waits until `until` holds (`None`) or this runner holds the session's lease and a turn
/// permit (`Some`). Fails when Redis fails or the runner shuts down.
pub async fn acquire(
    deps: &Deps,
    bot: &Bot,
    session_key: &str,
    until: Until<'_>,
) -> Result<Option<(Lease, OwnedSemaphorePermit)>> {
    let mut backoff = BACKOFF.0;
    let _waiting = Waiting::new(deps);
    loop {
        let answered = match until {
            Until::Cursor(seq) => bot.sessions.cursor(session_key).await? >= seq,
            Until::Seen(marker) => {
                let mut conn = deps.redis.clone();
                conn.exists(marker).await?
            }
        };
        // A committed reply still in the outbox goes out under the lease: its holder publishes
        // it, or, when that holder died, whoever takes the lease next.
        let unpublished = answered && bot.sessions.outbox(session_key).await?.is_some();
        if answered && !unpublished {
            return Ok(None);
        }
        let permit = tokio::select! {
            _ = deps.cancel.cancelled() => return Err(Error::Shutdown),
            p = deps.turns.clone().acquire_owned() => p?,
        };
        if let Some(lease) = deps.leases.try_acquire(&bot.spec.id, session_key).await? {
            if !unpublished {
                return Ok(Some((lease, permit)));
            }
            let sessions = bot.sessions.fenced(lease.fence());
            let flushed = outbox::flush(&deps.js, &sessions, session_key).await;
            lease.release().await;
            flushed?;
            return Ok(None);
        }
        drop(permit);
        let jitter = rand::rng().random_range(0..=backoff.as_millis() as u64 / 2);
        tokio::select! {
            _ = deps.cancel.cancelled() => return Err(Error::Shutdown),
            _ = tokio::time::sleep(backoff + Duration::from_millis(jitter)) => {}
        }
        backoff = (backoff * 2).min(BACKOFF.1);
    }
}

/// Answers the session's waiting messages in order while `lease` holds; returns how many
/// mailbox entries it went through.
pub async fn drain(
    deps: &Deps,
    bot: &Bot,
    session_key: &str,
    subject: &str,
    lease: &Lease,
) -> Result<usize> {
    let sessions = bot.sessions.fenced(lease.fence());
    outbox::flush(&deps.js, &sessions, session_key).await?;
    let mut entries = 0;
    loop {
        if lease.lost().is_cancelled() {
            return Err(Error::LeaseLost);
        }
        if deps.cancel.is_cancelled() {
            return Ok(entries);
        }
        let cursor = sessions.cursor(session_key).await?;
        let Some(entry) = deps.mailbox.next_after(subject, cursor).await? else {
            return Ok(entries);
        };
        entries += 1;
        let turn = match entry.incoming {
            // A priority command was answered by its receiver.
            Some(Incoming {
                kind: Kind::Priority(_),
                ..
            })
            | None => None,
            Some(incoming) => {
                let marker = keys::inbound_seen(&bot.spec.id, session_key, &incoming.message.id);
                (!deps.seen(&marker).await?).then_some(incoming)
            }
        };
        match turn {
            Some(incoming) => {
                run_one(deps, bot, &sessions, lease, subject, entry.seq, &incoming).await?;
            }
            None => {
                let skip = Commit {
                    cursor: Some(entry.seq),
                    ..Default::default()
                };
                sessions.commit(session_key, &skip).await?;
            }
        }
    }
}

/// Runs the turn of one mailbox message.
async fn run_one(
    deps: &Deps,
    bot: &Bot,
    sessions: &SessionWriter,
    lease: &Lease,
    subject: &str,
    seq: u64,
    incoming: &Incoming,
) -> Result<()> {
    let msg = &incoming.message;
    let input = TurnInput::chat(incoming);
    let session_key = input.session_key.clone();
    let outbox = Outbox::for_message(&deps.js, msg);
    let follow_ups = FollowUps::new(
        deps.mailbox.clone(),
        deps.redis.clone(),
        &bot.spec.id,
        &session_key,
        &msg.id,
        subject,
        seq,
    );
    let ctx = TurnCtx {
        sessions,
        seq: Some(seq),
        follow_ups: Some(&follow_ups),
    };
    guarded(deps, bot, ctx, lease, &input, &outbox).await
}

/// Runs a turn under `/stop` and the lease; a failed turn is retried by the next drain, up to
/// [`MAX_ATTEMPTS`], then answered with [`ERROR_REPLY`]. Each start is counted first, so a turn
/// that never comes back (its runner was killed) counts too.
pub async fn guarded(
    deps: &Deps,
    bot: &Bot,
    ctx: TurnCtx<'_>,
    lease: &Lease,
    input: &TurnInput,
    outbox: &Outbox,
) -> Result<()> {
    let attempts_key = keys::inbound_attempts(&bot.spec.id, &input.session_key, &input.id);
    let mut conn = deps.redis.clone();
    let (attempts,): (i64,) = redis::pipe()
        .incr(&attempts_key, 1)
        .expire(&attempts_key, ATTEMPTS_TTL_SECS)
        .ignore()
        .query_async(&mut conn)
        .await?;
    if attempts > MAX_ATTEMPTS {
        tracing::error!(
            attempts,
            "turn started too often without finishing (its runners died), answering with an error"
        );
        metrics::get().turn("error_reply", Duration::ZERO);
        return commit::finish(deps, ctx, input, outbox, error_reply()).await;
    }
    let started = Instant::now();
    let registration = deps.active.register(&bot.spec.id, &input.session_key);
    let outcome = tokio::select! {
        r = pipeline::run(deps, bot, ctx, input, outbox) => Some(r.map_err(Error::from)),
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
        None => {
            tracing::info!("turn stopped by /stop");
            let mut session = ctx
                .sessions
                .load_recent(&input.session_key, MAX_REPLAY_MESSAGES)
                .await?;
            recovery::recover(deps, bot, ctx.sessions, &mut session, Restore::Close).await?;
            let stopped = Reply {
                text: None,
                ..Default::default()
            };
            commit::finish(deps, ctx, input, outbox, stopped).await
        }
        Some(Err(e)) => {
            let committed = match ctx.seq {
                Some(seq) => ctx.sessions.cursor(&input.session_key).await? >= seq,
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
            if committed || e.is_interruption() || deps.cancel.is_cancelled() {
                // The reply waits in the outbox for the next holder, another runner holds the
                // session now (lease lost, a write fenced), or this runner is stopping: not
                // the message's fault.
                let _: Result<i64, _> = conn.decr(&attempts_key, 1).await;
                return Err(e);
            }
            if attempts < MAX_ATTEMPTS {
                tracing::warn!(attempts, "turn failed, will retry: {e:#}");
                return Err(e);
            }
            tracing::error!(attempts, "turn failed, answering with an error: {e:#}");
            commit::finish(deps, ctx, input, outbox, error_reply()).await
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

/// Acknowledges `msg` after `outcome`: acked when answered, otherwise redelivered soon (on
/// shutdown at once, to another runner).
pub async fn settle(deps: &Deps, msg: &jetstream::Message, outcome: anyhow::Result<()>) {
    let result = match outcome {
        Ok(()) => msg.ack().await,
        Err(e) => {
            let delay = if deps.cancel.is_cancelled() {
                Duration::ZERO
            } else {
                tracing::warn!("message not answered yet, redelivering later: {e:#}");
                Duration::from_secs(1)
            };
            msg.ack_with(AckKind::Nak(Some(delay))).await
        }
    };
    if let Err(e) = result {
        tracing::warn!(error = %e, "failed to acknowledge message");
    }
}

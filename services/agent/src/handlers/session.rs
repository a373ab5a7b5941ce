//! Running a session's turns across runners. Every runner holding an unanswered message of a
//! session waits for the session's lease; whoever takes it drains the session's mailbox in
//! stream order (so a holder that dies is replaced by any waiter once its lease expires, or by
//! JetStream redelivering its own messages). Each turn runs [`attempts::guarded`]: retried a
//! few times, then answered with upstream's error text.

use std::sync::atomic::Ordering;
use std::time::Duration;

use rand::Rng as _;
use redis::AsyncCommands as _;
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument as _;

use nanobot_core::session::{Commit, SessionWriter};
use nanobot_proto::keys;
use nanobot_runtime::telemetry;

use super::Deps;
use crate::attempts;
use crate::bots::Bot;
use crate::commands::Kind;
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::mailbox::{FollowUps, Incoming};
use crate::outbox::{self, Outbox};
use crate::turn::{TurnCtx, TurnInput};

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
        // A committed reply still in the outbox goes out under the lease: its holder publishes
        // it, or, when that holder died, whoever takes the lease next.
        let (answered, unpublished) = match until {
            Until::Cursor(seq) => {
                let (cursor, outbox) = bot.sessions.progress(session_key).await?;
                (cursor >= seq, cursor >= seq && outbox.is_some())
            }
            Until::Seen(marker) => {
                let mut conn = deps.redis.clone();
                let answered: bool = conn.exists(marker).await?;
                let unpublished = answered && bot.sessions.outbox(session_key).await?.is_some();
                (answered, unpublished)
            }
        };
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
    // Read once under the lease; then this holder is the only one moving the cursor, and a
    // cursor kept here that lags (the script only moves it forward) costs a skipped entry.
    let (mut cursor, unpublished) = sessions.progress(session_key).await?;
    if let Some(payload) = unpublished {
        outbox::publish_left(&deps.js, &sessions, session_key, payload).await?;
    }
    let mut entries = 0;
    loop {
        if lease.lost().is_cancelled() {
            return Err(Error::LeaseLost);
        }
        if deps.cancel.is_cancelled() {
            return Ok(entries);
        }
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
                // Each message is its own trace, whichever runner's receipt drains it: the
                // turn continues the trace of the message's publisher.
                let m = &incoming.message;
                let span = tracing::info_span!("turn", session_id = %session_key, channel = %m.origin().0, message_id = %m.id);
                telemetry::set_parent_from(&span, entry.headers.as_ref());
                let last = run_one(deps, bot, &sessions, lease, subject, entry.seq, &incoming);
                cursor = last.instrument(span).await?;
            }
            None => {
                let skip = Commit {
                    cursor: Some(entry.seq),
                    ..Default::default()
                };
                sessions.commit(session_key, &skip).await?;
                cursor = entry.seq;
            }
        }
    }
}

/// Runs the turn of one mailbox message; returns the cursor its commit wrote (past the
/// message and the follow-ups the turn took).
async fn run_one(
    deps: &Deps,
    bot: &Bot,
    sessions: &SessionWriter,
    lease: &Lease,
    subject: &str,
    seq: u64,
    incoming: &Incoming,
) -> Result<u64> {
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
    attempts::guarded(deps, bot, ctx, lease, &input, &outbox).await?;
    Ok(seq.max(follow_ups.taken().last_seq))
}

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

use nanobot_core::session::{Commit, Progress, SessionWriter};
use nanobot_runtime::{metrics, telemetry};

use super::Deps;
use crate::attempts::{self, Started};
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

/// A session's lease held by this runner, with a turn permit.
#[derive(Debug)]
pub struct Held {
    /// The session's lease.
    pub lease: Lease,
    /// The turn permit.
    pub permit: OwnedSemaphorePermit,
    /// The session's progress, read in the round trip that took the lease (when waiting for a
    /// cursor).
    pub progress: Option<Progress>,
}

/// Waits until `until` holds (`None`) or this runner holds the session's lease and a turn
/// permit (`Some`). Fails when Redis fails or the runner shuts down.
pub async fn acquire(
    deps: &Deps,
    bot: &Bot,
    session_key: &str,
    until: Until<'_>,
) -> Result<Option<Held>> {
    let mut backoff = BACKOFF.0;
    let _waiting = Waiting::new(deps);
    // A new message (the usual case) is not answered yet: the first try with a free permit
    // takes the lease and reads the progress in one round trip. Later tries first read whether
    // the message was answered meanwhile.
    let mut first = true;
    loop {
        let held = match until {
            Until::Cursor(seq) => {
                let free = std::mem::take(&mut first)
                    .then(|| deps.turns.clone().try_acquire_owned().ok())
                    .flatten();
                for_cursor(deps, bot, session_key, seq, free).await?
            }
            Until::Seen(marker) => for_marker(deps, bot, session_key, marker).await?,
        };
        match held {
            Wait::Done => return Ok(None),
            Wait::Held(held) => return Ok(Some(*held)),
            Wait::Busy => {}
        }
        let jitter = rand::rng().random_range(0..=backoff.as_millis() as u64 / 2);
        tokio::select! {
            _ = deps.cancel.cancelled() => return Err(Error::Shutdown),
            _ = tokio::time::sleep(backoff + Duration::from_millis(jitter)) => {}
        }
        backoff = (backoff * 2).min(BACKOFF.1);
    }
}

/// One try of [`acquire`].
enum Wait {
    /// What was waited for holds.
    Done,
    /// The lease is this runner's.
    Held(Box<Held>),
    /// Another runner holds the lease.
    Busy,
}

/// Waits for a turn permit.
async fn permit(deps: &Deps) -> Result<OwnedSemaphorePermit> {
    tokio::select! {
        _ = deps.cancel.cancelled() => Err(Error::Shutdown),
        p = deps.turns.clone().acquire_owned() => Ok(p?),
    }
}

/// One try until the session's cursor reaches `seq`. A committed reply still in the outbox
/// goes out under the lease: its holder publishes it, or, when that holder died, whoever takes
/// the lease next.
async fn for_cursor(
    deps: &Deps,
    bot: &Bot,
    session_key: &str,
    seq: u64,
    free: Option<OwnedSemaphorePermit>,
) -> Result<Wait> {
    let permit = match free {
        Some(permit) => permit,
        None => {
            let progress = bot.sessions.progress(session_key).await?;
            if progress.cursor >= seq && progress.outbox.is_none() {
                return Ok(Wait::Done);
            }
            permit(deps).await?
        }
    };
    let (lease, progress) = deps
        .leases
        .try_acquire_reading(&bot.sessions, session_key)
        .await?;
    let answered = progress.cursor >= seq;
    Ok(match lease {
        Some(lease) if !answered => Wait::Held(Box::new(Held {
            lease,
            permit,
            progress: Some(progress),
        })),
        Some(lease) => {
            // Answered meanwhile: only a reply left in the outbox is still to go.
            let flushed = match progress.outbox {
                Some(payload) => {
                    let sessions = bot.sessions.fenced(lease.fence());
                    outbox::publish_left(&deps.js, &sessions, session_key, payload).await
                }
                None => Ok(()),
            };
            lease.release().await;
            flushed?;
            Wait::Done
        }
        None if answered && progress.outbox.is_none() => Wait::Done,
        None => Wait::Busy,
    })
}

/// One try until `marker` exists (a cron fire was answered).
async fn for_marker(deps: &Deps, bot: &Bot, session_key: &str, marker: &str) -> Result<Wait> {
    let mut conn = deps.redis.clone();
    let answered: bool = conn.exists(marker).await?;
    let unpublished = answered && bot.sessions.outbox(session_key).await?.is_some();
    if answered && !unpublished {
        return Ok(Wait::Done);
    }
    let permit = permit(deps).await?;
    let Some(lease) = deps.leases.try_acquire(&bot.spec.id, session_key).await? else {
        return Ok(Wait::Busy);
    };
    if !unpublished {
        return Ok(Wait::Held(Box::new(Held {
            lease,
            permit,
            progress: None,
        })));
    }
    let sessions = bot.sessions.fenced(lease.fence());
    let flushed = outbox::flush(&deps.js, &sessions, session_key).await;
    lease.release().await;
    flushed?;
    Ok(Wait::Done)
}

/// Answers the session's waiting messages in order while `lease` holds; returns how many
/// mailbox entries it went through and the cursor it left. `progress`: the session's, read
/// under the lease when it was taken (read here otherwise).
pub async fn drain(
    deps: &Deps,
    bot: &Bot,
    session_key: &str,
    subject: &str,
    lease: &Lease,
    progress: Option<Progress>,
) -> Result<(usize, u64)> {
    let sessions = bot.sessions.fenced(lease.fence());
    // Read once under the lease; then this holder is the only one moving the cursor, and a
    // cursor kept here that lags (the script only moves it forward) costs a skipped entry.
    let Progress {
        mut cursor,
        outbox: unpublished,
    } = match progress {
        Some(progress) => progress,
        None => sessions.progress(session_key).await?,
    };
    if let Some(payload) = unpublished {
        outbox::publish_left(&deps.js, &sessions, session_key, payload).await?;
    }
    let mut entries = 0;
    loop {
        if lease.lost().is_cancelled() {
            return Err(Error::LeaseLost);
        }
        if deps.cancel.is_cancelled() {
            return Ok((entries, cursor));
        }
        let Some(entry) = deps.mailbox.next_after(subject, cursor).await? else {
            return Ok((entries, cursor));
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
                // A bot at its limit of concurrent turns: this drain stops, the lease and the
                // turn permit go back, and the message is redelivered later (other bots'
                // messages go on meanwhile).
                let slot = crate::limits::TurnSlot::take(deps, &bot.spec.id).await?;
                attempts::start(deps, bot, session_key, &incoming.message.id)
                    .await?
                    .map(|started| (incoming, started, slot))
            }
        };
        match turn {
            Some((incoming, started, slot)) => {
                // Each message is its own trace, whichever runner's receipt drains it: the
                // turn continues the trace of the message's publisher.
                let m = &incoming.message;
                let span = tracing::info_span!(
                    "turn",
                    session_id = %session_key,
                    channel = %m.origin().0,
                    message_id = %m.id,
                    "gen_ai.usage.input_tokens" = tracing::field::Empty,
                    "gen_ai.usage.output_tokens" = tracing::field::Empty,
                );
                telemetry::set_parent_in_conversation(&span, entry.headers.as_ref(), session_key);
                // Its metrics' labels, resolved once for the whole turn.
                let scope = metrics::Scope::new(&bot.spec.id, &m.origin().0);
                let waited = entry.stored.and_then(|t| t.elapsed().ok());
                let last = async {
                    if let Some(waited) = waited {
                        metrics::get().queue_wait(waited);
                    }
                    run_one(deps, bot, &sessions, lease, entry.seq, &incoming, started).await
                };
                cursor = metrics::scoped(scope, last.instrument(span)).await?;
                if let Some(slot) = slot {
                    slot.release().await;
                }
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
    seq: u64,
    incoming: &Incoming,
    started: Started,
) -> Result<u64> {
    let msg = &incoming.message;
    let subject = msg.subject();
    let input = TurnInput::chat(incoming);
    let session_key = input.session_key.clone();
    let outbox = Outbox::for_message(&deps.js, msg);
    let follow_ups = FollowUps::new(
        deps.mailbox.clone(),
        deps.redis.clone(),
        &bot.spec.id,
        &session_key,
        &msg.id,
        &subject,
        seq,
    );
    let ctx = TurnCtx {
        sessions,
        seq: Some(seq),
        follow_ups: Some(&follow_ups),
    };
    attempts::guarded(deps, bot, ctx, lease, &input, &outbox, started).await?;
    Ok(seq.max(follow_ups.taken().last_seq))
}

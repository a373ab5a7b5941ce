//! Taking a session's lease: every runner holding an unanswered message of a session waits for
//! the lease; whoever takes it (with a turn permit) drains the session ([`super::drain`]). A
//! committed reply still in the session's outbox goes out under the lease first.

use std::sync::atomic::Ordering;
use std::time::Duration;

use rand::Rng as _;
use redis::AsyncCommands as _;
use tokio::sync::OwnedSemaphorePermit;

use nanobot_core::session::Progress;

use crate::base::bots::Bot;
use crate::base::deps::Deps;
use crate::base::error::{Error, Result};
use crate::base::lease::Lease;
use crate::base::outbox;

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

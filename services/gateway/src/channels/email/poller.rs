//! Mailbox polling under a lease: every replica tries to take [`keys::email_poller`]; the one
//! that holds it logs in, searches the unseen mail above the cursor, handles each mail in UID
//! order, marks it seen and moves the cursor under the lease's fence, then waits for the next
//! poll: in IMAP IDLE when the server offers it (new mail wakes it at once; it polls again
//! after `pollIntervalSeconds` anyway), else `pollIntervalSeconds` (then NOOP to check the
//! connection). A replica that loses the lease drops its session at once.
//!
//! The cursor is `<uidvalidity>:<uid>`. When the mailbox's UIDVALIDITY changes (the mailbox was
//! recreated or its UIDs renumbered), the stored UID means nothing any more: the cursor is
//! reset to the new validity and the mailbox's current highest UID, so only mail arriving
//! after that is answered; mail already in the recreated mailbox, read or not, is left alone
//! (it may be mail answered before). With no cursor yet (first start), every unseen mail is
//! read, as upstream.
//!
//! A SIGKILL mid-poll: a mail whose inbound message was published but whose cursor was not
//! written yet is read again by the next holder (within `leaseSecs`) and published again with
//! the same id, which JetStream's de-duplication (and past its window the runners' seen-set)
//! drops; a mail not yet published is simply read by the next holder. Nothing is lost and no
//! mail is answered twice.

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands as _;
use tokio_util::sync::CancellationToken;

use nanobot_proto::keys;
use nanobot_runtime::lease::Lease;

use super::EmailChannel;
use super::imap::{self, ImapError, Mailbox};
use super::receive::{self, Handled};
use crate::channels::Inbound;
use crate::channels::poison::{self, Failure};

/// Longest wait after a failed session before logging in again.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// How a polling session ended.
enum Ended {
    /// Shutdown, or the lease went to another replica.
    Stopped,
    /// A failure: wait this long before trying again.
    Failed(Duration),
}

/// Polls while this replica holds the mailbox's lease; otherwise keeps trying to take it.
pub(super) async fn run(
    ch: Arc<EmailChannel>,
    inbound: Inbound,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let key = keys::email_poller(&ch.bot_id, &ch.mailbox_id);
    let fence_key = keys::email_poller_fence(&ch.bot_id, &ch.mailbox_id);
    let retry = (ch.leases.ttl() / 4).min(Duration::from_secs(1));
    let mut backoff = Duration::from_secs(1);
    loop {
        match ch.leases.try_acquire(&key, &fence_key).await {
            Ok(Some(lease)) => {
                tracing::info!(bot = %ch.bot_id, mailbox_id = %ch.mailbox_id, fence = lease.fence().token, "email poller lease taken");
                let ended = tokio::select! {
                    _ = cancel.cancelled() => Ended::Stopped,
                    _ = lease.lost().cancelled() => Ended::Stopped,
                    ended = poll(&ch, &inbound, &lease, &cancel, &mut backoff) => ended,
                };
                let lost = !lease.is_held();
                lease.release().await;
                tracing::info!(bot = %ch.bot_id, mailbox_id = %ch.mailbox_id, lost, "email poller stopped polling");
                if let Ended::Failed(delay) = ended {
                    wait(&cancel, delay).await;
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "email poller lease unavailable")
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(retry) => {}
        }
    }
}

/// One IMAP session: logs in and polls until shutdown, a lost fence or a failure.
async fn poll(
    ch: &EmailChannel,
    inbound: &Inbound,
    lease: &Lease,
    cancel: &CancellationToken,
    backoff: &mut Duration,
) -> Ended {
    let cfg = &ch.cfg;
    let mut mailbox = match imap::open(cfg).await {
        Ok(mailbox) => mailbox,
        Err(ImapError::LoginRefused(reason)) => {
            tracing::error!(bot = %ch.bot_id, host = %cfg.imap_host, user = %cfg.imap_username, %reason, "email IMAP login refused; check channels.email.imapUsername and imapPassword");
            return failed(backoff, Duration::from_secs(60));
        }
        Err(e) => {
            tracing::warn!(bot = %ch.bot_id, host = %cfg.imap_host, port = cfg.imap_port, mailbox = %cfg.imap_mailbox, error = %e, "email IMAP connection failed");
            return failed(backoff, Duration::from_secs(1));
        }
    };
    let cursor_key = keys::email_cursor(&ch.bot_id, &ch.mailbox_id);
    let mut last = match read_cursor(ch, lease, &cursor_key, &mut mailbox).await {
        Ok(last) => last,
        Err(e) => {
            tracing::warn!(bot = %ch.bot_id, error = format!("{e:#}"), "email cursor not read");
            return failed(backoff, Duration::from_secs(1));
        }
    };
    *backoff = Duration::from_secs(1);
    let interval = Duration::from_secs(cfg.poll_interval_seconds.max(1));
    loop {
        match poll_once(ch, inbound, lease, &mut mailbox, &cursor_key, &mut last).await {
            Ok(true) => {}
            Ok(false) => return Ended::Stopped,
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, mailbox_id = %ch.mailbox_id, error = format!("{e:#}"), "email poll failed; logging in again");
                return failed(backoff, Duration::from_secs(1));
            }
        }
        if mailbox.idle {
            mailbox = tokio::select! {
                _ = cancel.cancelled() => return Ended::Stopped,
                idled = mailbox.idle(interval) => match idled {
                    Ok(mailbox) => mailbox,
                    Err(e) => {
                        tracing::warn!(bot = %ch.bot_id, error = %e, "email IMAP IDLE failed; logging in again");
                        return failed(backoff, Duration::from_secs(1));
                    }
                },
            };
            continue;
        }
        tokio::select! {
            _ = cancel.cancelled() => {
                mailbox.logout().await;
                return Ended::Stopped;
            }
            _ = tokio::time::sleep(interval) => {}
        }
        if let Err(e) = mailbox.noop().await {
            tracing::warn!(bot = %ch.bot_id, error = %e, "email IMAP connection lost; logging in again");
            return failed(backoff, Duration::from_secs(1));
        }
    }
}

/// Handles the unseen mail above `last`; false when the fence says another replica polls now.
async fn poll_once(
    ch: &EmailChannel,
    inbound: &Inbound,
    lease: &Lease,
    mailbox: &mut Mailbox,
    cursor_key: &str,
    last: &mut u32,
) -> anyhow::Result<bool> {
    let uids = mailbox.unseen_after(*last).await?;
    if !uids.is_empty() {
        tracing::debug!(bot = %ch.bot_id, count = uids.len(), "email poll found new mail");
    }
    for uid in uids {
        let handled = match mailbox.fetch(uid, ch.max_mail_bytes()).await? {
            Some(mail) => {
                let handled = receive::handle(ch, inbound, mailbox.validity, uid, &mail);
                match poison::guard(handled).await {
                    Ok(handled) => handled,
                    Err(Failure::Poison(why)) => {
                        tracing::error!(bot = %ch.bot_id, uid, error = %why, "mail cannot be handled; skipped");
                        Handled::SkippedUnseen
                    }
                    Err(Failure::Retry(e)) => return Err(e),
                }
            }
            None => Handled::SkippedUnseen,
        };
        if handled != Handled::SkippedUnseen && ch.cfg.mark_seen {
            mailbox.mark_seen(uid).await?;
        }
        let cursor = format!("{}:{uid}", mailbox.validity);
        if !lease.fence().set(&ch.redis, cursor_key, &cursor).await? {
            tracing::warn!(bot = %ch.bot_id, "email poller lease taken over; stopping");
            return Ok(false);
        }
        *last = uid;
    }
    Ok(true)
}

/// Returns the last processed UID of the mailbox: 0 when there is no cursor yet (every unseen
/// mail is read); when the mailbox's UIDVALIDITY changed, the mailbox's highest UID, written as
/// the new cursor under the lease's fence (only mail arriving after it is read).
async fn read_cursor(
    ch: &EmailChannel,
    lease: &Lease,
    key: &str,
    mailbox: &mut Mailbox,
) -> anyhow::Result<u32> {
    let mut conn = ch.redis.clone();
    let cursor: Option<String> = conn.get(key).await?;
    let Some(cursor) = cursor else { return Ok(0) };
    let parsed = cursor
        .split_once(':')
        .and_then(|(v, uid)| Some((v.parse::<u32>().ok()?, uid.parse::<u32>().ok()?)));
    if let Some((v, uid)) = parsed
        && v == mailbox.validity
    {
        return Ok(uid);
    }
    let highest = mailbox.highest_uid().await?;
    let reset = format!("{}:{highest}", mailbox.validity);
    if !lease.fence().set(&ch.redis, key, &reset).await? {
        anyhow::bail!("the email poller lease was taken over");
    }
    tracing::warn!(bot = %ch.bot_id, mailbox_id = %ch.mailbox_id, old = %cursor, new = %reset, "email mailbox UIDVALIDITY changed; mail already in it is left alone, mail arriving from now on is answered");
    Ok(highest)
}

fn failed(backoff: &mut Duration, at_least: Duration) -> Ended {
    let delay = (*backoff).max(at_least);
    *backoff = (*backoff * 2).min(MAX_BACKOFF);
    Ended::Failed(delay)
}

async fn wait(cancel: &CancellationToken, delay: Duration) {
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = tokio::time::sleep(delay) => {}
    }
}

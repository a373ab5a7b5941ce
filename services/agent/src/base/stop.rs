//! `/stop` across runners. Every running turn registers its cancellation token under its
//! session's stop subject (`subjects::stop(bot, session)`); every runner subscribes to
//! `subjects::STOP_ALL` and cancels the matching local turns, answering with how many it
//! cancelled. `/stop` publishes on the session's subject and sums the answers.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use tokio_util::sync::CancellationToken;

use nanobot_proto::subjects;

/// How long `/stop` collects answers from runners.
const STOP_WINDOW: Duration = Duration::from_millis(400);

/// Turns running on this runner, by stop subject.
#[derive(Debug, Default)]
pub struct ActiveTurns {
    next: AtomicU64,
    turns: Mutex<HashMap<String, Vec<(u64, CancellationToken)>>>,
}

/// Unregisters a turn when dropped.
#[derive(Debug)]
pub struct Registration<'a> {
    active: &'a ActiveTurns,
    subject: String,
    id: u64,
    /// Cancelled by `/stop`.
    pub token: CancellationToken,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut turns = self.active.turns.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(list) = turns.get_mut(&self.subject) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                turns.remove(&self.subject);
            }
        }
    }
}

impl ActiveTurns {
    /// Registers a turn of `session_key` of `bot`.
    pub fn register(&self, bot: &str, session_key: &str) -> Registration<'_> {
        let subject = subjects::stop(bot, session_key);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let token = CancellationToken::new();
        self.turns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(subject.clone())
            .or_default()
            .push((id, token.clone()));
        Registration {
            active: self,
            subject,
            id,
            token,
        }
    }

    /// Cancels the local turns registered under `subject`; returns how many.
    pub fn cancel(&self, subject: &str) -> usize {
        let turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
        let list = turns.get(subject).map(Vec::as_slice).unwrap_or(&[]);
        let live: Vec<_> = list.iter().filter(|(_, t)| !t.is_cancelled()).collect();
        live.iter().for_each(|(_, t)| t.cancel());
        live.len()
    }

    /// Turns of `session_key` of `bot` running here.
    pub fn count(&self, bot: &str, session_key: &str) -> usize {
        let turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
        turns
            .get(&subjects::stop(bot, session_key))
            .map_or(0, Vec::len)
    }

    /// Turns running here.
    pub fn len(&self) -> usize {
        let turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
        turns.values().map(Vec::len).sum()
    }

    /// Whether no turn runs here.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Answers stop requests (on `subject`: [`subjects::STOP_ALL`], or its bot's part for a runner
/// run with `--bot`) for local turns until `cancel` fires.
pub async fn serve(
    client: async_nats::Client,
    subject: String,
    active: std::sync::Arc<ActiveTurns>,
    cancel: CancellationToken,
) {
    let mut sub = match client.subscribe(subject).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("failed to subscribe to stop requests: {e}");
            return;
        }
    };
    loop {
        let msg = tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            m = sub.next() => match m { Some(m) => m, None => break },
        };
        let n = active.cancel(msg.subject.as_str());
        if n > 0 {
            tracing::info!(subject = %msg.subject, cancelled = n, "stopped turns");
            if let Some(reply) = msg.reply {
                let _ = client.publish(reply, n.to_string().into()).await;
            }
        }
    }
}

/// Asks every runner to stop the turns of `session_key`; returns how many stopped.
pub async fn stop_everywhere(
    client: &async_nats::Client,
    bot: &str,
    session_key: &str,
) -> anyhow::Result<usize> {
    let inbox = client.new_inbox();
    let mut answers = client.subscribe(inbox.clone()).await?;
    client
        .publish_with_reply(subjects::stop(bot, session_key), inbox, bytes::Bytes::new())
        .await?;
    client.flush().await?;
    let mut total = 0;
    let deadline = tokio::time::sleep(STOP_WINDOW);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => break,
            m = answers.next() => match m {
                Some(m) => total += std::str::from_utf8(&m.payload).ok().and_then(|s| s.parse::<usize>().ok()).unwrap_or(0),
                None => break,
            },
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_turns_are_cancelled_by_subject_and_forgotten_when_done() {
        let active = ActiveTurns::default();
        let a = active.register("b", "cli:a");
        let other = active.register("b", "cli:other");
        assert_eq!(active.len(), 2);
        assert_eq!(active.cancel(&subjects::stop("b", "cli:a")), 1);
        assert!(a.token.is_cancelled());
        assert!(!other.token.is_cancelled());
        assert_eq!(
            active.cancel(&subjects::stop("b", "cli:a")),
            0,
            "already cancelled"
        );
        drop(a);
        assert_eq!(active.len(), 1);
    }
}

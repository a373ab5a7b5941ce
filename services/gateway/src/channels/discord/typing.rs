//! The typing indicator: `POST /channels/{id}/typing` every 8 s (Discord shows it for about
//! 10 s; upstream's interval) from receipt until the channel's final reply is seen, or a cap
//! passes for a reply that never comes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use twilight_model::id::Id;
use twilight_model::id::marker::ChannelMarker;

/// Upstream's `TYPING_INTERVAL_S`.
const EVERY: Duration = Duration::from_secs(8);
/// Longest a typing indicator runs without a reply.
const CAP: Duration = Duration::from_secs(300);

/// Running typing indicators of one bot, by channel id.
#[derive(Debug, Default, Clone)]
pub(super) struct Typing {
    chats: Arc<Mutex<HashMap<u64, CancellationToken>>>,
}

impl Typing {
    /// Starts (or keeps) the indicator of `channel`.
    pub(super) fn start(&self, http: &Arc<twilight_http::Client>, channel: Id<ChannelMarker>) {
        let chat = channel.get();
        let token = CancellationToken::new();
        {
            let mut chats = self.chats.lock().unwrap_or_else(PoisonError::into_inner);
            if chats.get(&chat).is_some_and(|t| !t.is_cancelled()) {
                return;
            }
            chats.insert(chat, token.clone());
        }
        let http = http.clone();
        let chats = self.chats.clone();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + CAP;
            let mut tick = tokio::time::interval(EVERY);
            loop {
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = tick.tick() => {
                        // A missed indicator is cosmetic.
                        if let Err(e) = http.create_typing_trigger(channel).await {
                            tracing::debug!(chat, error = %e, "discord typing trigger failed");
                        }
                    }
                }
            }
            token.cancel();
            let mut chats = chats.lock().unwrap_or_else(PoisonError::into_inner);
            if chats
                .get(&chat)
                .is_some_and(CancellationToken::is_cancelled)
            {
                chats.remove(&chat);
            }
        });
    }

    /// Stops the indicator of `chat`.
    pub(super) fn stop(&self, chat: u64) {
        let chats = self.chats.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(token) = chats.get(&chat) {
            token.cancel();
        }
    }
}

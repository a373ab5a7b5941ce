//! The typing indicator: `POST /channels/{id}/typing` every 8 s (Discord shows it for about
//! 10 s; upstream's interval) from receipt until the channel's final reply is seen, or a cap
//! passes for a reply that never comes ([`crate::channels::typing`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use twilight_http::request::channel::reaction::RequestReactionType;
use twilight_model::id::Id;
use twilight_model::id::marker::{ChannelMarker, MessageMarker};

use super::DiscordChannel;

/// Upstream's `TYPING_INTERVAL_S`.
const EVERY: Duration = Duration::from_secs(8);

/// Running typing indicators of one bot, by channel id.
#[derive(Debug, Clone)]
pub(super) struct Typing(crate::channels::typing::Typing<u64>);

impl Default for Typing {
    fn default() -> Self {
        Self(crate::channels::typing::Typing::new(EVERY))
    }
}

impl Typing {
    /// Starts (or keeps) the indicator of `channel`.
    pub(super) fn start(&self, http: &Arc<twilight_http::Client>, channel: Id<ChannelMarker>) {
        let chat = channel.get();
        let http = http.clone();
        self.0.start(chat, move || {
            let http = http.clone();
            async move {
                // A missed indicator is cosmetic.
                if let Err(e) = http.create_typing_trigger(channel).await {
                    tracing::debug!(chat, error = %e, "discord typing trigger failed");
                }
            }
        });
    }

    /// Stops the indicator of `chat`.
    pub(super) fn stop(&self, chat: u64) {
        self.0.stop(chat);
    }
}

/// Upstream's working indicator: `workingEmoji` added to the user's message
/// `workingEmojiDelay` after receipt unless the final reply came first (the reply removes it
/// with the read receipt). Pending timers by channel id; a gateway that dies forgets them.
#[derive(Debug, Default)]
pub(super) struct Working(Mutex<HashMap<u64, CancellationToken>>);

impl Working {
    /// Schedules the working reaction on `message` of `channel`.
    pub(super) fn start(
        &self,
        ch: &DiscordChannel,
        channel: Id<ChannelMarker>,
        message: Id<MessageMarker>,
    ) {
        if ch.cfg.working_emoji.is_empty() {
            return;
        }
        let token = CancellationToken::new();
        let replaced = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(channel.get(), token.clone());
        if let Some(old) = replaced {
            old.cancel();
        }
        let delay = Duration::from_secs_f64(ch.cfg.working_emoji_delay);
        let (http, emoji) = (ch.http.clone(), ch.cfg.working_emoji.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = token.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
            let reaction = RequestReactionType::Unicode { name: &emoji };
            // Cosmetic: a failure is only logged.
            if let Err(e) = http.create_reaction(channel, message, &reaction).await {
                tracing::debug!(chat = channel.get(), error = %e, "discord working reaction failed");
            }
        });
    }

    /// Cancels the pending working reaction of `chat` (its reply came).
    pub(super) fn stop(&self, chat: u64) {
        let token = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&chat);
        if let Some(token) = token {
            token.cancel();
        }
    }
}

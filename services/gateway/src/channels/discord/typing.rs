//! The typing indicator: `POST /channels/{id}/typing` every 8 s (Discord shows it for about
//! 10 s; upstream's interval) from receipt until the channel's final reply is seen, or a cap
//! passes for a reply that never comes ([`crate::channels::typing`]).

use std::sync::Arc;
use std::time::Duration;

use twilight_model::id::Id;
use twilight_model::id::marker::ChannelMarker;

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

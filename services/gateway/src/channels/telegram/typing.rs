//! The typing indicator: `sendChatAction(typing)` every 4 s from receipt until the chat's final
//! reply is seen (or a cap passes, for a reply that never comes; [`crate::channels::typing`]).

use std::time::Duration;

use teloxide::Bot;
use teloxide::payloads::SendChatActionSetters as _;
use teloxide::requests::Requester as _;
use teloxide::types::{ChatAction, ChatId, MessageId, ThreadId};

/// Telegram shows the action for about 5 s; upstream repeats it every 4 s.
const EVERY: Duration = Duration::from_secs(4);

/// Running typing indicators of one bot, by chat.
#[derive(Debug, Clone)]
pub(super) struct Typing(crate::channels::typing::Typing<i64>);

impl Default for Typing {
    fn default() -> Self {
        Self(crate::channels::typing::Typing::new(EVERY))
    }
}

impl Typing {
    /// Starts (or keeps) the indicator of `chat`.
    pub(super) fn start(&self, api: &Bot, chat: i64, thread: Option<i32>) {
        let api = api.clone();
        self.0.start(chat, move || {
            let mut action = api.send_chat_action(ChatId(chat), ChatAction::Typing);
            if let Some(t) = thread {
                action = action.message_thread_id(ThreadId(MessageId(t)));
            }
            async move {
                // A missed indicator is cosmetic; the error may carry the token, so it is not
                // logged.
                if action.await.is_err() {
                    tracing::debug!(chat, "typing action failed");
                }
            }
        });
    }

    /// Stops the indicator of `chat`.
    pub(super) fn stop(&self, chat: i64) {
        self.0.stop(chat);
    }
}

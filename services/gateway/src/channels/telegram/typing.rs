//! The typing indicator: `sendChatAction(typing)` every 4 s from receipt until the chat's final
//! reply is seen (or a cap passes, for a reply that never comes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use teloxide::Bot;
use teloxide::payloads::SendChatActionSetters as _;
use teloxide::requests::Requester as _;
use teloxide::types::{ChatAction, ChatId, MessageId, ThreadId};
use tokio_util::sync::CancellationToken;

/// Telegram shows the action for about 5 s; upstream repeats it every 4 s.
const EVERY: Duration = Duration::from_secs(4);
/// Longest a typing indicator runs without a reply.
const CAP: Duration = Duration::from_secs(300);

/// Running typing indicators of one bot, by chat.
#[derive(Debug, Default, Clone)]
pub(super) struct Typing {
    chats: Arc<Mutex<HashMap<i64, CancellationToken>>>,
}

impl Typing {
    /// Starts (or keeps) the indicator of `chat`.
    pub(super) fn start(&self, api: &Bot, chat: i64, thread: Option<i32>) {
        let token = CancellationToken::new();
        {
            let mut chats = self.chats.lock().unwrap_or_else(PoisonError::into_inner);
            if chats.get(&chat).is_some_and(|t| !t.is_cancelled()) {
                return;
            }
            chats.insert(chat, token.clone());
        }
        let api = api.clone();
        let chats = self.chats.clone();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + CAP;
            let mut tick = tokio::time::interval(EVERY);
            loop {
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = tick.tick() => {
                        let mut action = api.send_chat_action(ChatId(chat), ChatAction::Typing);
                        if let Some(t) = thread {
                            action = action.message_thread_id(ThreadId(MessageId(t)));
                        }
                        // A missed indicator is cosmetic; the error may carry the token, so
                        // it is not logged.
                        if action.await.is_err() {
                            tracing::debug!(chat, "typing action failed");
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
    pub(super) fn stop(&self, chat: i64) {
        let chats = self.chats.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(token) = chats.get(&chat) {
            token.cancel();
        }
    }
}

//! Typing indicators shared by the chat channels: one task per chat repeats the channel's
//! typing call every `every` from receipt until the chat's final reply is seen, or a cap passes
//! for a reply that never comes. A gateway that dies takes its indicators with it; the platform
//! lets them fade on its own.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Longest a typing indicator runs without a reply.
const CAP: Duration = Duration::from_secs(300);

/// Running typing indicators of one bot on one channel, by chat.
#[derive(Debug, Clone)]
pub(crate) struct Typing<K> {
    chats: Arc<Mutex<HashMap<K, CancellationToken>>>,
    every: Duration,
}

impl<K: Copy + Eq + Hash + Send + 'static> Typing<K> {
    /// Indicators repeated every `every` (a bit less than the platform shows one).
    pub(crate) fn new(every: Duration) -> Self {
        Self {
            chats: Arc::default(),
            every,
        }
    }

    /// Starts (or keeps) the indicator of `chat`; `send` makes one typing call (a failure is
    /// cosmetic and its own to report).
    pub(crate) fn start<F, Fut>(&self, chat: K, mut send: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let token = CancellationToken::new();
        {
            let mut chats = self.chats.lock().unwrap_or_else(PoisonError::into_inner);
            if chats.get(&chat).is_some_and(|t| !t.is_cancelled()) {
                return;
            }
            chats.insert(chat, token.clone());
        }
        let chats = self.chats.clone();
        let every = self.every;
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + CAP;
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = tick.tick() => send().await,
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
    pub(crate) fn stop(&self, chat: K) {
        let chats = self.chats.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(token) = chats.get(&chat) {
            token.cancel();
        }
    }
}

//! The connections of this replica by chat: where a log notification or a stream delta for a
//! chat is handed to every connection attached to it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::mpsc;

/// Events queued per connection before new ones are dropped (a stalled client loses deltas
/// only: log entries are read again on its next catch-up).
pub(super) const QUEUE: usize = 256;

/// What a connection is told.
#[derive(Debug)]
pub(super) enum Event {
    /// The chat's log has new entries: read them from the connection's cursor.
    Log(String),
    /// A frame to send as is if the connection is still attached to the chat (deltas).
    Frame {
        /// The chat.
        chat: String,
        /// The JSON frame.
        frame: String,
    },
}

/// Attached connections by chat id.
#[derive(Debug, Default)]
pub(super) struct Hub {
    chats: Mutex<HashMap<String, HashMap<u64, mpsc::Sender<Event>>>>,
    next: AtomicU64,
}

impl Hub {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, HashMap<u64, mpsc::Sender<Event>>>> {
        self.chats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Returns a new connection id.
    pub(super) fn connection(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Attaches connection `conn` to `chat`.
    pub(super) fn attach(&self, chat: &str, conn: u64, tx: &mpsc::Sender<Event>) {
        self.lock()
            .entry(chat.to_string())
            .or_default()
            .insert(conn, tx.clone());
    }

    /// Detaches connection `conn` from `chats`.
    pub(super) fn detach<'a>(&self, conn: u64, chats: impl Iterator<Item = &'a String>) {
        let mut all = self.lock();
        for chat in chats {
            if let Some(conns) = all.get_mut(chat) {
                conns.remove(&conn);
                if conns.is_empty() {
                    all.remove(chat);
                }
            }
        }
    }

    /// Tells the connections attached to `chat` to read its log.
    pub(super) fn log(&self, chat: &str) {
        self.each(chat, || Event::Log(chat.to_string()));
    }

    /// Sends `frame` to the connections attached to `chat`.
    pub(super) fn frame(&self, chat: &str, frame: String) {
        self.each(chat, || Event::Frame {
            chat: chat.to_string(),
            frame: frame.clone(),
        });
    }

    fn each(&self, chat: &str, event: impl Fn() -> Event) {
        let all = self.lock();
        let Some(conns) = all.get(chat) else { return };
        for tx in conns.values() {
            // Full: the connection catches up from the log on its next tick.
            let _ = tx.try_send(event());
        }
    }
}

//! Requests of this replica that wait for replies, by inbound message id.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::mpsc;

use nanobot_proto::OutboundMessage;

/// The requests of this replica waiting for replies, by inbound message id. Replies for ids
/// not registered here belong to another replica (or to a request already gone) and are
/// ignored.
#[derive(Debug, Default)]
pub struct Pending {
    waiters: Mutex<HashMap<String, mpsc::UnboundedSender<OutboundMessage>>>,
}

impl Pending {
    /// Registers `inbound_id` and returns the receiving end of its replies. Register before
    /// publishing the inbound message, so no reply can arrive unclaimed.
    pub fn register(self: &Arc<Self>, inbound_id: &str) -> Waiter {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().insert(inbound_id.to_string(), tx);
        Waiter {
            id: inbound_id.to_string(),
            pending: self.clone(),
            rx,
        }
    }

    /// Hands `msg` to the request it answers; returns whether one was waiting here.
    /// A final reply also goes to the requests whose messages were injected into its turn
    /// (listed in `answers`).
    pub fn route(&self, msg: OutboundMessage) -> bool {
        let waiters = self.lock();
        let mut routed = false;
        for id in msg.answers.iter().filter(|id| **id != msg.reply_to) {
            if let Some(tx) = waiters.get(id) {
                routed |= tx.send(msg.clone()).is_ok();
            }
        }
        if let Some(tx) = waiters.get(&msg.reply_to) {
            routed |= tx.send(msg).is_ok();
        }
        routed
    }

    /// Returns whether a request of this replica waits for `msg`.
    pub fn waits_for(&self, msg: &OutboundMessage) -> bool {
        let waiters = self.lock();
        waiters.contains_key(&msg.reply_to) || msg.answers.iter().any(|id| waiters.contains_key(id))
    }

    /// Returns the number of requests waiting.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Returns whether no request waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, mpsc::UnboundedSender<OutboundMessage>>> {
        // The map stays consistent even if a holder panicked: every operation is one call.
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The replies of one inbound message; unregisters itself on drop.
#[derive(Debug)]
pub struct Waiter {
    id: String,
    pending: Arc<Pending>,
    rx: mpsc::UnboundedReceiver<OutboundMessage>,
}

impl Waiter {
    /// Returns the inbound message id this waiter answers.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Returns the next reply (`None` only if the registration vanished).
    pub async fn recv(&mut self) -> Option<OutboundMessage> {
        self.rx.recv().await
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.pending.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(to: &str, content: &str) -> OutboundMessage {
        OutboundMessage {
            reply_to: to.into(),
            content: content.into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn replies_reach_their_waiter_and_others_are_ignored() {
        let pending = Arc::new(Pending::default());
        let mut a = pending.register("a");
        let mut b = pending.register("b");
        assert!(pending.route(reply("b", "for b")));
        assert!(pending.route(reply("a", "for a")));
        assert!(!pending.route(reply("elsewhere", "not ours")));
        assert_eq!(a.recv().await.unwrap().content, "for a");
        assert_eq!(b.recv().await.unwrap().content, "for b");
        assert_eq!(a.id(), "a");
    }

    #[test]
    fn dropping_a_waiter_unregisters_it() {
        let pending = Arc::new(Pending::default());
        let waiter = pending.register("x");
        assert_eq!(pending.len(), 1);
        drop(waiter);
        assert!(pending.is_empty());
        assert!(!pending.route(reply("x", "late")));
    }
}

//! One API request per session at a time on this replica, as upstream's per-session lock: a
//! second request for a busy session waits instead of being injected into the running turn
//! (where its reply would go to the first request).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::OwnedMutexGuard;

type Slots = HashMap<String, Arc<tokio::sync::Mutex<()>>>;

/// Per-session locks; entries disappear when nobody holds or waits for them.
#[derive(Debug, Default)]
pub(crate) struct SessionLocks {
    slots: Mutex<Slots>,
}

impl SessionLocks {
    /// Waits until `key` is free and holds it until the guard drops.
    pub(crate) async fn acquire(self: &Arc<Self>, key: &str) -> SessionGuard {
        let slot = self.slots().entry(key.to_string()).or_default().clone();
        let guard = slot.lock_owned().await;
        SessionGuard {
            key: key.to_string(),
            locks: self.clone(),
            guard: Some(guard),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots().len()
    }

    fn slots(&self) -> MutexGuard<'_, Slots> {
        // Every operation on the map is a single call, so a poisoned map is still consistent.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Holds one session's lock.
#[derive(Debug)]
pub(crate) struct SessionGuard {
    key: String,
    locks: Arc<SessionLocks>,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        let mut slots = self.locks.slots();
        // Release first; then the map's reference is the last one unless someone waits (a
        // waiter clones the slot under the map lock, which is held here).
        self.guard.take();
        if slots
            .get(&self.key)
            .is_some_and(|slot| Arc::strong_count(slot) == 1)
        {
            slots.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn second_holder_waits_for_the_first_and_entries_are_cleaned_up() {
        let locks = Arc::new(SessionLocks::default());
        let first = locks.acquire("api:a").await;
        let other = locks.acquire("api:b").await;
        let waiting = {
            let locks = locks.clone();
            tokio::spawn(async move { locks.acquire("api:a").await })
        };
        let blocked = tokio::time::timeout(Duration::from_millis(100), async {
            while !waiting.is_finished() {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(
            blocked.is_err(),
            "second acquire must wait while the first holds the session"
        );
        drop(first);
        let second = waiting.await.unwrap();
        assert_eq!(locks.len(), 2);
        drop(second);
        drop(other);
        assert_eq!(locks.len(), 0);
    }
}

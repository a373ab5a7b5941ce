//! One reply subscription for every tool call of a runner: calls get a reply subject under
//! this subscription's wildcard (`<inbox>.<n>`) instead of subscribing and unsubscribing an
//! inbox of their own, which saved a round trip to the server per call. Replies are routed
//! to the waiting call by the subject's last token.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use futures::StreamExt as _;
use tokio::sync::mpsc;

/// The shared reply subscription of a NATS client (cheap to clone).
#[derive(Debug, Clone)]
pub struct Replies {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: async_nats::Client,
    prefix: String,
    next: AtomicU64,
    state: Mutex<State>,
    /// Serialises (re)subscribing so two first calls do not both subscribe.
    subscribing: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct State {
    routes: HashMap<u64, mpsc::UnboundedSender<async_nats::Message>>,
    subscribed: bool,
}

/// The reply subject of one call and its messages; unrouted when dropped.
#[derive(Debug)]
pub struct Route {
    /// The reply subject to publish the request with.
    pub inbox: String,
    /// The replies to this call, in arrival order.
    pub messages: mpsc::UnboundedReceiver<async_nats::Message>,
    id: u64,
    inner: Arc<Inner>,
}

impl Drop for Route {
    fn drop(&mut self) {
        if let Ok(mut state) = self.inner.state.lock() {
            state.routes.remove(&self.id);
        }
    }
}

impl Replies {
    /// Returns the reply multiplexer of `client`; it subscribes on first use.
    pub fn new(client: async_nats::Client) -> Self {
        let prefix = client.new_inbox();
        Self {
            inner: Arc::new(Inner {
                client,
                prefix,
                next: AtomicU64::new(1),
                state: Mutex::new(State::default()),
                subscribing: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// Returns a fresh reply subject routed to the returned receiver.
    pub async fn open(&self) -> Result<Route, async_nats::SubscribeError> {
        self.ensure_subscribed().await?;
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut state) = self.inner.state.lock() {
            state.routes.insert(id, tx);
        }
        Ok(Route {
            inbox: format!("{}.{id}", self.inner.prefix),
            messages: rx,
            id,
            inner: self.inner.clone(),
        })
    }

    fn is_subscribed(&self) -> bool {
        self.inner.state.lock().is_ok_and(|s| s.subscribed)
    }

    async fn ensure_subscribed(&self) -> Result<(), async_nats::SubscribeError> {
        if self.is_subscribed() {
            return Ok(());
        }
        let _one = self.inner.subscribing.lock().await;
        if self.is_subscribed() {
            return Ok(());
        }
        let subscription = self
            .inner
            .client
            .subscribe(format!("{}.*", self.inner.prefix))
            .await?;
        if let Ok(mut state) = self.inner.state.lock() {
            state.subscribed = true;
        }
        tokio::spawn(route(Arc::downgrade(&self.inner), subscription));
        Ok(())
    }
}

/// Hands every reply to the call waiting for it, until the subscription ends or the
/// multiplexer is dropped.
async fn route(inner: Weak<Inner>, mut subscription: async_nats::Subscriber) {
    while let Some(msg) = subscription.next().await {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let id = msg
            .subject
            .rsplit('.')
            .next()
            .and_then(|t| t.parse::<u64>().ok());
        let Some(id) = id else {
            continue;
        };
        let tx = inner
            .state
            .lock()
            .ok()
            .and_then(|s| s.routes.get(&id).cloned());
        if let Some(tx) = tx {
            let _ = tx.send(msg);
        }
    }
    if let Some(inner) = inner.upgrade()
        && let Ok(mut state) = inner.state.lock()
    {
        state.subscribed = false;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use nanobot_runtime::testsuite::Nats;

    use super::*;

    /// Returns the subscriptions the server holds for the connection named `name`.
    async fn subscriptions_of(nats: &Nats, name: &str) -> Vec<String> {
        let url = format!("{}/connz?subs=1", nats.monitor_url());
        let body: serde_json::Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
        body["connections"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["name"] == name)
            .flat_map(|c| {
                c["subscriptions_list"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|s| s.as_str().map(String::from))
            .collect()
    }

    #[tokio::test]
    async fn every_call_gets_its_own_replies_over_one_subscription() {
        let nats = Nats::start().await.unwrap();
        let runner = async_nats::ConnectOptions::new()
            .name("runner")
            .connect(nats.url())
            .await
            .unwrap();
        let executor = nats.client().await.unwrap();
        let replies = Replies::new(runner.clone());
        let mut routes = Vec::new();
        for _ in 0..20 {
            routes.push(replies.open().await.unwrap());
        }
        let inboxes: std::collections::HashSet<&str> =
            routes.iter().map(|r| r.inbox.as_str()).collect();
        assert_eq!(inboxes.len(), 20, "distinct reply subjects");
        // The subscription is in place on the server before another connection answers (a
        // request published on the runner's own connection after subscribing always is).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while subscriptions_of(&nats, "runner").await.is_empty() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "runner never subscribed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Answer in reverse order, twice each (an ACCEPTED and a FINAL, say).
        for (i, route) in routes.iter().enumerate().rev() {
            for n in 0..2 {
                executor
                    .publish(route.inbox.clone(), format!("{i}:{n}").into())
                    .await
                    .unwrap();
            }
        }
        executor.flush().await.unwrap();
        for (i, route) in routes.iter_mut().enumerate() {
            for n in 0..2 {
                let msg = tokio::time::timeout(Duration::from_secs(5), route.messages.recv())
                    .await
                    .expect("reply routed")
                    .unwrap();
                assert_eq!(msg.payload, format!("{i}:{n}").as_bytes());
            }
        }
        runner.flush().await.unwrap();
        let subs = subscriptions_of(&nats, "runner").await;
        assert_eq!(
            subs.len(),
            1,
            "one wildcard subscription for 20 calls: {subs:?}"
        );
        assert!(subs[0].ends_with(".*"), "{subs:?}");

        // A dropped route gets nothing and leaves the others working.
        let dropped = routes.remove(0).inbox.clone();
        executor.publish(dropped, "late".into()).await.unwrap();
        executor
            .publish(routes[0].inbox.clone(), "still here".into())
            .await
            .unwrap();
        let msg = tokio::time::timeout(Duration::from_secs(5), routes[0].messages.recv())
            .await
            .expect("reply routed")
            .unwrap();
        assert_eq!(msg.payload, "still here".as_bytes());
        assert_eq!(
            replies.inner.state.lock().unwrap().routes.len(),
            19,
            "the dropped route is gone"
        );
    }
}

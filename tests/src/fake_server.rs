//! What the platform fakes (DingTalk, Discord, OneBot, QQ, WeCom) share: a loopback listener
//! served by axum until the last clone of the fake drops ([`bind`], [`Listener::serve`]), and the
//! fake's state behind one lock with a change counter that waiting re-checks on ([`Watched`]).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use tokio::sync::watch;

/// A bound loopback port, not yet served.
#[derive(Debug)]
pub struct Listener {
    listener: tokio::net::TcpListener,
    name: &'static str,
    /// The address the fake answers on.
    pub addr: SocketAddr,
}

/// Binds a free port of 127.0.0.1 for the fake `name` (named in errors and the log).
pub async fn bind(name: &'static str) -> anyhow::Result<Listener> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .with_context(|| format!("bind {name}"))?;
    let addr = listener
        .local_addr()
        .with_context(|| format!("{name} address"))?;
    Ok(Listener {
        listener,
        name,
        addr,
    })
}

impl Listener {
    /// Serves `app` until the returned task (shared by the fake's clones) drops.
    pub fn serve(self, app: Router) -> Arc<ServerTask> {
        let name = self.name;
        Self::spawn(name, async move { axum::serve(self.listener, app).await })
    }

    /// Like [`Listener::serve`], with each request's peer address (`ConnectInfo<SocketAddr>`).
    pub fn serve_with_peers(self, app: Router) -> Arc<ServerTask> {
        let name = self.name;
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        Self::spawn(
            name,
            async move { axum::serve(self.listener, service).await },
        )
    }

    fn spawn(
        name: &'static str,
        serve: impl Future<Output = std::io::Result<()>> + Send + 'static,
    ) -> Arc<ServerTask> {
        Arc::new(ServerTask(tokio::spawn(async move {
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, fake = name, "fake server stopped");
            }
        })))
    }
}

/// The serving task; dropping it stops the server.
#[derive(Debug)]
pub struct ServerTask(tokio::task::JoinHandle<()>);

impl Drop for ServerTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A fake's state behind one lock; every change through [`Watched::with`] wakes the waiters.
#[derive(Debug)]
pub struct Watched<T> {
    inner: Mutex<T>,
    changed: watch::Sender<u64>,
}

impl<T: Default> Default for Watched<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

impl<T> Watched<T> {
    /// Starts from `state`.
    pub fn new(state: T) -> Self {
        Self {
            inner: Mutex::new(state),
            changed: watch::channel(0).0,
        }
    }

    /// Changes the state and wakes the waiters.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let out = f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner));
        self.changed.send_modify(|n| *n += 1);
        out
    }

    /// Reads the state.
    pub fn peek<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A receiver that sees every later change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Re-checks `check` after every change until it returns `Some`; `None` after `timeout`.
    pub async fn wait<R>(&self, timeout: Duration, check: impl FnMut() -> Option<R>) -> Option<R> {
        crate::harness::wait_for_change(&self.changed, timeout, check).await
    }
}

//! Real processes for tests and benchmarks (feature `testsuite`), each killed when its
//! handle drops: `nats-server` with JetStream, `redis-server` with AOF, and the fleet's own
//! binaries with their output captured to a log. The one harness every test binary and the
//! benchmarks use; the end-to-end fleet
//! wiring lives in the `nanobot-tests` crate (`harness::Fleet`).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use nanobot_runtime::testsuite::{Nats, Redis};
//! let (nats, redis) = tokio::try_join!(Nats::start(), Redis::start())?;
//! let client = nats.client().await?;
//! # Ok(()) }
//! ```

mod clusters;
mod sentinel;
mod servers;
mod service;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

pub use clusters::{
    NatsCluster, RedisCluster, redis_primaries, wait_cluster_formed, wait_redis_cluster_healthy,
};
pub use sentinel::{RedisSentinel, SENTINEL_MASTER};
pub use servers::{Nats, Redis};
pub use service::{ServiceProc, bin_path};

/// How often [`wait_until`] re-checks its condition.
const POLL: Duration = Duration::from_millis(25);

/// Returns a TCP port on 127.0.0.1 that was free a moment ago and that this process has not
/// handed out before (the kernel may offer a just-released port again, and two ports picked
/// one after the other for one fleet must differ). A suite that opens many short connections
/// can briefly use up the ephemeral range (`EADDRINUSE` even for port 0, while closed
/// connections wait out TIME_WAIT): the bind is retried for a few seconds then.
pub fn free_port() -> anyhow::Result<u16> {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    const ATTEMPTS: u32 = 100;
    let mut attempt = 0;
    loop {
        match std::net::TcpListener::bind(("127.0.0.1", 0)) {
            Ok(listener) => {
                let port = listener.local_addr().context("read the free port")?.port();
                let mut taken = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
                if taken.insert(port) {
                    return Ok(port);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && attempt < ATTEMPTS => {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e).context("bind a free port"),
        }
    }
}

/// Polls `check` until it returns true; fails after `timeout`.
pub async fn wait_until<F, Fut>(mut check: F, timeout: Duration) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("condition not met within {timeout:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Finds an infrastructure binary (`nats-server`, `redis-server`): the `env_var` override,
/// then `$NANOBOT_CACHE_DIR/bin` (default `$HOME/.cache/nanobot/bin`), then `PATH`.
pub fn find_server_binary(name: &str, env_var: &str) -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os(env_var) {
        let path = PathBuf::from(path);
        anyhow::ensure!(path.is_file(), "{env_var}={} is not a file", path.display());
        return Ok(path);
    }
    let cache = std::env::var_os("NANOBOT_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/nanobot"))
        });
    let mut candidates: Vec<PathBuf> = cache
        .into_iter()
        .map(|c| c.join("bin").join(name))
        .collect();
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|dir| dir.join(name)));
    }
    for candidate in candidates {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    anyhow::bail!("{name} not found: run `scripts/deps.sh` (or `make deps`) to install {name}")
}

/// Connects to the Redis at `url` (any `store.url` form: one node, a cluster, Sentinel) as the
/// roles do, giving up after the servers' ready timeout.
pub async fn connect_store(url: &str) -> anyhow::Result<crate::store::Store> {
    let cfg = crate::config::StoreConfig {
        url: url.to_string(),
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    let connect = crate::store::connect(&cfg, &cancel);
    tokio::time::timeout(servers::READY_TIMEOUT, connect)
        .await
        .with_context(|| format!("connect to {url}"))?
        .with_context(|| format!("connect to {url}"))
}

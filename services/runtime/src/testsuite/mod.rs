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
/// handed out before. Ports come from below the kernel's ephemeral range
/// (`ip_local_port_range`), where no `bind(0)` and no outgoing connection, of this process or
/// another test process, can take the port before the server it is meant for binds it; a
/// port picked inside that range was seen taken by a fake's listener in between.
pub fn free_port() -> anyhow::Result<u16> {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    const LOWEST: u32 = 10_000;
    let below = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    anyhow::ensure!(
        below > LOWEST + 1_000,
        "ephemeral range starts too low: {below}"
    );
    let span = below - LOWEST;
    // Spread the processes of one suite apart: pid and clock pick the starting point.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut next = (std::process::id().wrapping_mul(7_919) ^ nanos) % span;
    for _ in 0..span {
        next = (next + 7_919) % span;
        let port = u16::try_from(LOWEST + next).context("port in range")?;
        let mut taken = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if taken.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            taken.insert(port);
            return Ok(port);
        }
    }
    anyhow::bail!("no free port between {LOWEST} and {below}")
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

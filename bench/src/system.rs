//! A running system under test (the fleet or upstream nanobot) and what is sampled from it:
//! memory and CPU time of each of its processes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::procinfo::{self, Memory};
use crate::servers::{Member, Startup};

/// How long a process gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Which system a figure belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// nanobot-fleet: gateway, agent(s), tools, memory, cron, NATS, Redis.
    Fleet,
    /// Upstream nanobot's `nanobot serve`, one Python process.
    Upstream,
}

impl Kind {
    /// Returns the lowercase label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Fleet => "fleet",
            Self::Upstream => "upstream",
        }
    }
}

/// A started system; every process stops when it drops.
#[derive(Debug)]
pub struct Running {
    /// Which system this is.
    pub kind: Kind,
    /// The HTTP API root, `http://127.0.0.1:PORT`.
    pub api_base: String,
    /// Every process, in start order (infrastructure and the mock LLM included).
    pub members: Vec<Member>,
    /// The bot workspace.
    pub workspace: PathBuf,
    /// NATS client URL (fleet only).
    pub nats_url: Option<String>,
    /// Redis URL (fleet only).
    pub redis_url: Option<String>,
    /// NATS and Redis clusters the fleet runs on instead of single servers (stopped on drop).
    pub clusters: Option<Clusters>,
    /// Temporary directory holding config, data and the workspace.
    pub dir: tempfile::TempDir,
}

/// A 3-node NATS JetStream cluster and a 3-primary Redis Cluster with a replica each.
#[derive(Debug)]
pub struct Clusters {
    /// The NATS servers.
    pub nats: Vec<nanobot_tests::harness::Nats>,
    /// The Redis nodes.
    pub redis: Vec<nanobot_tests::harness::Redis>,
}

impl Clusters {
    /// Every node's name and pid.
    fn pids(&self) -> Vec<(String, u32)> {
        let nats = self
            .nats
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.pid().map(|p| (format!("nats-server#{}", i + 1), p)));
        let redis = self
            .redis
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.pid().map(|p| (format!("redis-server#{}", i + 1), p)));
        nats.chain(redis).collect()
    }
}

impl Running {
    /// Returns the start-up measurements of every process.
    pub fn startups(&self) -> Vec<Startup> {
        self.members.iter().map(|m| m.startup.clone()).collect()
    }

    /// Returns current memory by process name.
    pub fn memory(&self) -> BTreeMap<String, Memory> {
        let mut out = BTreeMap::new();
        for member in &self.members {
            if let Some(mem) = member.pid().and_then(procinfo::memory) {
                out.insert(member.name.clone(), mem);
            }
        }
        for (name, pid) in self.clusters.iter().flat_map(Clusters::pids) {
            if let Some(mem) = procinfo::memory(pid) {
                out.insert(name, mem);
            }
        }
        out
    }

    /// Returns consumed CPU seconds by process name.
    pub fn cpu(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for member in &self.members {
            if let Some(secs) = member.pid().and_then(procinfo::cpu_seconds) {
                out.insert(member.name.clone(), secs);
            }
        }
        for (name, pid) in self.clusters.iter().flat_map(Clusters::pids) {
            if let Some(secs) = procinfo::cpu_seconds(pid) {
                out.insert(name, secs);
            }
        }
        out
    }

    /// Returns Redis's `used_memory` (bytes, summed over a cluster's primaries) and the number
    /// of sessions of the `default` bot; `None` for upstream or when Redis does not answer.
    pub async fn redis_usage(&self) -> Option<(u64, u64)> {
        use redis::AsyncCommands as _;
        let url = self.redis_url.clone()?;
        let cfg = nanobot_runtime::config::StoreConfig { url };
        let cancel = tokio_util::sync::CancellationToken::new();
        let connect = nanobot_runtime::store::connect(&cfg, &cancel);
        let mut conn = tokio::time::timeout(std::time::Duration::from_secs(5), connect)
            .await
            .ok()?
            .ok()?;
        let sessions: u64 = conn
            .scard(nanobot_proto::keys::sessions("default"))
            .await
            .ok()?;
        let info: redis::InfoDict = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut conn)
            .await
            .ok()?;
        Some((info.get("used_memory")?, sessions))
    }

    /// Returns the workspace path.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// Stops every process: SIGTERM in reverse start order (services before their brokers),
    /// SIGKILL after a grace period.
    pub async fn stop(mut self) {
        while let Some(mut member) = self.members.pop() {
            // A process that already exited or ignores SIGTERM is killed on drop anyway.
            let _ = member.proc.stop(STOP_GRACE).await;
        }
    }
}

/// CPU seconds each process used between two [`Running::cpu`] samples.
pub fn cpu_delta(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (name, end) in after {
        let start = before.get(name).copied().unwrap_or(0.0);
        out.insert(name.clone(), (end - start).max(0.0));
    }
    out
}

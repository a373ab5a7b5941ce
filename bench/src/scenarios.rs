//! The scenarios, each run on a freshly started system (so no run inherits another's queue,
//! sessions or memory), fleet first and then upstream, interleaved scenario by scenario.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::fleet::{self, FleetOptions};
use crate::load::{self, LoadResult, LoadSpec};
use crate::opts::Sizes;
use crate::procinfo::Memory;
use crate::servers::{LlmMode, Startup};
use crate::system::{self, Kind, Running};
use crate::upstream::{self, UpstreamOptions};

/// Turns a client session sends before moving to a fresh session id.
const TURNS_PER_SESSION: usize = 10;
/// Settle time before idle memory is read.
const IDLE_SETTLE: Duration = Duration::from_secs(1);
/// `runner.maxConcurrentTurns` for the load scenarios: above any session count used, so the
/// runner's own limit is not what is measured.
const UNLIMITED_TURNS: u32 = 1024;

/// How a system is started for one scenario.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// How the mock LLM answers.
    pub llm: LlmMode,
    /// Agent replicas (fleet).
    pub agents: usize,
    /// `runner.maxConcurrentTurns` (fleet); 0 keeps the product's default.
    pub max_concurrent_turns: u32,
    /// Extra environment for `nanobot serve` (upstream).
    pub upstream_env: Vec<(String, String)>,
    /// Base URL of an LLM already running (the breakdown's probe) instead of the mock.
    pub llm_base: Option<String>,
    /// `RUST_LOG` level of the fleet's roles, instead of the suite's.
    pub log_level: Option<String>,
    /// The fleet runs on a NATS cluster and a Redis Cluster.
    pub clusters: bool,
    /// The fleet serves a Telegram bot against this Bot API (the fake).
    pub telegram_api: Option<String>,
    /// The fleet's `bots` section (see [`FleetOptions::bots`]).
    pub bots: Option<serde_json::Value>,
    /// Gateway replicas (fleet; 0 or 1: one).
    pub gateways: usize,
}

impl Setup {
    /// One runner without a turn limit, answered by `llm`.
    pub fn with_llm(llm: LlmMode) -> Self {
        Self {
            llm,
            agents: 1,
            max_concurrent_turns: UNLIMITED_TURNS,
            ..Self::default()
        }
    }
}

/// One load scenario's figures for one system.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioRun {
    /// What the load generator measured.
    pub load: LoadResult,
    /// CPU milliseconds per answered turn, by process (`load generator` is this process).
    pub cpu_ms_per_turn: BTreeMap<String, f64>,
    /// Peak resident memory (VmHWM) by process at the end of the scenario, in MiB.
    pub peak_mb: BTreeMap<String, f64>,
    /// Cores kept busy, on average, by processes outside this run (other work on the machine
    /// competing with it; the higher, the less the figures mean).
    pub foreign_cores: f64,
    /// Cores' worth of time stolen by the hypervisor, on average.
    pub steal_cores: f64,
    /// Redis memory per session the run created (fleet): growth of `used_memory` over the
    /// run divided by the sessions in the bot's index, in bytes (sessions of
    /// [`TURNS_PER_SESSION`] turns).
    pub redis_bytes_per_session: Option<f64>,
}

/// Everything collected across scenarios.
#[derive(Debug, Default)]
pub struct Suite {
    /// Run sizes.
    pub sizes: Option<Sizes>,
    /// The venv of the baseline, when it runs.
    pub upstream_venv: Option<PathBuf>,
    /// `RUST_LOG` level of the fleet's roles.
    pub fleet_log_level: String,
    /// Every start-up measured, by system.
    pub startups: BTreeMap<Kind, Vec<Startup>>,
    /// Memory of each process one second after its system's first start.
    pub idle: BTreeMap<Kind, BTreeMap<String, Memory>>,
    /// Highest VmHWM by process over all scenarios, with the scenario it happened in.
    pub peak: BTreeMap<Kind, BTreeMap<String, (f64, String)>>,
    /// Scenario and system failures; the run goes on without them.
    pub errors: Vec<String>,
}

impl Suite {
    /// Returns the systems this run compares.
    pub fn kinds(&self) -> Vec<Kind> {
        if self.upstream_venv.is_some() {
            vec![Kind::Fleet, Kind::Upstream]
        } else {
            vec![Kind::Fleet]
        }
    }

    /// Starts `kind` with `setup`, recording its start-up and (first time) idle memory.
    pub async fn start(&mut self, kind: Kind, setup: &Setup) -> anyhow::Result<Running> {
        let running = match kind {
            Kind::Fleet => {
                let opts = FleetOptions {
                    llm: setup.llm,
                    llm_base: setup.llm_base.clone(),
                    agents: setup.agents.max(1),
                    max_concurrent_turns: setup.max_concurrent_turns,
                    log_level: setup
                        .log_level
                        .clone()
                        .unwrap_or_else(|| self.fleet_log_level.clone()),
                    clusters: setup.clusters,
                    telegram_api: setup.telegram_api.clone(),
                    bots: setup.bots.clone(),
                    gateways: setup.gateways,
                };
                fleet::start(&opts).await?
            }
            Kind::Upstream => {
                let venv = self
                    .upstream_venv
                    .clone()
                    .ok_or_else(|| anyhow::anyhow!("the baseline is not installed"))?;
                let opts = UpstreamOptions {
                    venv,
                    llm: setup.llm,
                    llm_base: setup.llm_base.clone(),
                    env: setup.upstream_env.clone(),
                };
                upstream::start(&opts).await?
            }
        };
        self.startups
            .entry(kind)
            .or_default()
            .extend(running.startups());
        if let std::collections::btree_map::Entry::Vacant(idle) = self.idle.entry(kind) {
            tokio::time::sleep(IDLE_SETTLE).await;
            idle.insert(running.memory());
        }
        Ok(running)
    }

    /// Runs one load scenario on a fresh `kind` system; failures are recorded, not returned.
    pub async fn load(
        &mut self,
        scenario: &str,
        kind: Kind,
        setup: &Setup,
        spec: LoadSpec,
    ) -> Option<ScenarioRun> {
        match self.try_load(scenario, kind, setup, spec).await {
            Ok(run) => Some(run),
            Err(e) => {
                self.errors
                    .push(format!("{scenario} ({}): {e:#}", kind.label()));
                None
            }
        }
    }

    async fn try_load(
        &mut self,
        scenario: &str,
        kind: Kind,
        setup: &Setup,
        spec: LoadSpec,
    ) -> anyhow::Result<ScenarioRun> {
        eprintln!(
            "bench: {scenario} on {} (sessions {}, up to {} turns, window {:?})",
            kind.label(),
            spec.concurrency,
            spec.requests,
            spec.window
        );
        let running = self.start(kind, setup).await?;
        let redis_before = running.redis_usage().await;
        let me = std::process::id();
        let mut cpu_before = running.cpu();
        cpu_before.insert(
            LOADGEN.into(),
            crate::procinfo::cpu_seconds(me).unwrap_or(0.0),
        );
        let machine_before = crate::procinfo::machine_cpu_seconds().unwrap_or_default();
        let started = tokio::time::Instant::now();
        let result = load::run(&running.api_base, &spec).await;
        let wall = started.elapsed().as_secs_f64().max(1e-9);
        let machine_after = crate::procinfo::machine_cpu_seconds().unwrap_or_default();
        let mut cpu_after = running.cpu();
        cpu_after.insert(
            LOADGEN.into(),
            crate::procinfo::cpu_seconds(me).unwrap_or(0.0),
        );
        let memory = running.memory();
        let redis_bytes_per_session = match (redis_before, running.redis_usage().await) {
            (Some((before, _)), Some((after, sessions))) if sessions > 0 => {
                Some(after.saturating_sub(before) as f64 / sessions as f64)
            }
            _ => None,
        };
        running.stop().await;
        let result = result?;
        let turns = result.ok.max(1) as f64;
        let used = system::cpu_delta(&cpu_before, &cpu_after);
        let ours: f64 = used.values().sum();
        let busy = machine_after.0 - machine_before.0;
        let foreign_cores = ((busy - ours) / wall).max(0.0);
        let steal_cores = ((machine_after.1 - machine_before.1) / wall).max(0.0);
        let cpu_ms_per_turn = used
            .into_iter()
            .map(|(name, secs)| (name, secs * 1e3 / turns))
            .collect();
        let peaks = self.peak.entry(kind).or_default();
        let mut peak_mb = BTreeMap::new();
        for (name, mem) in memory {
            peak_mb.insert(name.clone(), mem.hwm_mb);
            let entry = peaks.entry(name).or_insert((0.0, String::new()));
            if mem.hwm_mb > entry.0 {
                *entry = (mem.hwm_mb, scenario.to_string());
            }
        }
        eprintln!(
            "bench:   {} ok, {} errors, {} unfinished, {:.1} turns/s, p50 {:.2} ms, p99 {:.2} ms; \
             other work on the machine: {foreign_cores:.2} cores, steal {steal_cores:.2}",
            result.ok,
            result.errors,
            result.unfinished,
            result.turns_per_s,
            result.latency.p50_ms,
            result.latency.p99_ms
        );
        Ok(ScenarioRun {
            load: result,
            cpu_ms_per_turn,
            peak_mb,
            foreign_cores,
            steal_cores,
            redis_bytes_per_session,
        })
    }
}

/// Process name of the load generator (this process) in CPU figures.
pub const LOADGEN: &str = "load generator";

/// Returns a load spec with the suite's defaults.
pub fn spec(
    name: &str,
    concurrency: usize,
    requests: usize,
    warmup: usize,
    window: Duration,
) -> LoadSpec {
    LoadSpec {
        concurrency,
        requests,
        warmup,
        window,
        turns_per_session: TURNS_PER_SESSION,
        session_prefix: format!("{name}-{}", std::process::id()),
    }
}

//! Command-line options and the run sizes of the full suite and the smoke variant.

use std::path::PathBuf;

/// Runs the benchmark suite: the fleet and upstream nanobot, same mock LLM, same machine.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "nanobot-bench", version)]
pub struct Options {
    /// Runs the seconds-long smoke variant (fleet only unless `--baseline` is given).
    #[arg(long)]
    pub smoke: bool,
    /// Runs the upstream baseline too (default: on for the full suite, off for smoke).
    #[arg(long)]
    pub baseline: Option<bool>,
    /// The venv holding upstream `nanobot-ai`.
    #[arg(long)]
    pub upstream_venv: Option<PathBuf>,
    /// Where the JSON results go (default `bench/results/latest.json`, smoke:
    /// `bench/results/smoke.json`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Runs only these scenarios (comma separated: latency, max, slow, tools, replicas, rtt,
    /// breakdown, clusters, history, telegram, runner, bots = scale + noisy); default all.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// `RUST_LOG` level of the fleet's roles.
    #[arg(long, default_value = "info")]
    pub fleet_log_level: String,
}

/// How big each scenario is.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// `full` or `smoke`.
    pub mode: &'static str,
    /// Turns measured at concurrency 1 (after `warmup`).
    pub latency_requests: usize,
    /// Unmeasured turns before each measured phase (at most this many).
    pub warmup: usize,
    /// Sessions of the maximum-throughput scenario (instant LLM).
    pub max_concurrency: usize,
    /// Sessions of the 200 ms LLM scenarios.
    pub llm_sessions: Vec<usize>,
    /// Tool-heavy turns measured at concurrency 1.
    pub tool_turns: usize,
    /// Tool round trips measured per variant.
    pub rtt_calls: usize,
    /// Agent replica counts of the scaling scenario.
    pub replicas: Vec<usize>,
    /// Sessions of the scaling scenario.
    pub replica_sessions: usize,
    /// `runner.maxConcurrentTurns` of each runner in the scaling scenario.
    pub replica_turns_per_runner: u32,
    /// Sessions of the one-runner scenario (200 ms LLM, [`crate::plan::ONE_RUNNER_TURNS`]).
    pub one_runner_sessions: usize,
    /// Turns of the per-hop breakdown (plain turns, then tool-heavy turns).
    pub breakdown_turns: usize,
    /// Chats of the Telegram throughput scenario (one update each).
    pub telegram_chats: usize,
    /// Telegram bots of the bots-at-scale scenario.
    pub scale_bots: usize,
    /// Gateway replica counts of the bots-at-scale scenario.
    pub scale_gateways: Vec<usize>,
    /// How long idle CPU is measured in the bots-at-scale scenario.
    pub idle_window: std::time::Duration,
    /// The noisy-next-to-quiet scenario.
    pub noisy: crate::noisy::NoisySizes,
    /// Wall-clock window of every load phase.
    pub window: std::time::Duration,
    /// Request cap of the throughput phases (the window usually ends them first).
    pub throughput_requests: usize,
}

impl Sizes {
    /// The full suite (`make bench`): a few minutes per system.
    pub fn full() -> Self {
        Self {
            mode: "full",
            latency_requests: 300,
            warmup: 20,
            max_concurrency: 64,
            llm_sessions: vec![10, 100, 500],
            tool_turns: 50,
            rtt_calls: 2000,
            replicas: vec![1, 2, 4],
            replica_sessions: 128,
            replica_turns_per_runner: 16,
            one_runner_sessions: 200,
            breakdown_turns: 100,
            telegram_chats: 1_000,
            scale_bots: 1_000,
            scale_gateways: vec![1, 2],
            idle_window: std::time::Duration::from_secs(10),
            noisy: crate::noisy::NoisySizes {
                quiet_messages: 60,
                quiet_interval: std::time::Duration::from_millis(250),
                senders: 20,
                per_sender: 30,
                per_minute: 20,
            },
            window: std::time::Duration::from_secs(15),
            throughput_requests: 100_000,
        }
    }

    /// The smoke variant (`make bench-smoke`): every scenario, tiny.
    pub fn smoke() -> Self {
        Self {
            mode: "smoke",
            latency_requests: 30,
            warmup: 5,
            max_concurrency: 16,
            llm_sessions: vec![10],
            tool_turns: 5,
            rtt_calls: 200,
            replicas: vec![1, 2],
            replica_sessions: 40,
            replica_turns_per_runner: 16,
            one_runner_sessions: 200,
            breakdown_turns: 10,
            telegram_chats: 1_000,
            scale_bots: 50,
            scale_gateways: vec![1, 2],
            idle_window: std::time::Duration::from_secs(3),
            noisy: crate::noisy::NoisySizes {
                quiet_messages: 20,
                quiet_interval: std::time::Duration::from_millis(250),
                senders: 10,
                per_sender: 15,
                per_minute: 10,
            },
            window: std::time::Duration::from_secs(2),
            throughput_requests: 100_000,
        }
    }
}

//! The order the scenarios run in and what each collects.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::breakdown::{self, Breakdown, Observers};
use crate::opts::Sizes;
use crate::probe::ProbeLlm;
use crate::scenarios::{ScenarioRun, Setup, Suite, spec};
use crate::servers::{LlmMode, TOOL_FILE};
use crate::stats::Summary;
use crate::system::Kind;
use crate::toolrtt::{self, ToolRtt};

/// Latency of the slow LLM, in milliseconds.
pub const SLOW_LLM_MS: u64 = 200;
/// The log level of the "how much does logging cost" variant.
const QUIET: &str = "warn";
/// `runner.maxConcurrentTurns` of the one-runner scenario: enough for its 200 waiting turns.
pub const ONE_RUNNER_TURNS: u32 = 256;
/// Sequential tool calls of the tool-heavy turn.
pub const TOOL_CALLS: u32 = 5;

/// Every figure of a run, by scenario and system.
#[derive(Debug, Default, Serialize)]
pub struct Figures {
    /// Turn latency, one session, instant LLM.
    pub latency_c1: BTreeMap<Kind, ScenarioRun>,
    /// Maximum turns/s, instant LLM.
    pub max_throughput: BTreeMap<Kind, ScenarioRun>,
    /// Maximum turns/s of the fleet with its roles logging at `warn` (the cost of logging).
    pub max_throughput_quiet: Option<ScenarioRun>,
    /// Maximum turns/s of the fleet on a 3-node NATS cluster and a 3-primary Redis Cluster.
    pub max_throughput_clusters: Option<ScenarioRun>,
    /// 200 ms LLM by concurrent sessions.
    pub slow_llm: BTreeMap<usize, BTreeMap<Kind, ScenarioRun>>,
    /// Five sequential tool calls per turn, one session.
    pub tool_heavy: BTreeMap<Kind, ScenarioRun>,
    /// 200 ms LLM, per-runner turn limit, by agent replicas (fleet).
    pub replicas: BTreeMap<usize, ScenarioRun>,
    /// 200 ms LLM, one runner with [`ONE_RUNNER_TURNS`] turns (fleet).
    pub one_runner: Option<ScenarioRun>,
    /// The same load on upstream's single process.
    pub replicas_upstream: Option<ScenarioRun>,
    /// Tool round trip.
    pub tool_rtt: ToolRtt,
    /// Per-hop breakdowns (plain and tool-heavy turns, each system).
    pub breakdown: Vec<Breakdown>,
    /// Turn cost against stored history, and the cost of archiving (fleet).
    pub history: Option<crate::history::HistoryFigures>,
    /// The Telegram channel against the Bot API fake (fleet).
    pub telegram: Option<crate::telegram::TelegramFigures>,
    /// Many Telegram bots on one fleet, by gateway replicas (fleet).
    pub bots_at_scale: Vec<crate::scale::ScaleRun>,
    /// A noisy bot at its limits next to a quiet one (fleet).
    pub noisy_neighbour: Option<crate::noisy::NoisyFigures>,
}

impl Figures {
    /// Returns every load scenario run with its scenario name and system.
    pub fn runs(&self) -> Vec<(String, Kind, &ScenarioRun)> {
        let mut out = Vec::new();
        for (kind, run) in &self.latency_c1 {
            out.push(("latency_c1".to_string(), *kind, run));
        }
        for (kind, run) in &self.max_throughput {
            out.push(("max_throughput".to_string(), *kind, run));
        }
        if let Some(run) = &self.max_throughput_quiet {
            out.push(("max_throughput_quiet".to_string(), Kind::Fleet, run));
        }
        if let Some(run) = &self.max_throughput_clusters {
            out.push(("max_throughput_clusters".to_string(), Kind::Fleet, run));
        }
        for (sessions, runs) in &self.slow_llm {
            for (kind, run) in runs {
                out.push((format!("slow_llm_c{sessions}"), *kind, run));
            }
        }
        for (kind, run) in &self.tool_heavy {
            out.push(("tool_heavy_c1".to_string(), *kind, run));
        }
        for (agents, run) in &self.replicas {
            out.push((format!("replicas_{agents}"), Kind::Fleet, run));
        }
        if let Some(run) = &self.replicas_upstream {
            out.push(("replicas_1".to_string(), Kind::Upstream, run));
        }
        if let Some(run) = &self.one_runner {
            out.push(("one_runner".to_string(), Kind::Fleet, run));
        }
        out
    }
}

/// Runs every scenario (or those named in `only`) in order.
pub async fn run(suite: &mut Suite, sizes: &Sizes, only: &[String]) -> Figures {
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    let mut figures = Figures::default();
    throughput(suite, sizes, &wanted, &mut figures).await;
    llm_bound(suite, sizes, &wanted, &mut figures).await;
    stored_history_and_telegram(suite, sizes, &wanted, &mut figures).await;
    // `bots` is both parts of the bots-at-scale scenario; `scale` and `noisy` each part.
    if wanted("bots") || wanted("scale") {
        figures.bots_at_scale = crate::scale::run(
            suite,
            sizes.scale_bots,
            &sizes.scale_gateways,
            sizes.idle_window,
        )
        .await;
    }
    if wanted("bots") || wanted("noisy") {
        match crate::noisy::run(suite, sizes.noisy).await {
            Ok(n) => figures.noisy_neighbour = Some(n),
            Err(e) => suite.errors.push(format!("noisy bot (fleet): {e:#}")),
        }
    }
    if wanted("rtt") {
        figures.tool_rtt = tool_rtt(suite, sizes).await;
    }
    for kind in suite.kinds().into_iter().filter(|_| wanted("breakdown")) {
        for calls in [0, TOOL_CALLS as usize] {
            match breakdown_of(suite, kind, calls, sizes.breakdown_turns).await {
                Ok(b) => figures.breakdown.push(b),
                Err(e) => suite.errors.push(format!(
                    "breakdown ({}, {calls} tools): {e:#}",
                    kind.label()
                )),
            }
        }
    }
    figures
}

/// The instant-LLM scenarios: latency, max throughput (quiet logs, clusters).
async fn throughput(
    suite: &mut Suite,
    sizes: &Sizes,
    wanted: &dyn Fn(&str) -> bool,
    figures: &mut Figures,
) {
    let instant = LlmMode::default();
    let long_window = sizes.window * 2;
    for kind in suite.kinds().into_iter().filter(|_| wanted("latency")) {
        let spec = spec(
            "latency",
            1,
            sizes.latency_requests,
            sizes.warmup,
            long_window,
        );
        if let Some(run) = suite
            .load("latency_c1", kind, &Setup::with_llm(instant), spec)
            .await
        {
            figures.latency_c1.insert(kind, run);
        }
    }
    for kind in suite.kinds().into_iter().filter(|_| wanted("max")) {
        let c = sizes.max_concurrency;
        let spec = spec(
            "max",
            c,
            sizes.throughput_requests,
            sizes.warmup,
            sizes.window,
        );
        if let Some(run) = suite
            .load("max_throughput", kind, &Setup::with_llm(instant), spec)
            .await
        {
            figures.max_throughput.insert(kind, run);
        }
    }
    if wanted("max") && suite.fleet_log_level != QUIET {
        let c = sizes.max_concurrency;
        let spec = spec(
            "quiet",
            c,
            sizes.throughput_requests,
            sizes.warmup,
            sizes.window,
        );
        let setup = Setup {
            log_level: Some(QUIET.into()),
            ..Setup::with_llm(instant)
        };
        figures.max_throughput_quiet = suite
            .load("max_throughput_quiet", Kind::Fleet, &setup, spec)
            .await;
    }
    if wanted("clusters") {
        let c = sizes.max_concurrency;
        let spec = spec(
            "clusters",
            c,
            sizes.throughput_requests,
            sizes.warmup,
            sizes.window,
        );
        let setup = Setup {
            clusters: true,
            ..Setup::with_llm(instant)
        };
        figures.max_throughput_clusters = suite
            .load("max_throughput_clusters", Kind::Fleet, &setup, spec)
            .await;
    }
}

/// The scenarios whose turns wait on the LLM or call tools: slow LLM, tool-heavy, replicas,
/// one runner.
async fn llm_bound(
    suite: &mut Suite,
    sizes: &Sizes,
    wanted: &dyn Fn(&str) -> bool,
    figures: &mut Figures,
) {
    let slow = LlmMode {
        latency_ms: SLOW_LLM_MS,
        tool_calls: 0,
    };
    let long_window = sizes.window * 2;
    for &sessions in sizes.llm_sessions.iter().filter(|_| wanted("slow")) {
        for kind in suite.kinds() {
            let name = format!("slow_llm_c{sessions}");
            // Longer for many sessions, so a system that serves them all at once (upstream
            // needs ~65 ms of CPU per turn) can finish at least one round inside the window.
            let window = sizes.window + Duration::from_millis(50) * sessions as u32;
            let requests = sizes.throughput_requests;
            let spec = spec(&name, sessions, requests, sizes.warmup, window);
            if let Some(run) = suite.load(&name, kind, &Setup::with_llm(slow), spec).await {
                figures
                    .slow_llm
                    .entry(sessions)
                    .or_default()
                    .insert(kind, run);
            }
        }
    }
    let tools = LlmMode {
        latency_ms: 0,
        tool_calls: TOOL_CALLS,
    };
    for kind in suite.kinds().into_iter().filter(|_| wanted("tools")) {
        let spec = spec("tools", 1, sizes.tool_turns, 3, long_window);
        if let Some(run) = suite
            .load("tool_heavy_c1", kind, &Setup::with_llm(tools), spec)
            .await
        {
            figures.tool_heavy.insert(kind, run);
        }
    }
    if wanted("replicas") {
        replicas(suite, sizes, slow, figures).await;
    }
    if wanted("runner") {
        // One runner sized for turns that wait on the LLM.
        let sessions = sizes.one_runner_sessions;
        let setup = Setup {
            llm: slow,
            agents: 1,
            max_concurrent_turns: ONE_RUNNER_TURNS,
            ..Setup::default()
        };
        let window = sizes.window + Duration::from_millis(50) * sessions as u32;
        let spec = spec(
            "one_runner",
            sessions,
            sizes.throughput_requests,
            sizes.warmup,
            window,
        );
        figures.one_runner = suite.load("one_runner", Kind::Fleet, &setup, spec).await;
    }
}

/// Stored history and the Telegram channel.
async fn stored_history_and_telegram(
    suite: &mut Suite,
    sizes: &Sizes,
    wanted: &dyn Fn(&str) -> bool,
    figures: &mut Figures,
) {
    let instant = LlmMode::default();
    if wanted("history") {
        eprintln!(
            "bench: stored history ({} turns per session)",
            sizes.latency_requests
        );
        let measured = async {
            let running = suite.start(Kind::Fleet, &Setup::with_llm(instant)).await?;
            let figures = crate::history::run(&running, sizes.latency_requests).await;
            running.stop().await;
            figures
        };
        match measured.await {
            Ok(h) => figures.history = Some(h),
            Err(e) => suite.errors.push(format!("history (fleet): {e:#}")),
        }
    }
    if wanted("telegram") {
        eprintln!("bench: telegram ({} chats)", sizes.telegram_chats);
        let measured = async {
            let (fake, bot) = crate::telegram::fake().await?;
            let setup = Setup {
                telegram_api: Some(fake.api_url()),
                ..Setup::with_llm(instant)
            };
            let running = suite.start(Kind::Fleet, &setup).await?;
            let figures = crate::telegram::run(
                &running,
                &fake,
                &bot,
                sizes.latency_requests,
                sizes.warmup,
                sizes.telegram_chats,
            )
            .await;
            running.stop().await;
            figures
        };
        match measured.await {
            Ok(t) => figures.telegram = Some(t),
            Err(e) => suite.errors.push(format!("telegram (fleet): {e:#}")),
        }
    }
}

async fn replicas(suite: &mut Suite, sizes: &Sizes, slow: LlmMode, figures: &mut Figures) {
    let per_runner = sizes.replica_turns_per_runner;
    for &agents in &sizes.replicas {
        let setup = Setup {
            llm: slow,
            agents,
            max_concurrent_turns: per_runner,
            ..Setup::default()
        };
        let name = format!("replicas_{agents}");
        let c = sizes.replica_sessions;
        let spec = spec(
            &name,
            c,
            sizes.throughput_requests,
            sizes.warmup,
            sizes.window,
        );
        if let Some(run) = suite.load(&name, Kind::Fleet, &setup, spec).await {
            figures.replicas.insert(agents, run);
        }
    }
    if suite.kinds().contains(&Kind::Upstream) {
        let c = sizes.replica_sessions;
        let spec = spec(
            "replicas_up",
            c,
            sizes.throughput_requests,
            sizes.warmup,
            sizes.window,
        );
        let setup = Setup::with_llm(slow);
        figures.replicas_upstream = suite.load("replicas_1", Kind::Upstream, &setup, spec).await;
    }
}

async fn tool_rtt(suite: &mut Suite, sizes: &Sizes) -> ToolRtt {
    let mut out = ToolRtt::default();
    eprintln!("bench: tool round trip ({} calls each)", sizes.rtt_calls);
    match fleet_rtt(suite, sizes.rtt_calls).await {
        Ok((nats, floor, local)) => {
            out.fleet_nats = nats;
            out.nats_floor = floor;
            out.rust_in_process = local;
        }
        Err(e) => suite.errors.push(format!("tool round trip (fleet): {e:#}")),
    }
    if let Some(venv) = suite.upstream_venv.clone() {
        let measured = async {
            let dir = tempfile::tempdir()?;
            std::fs::write(dir.path().join(TOOL_FILE), crate::fleet::tool_file_text())?;
            toolrtt::upstream(&venv, dir.path(), sizes.rtt_calls).await
        };
        match measured.await {
            Ok(summary) => out.upstream_in_process = Some(summary),
            Err(e) => out.upstream_error = Some(format!("{e:#}")),
        }
    }
    out
}

async fn fleet_rtt(suite: &mut Suite, calls: usize) -> anyhow::Result<(Summary, Summary, Summary)> {
    let running = suite
        .start(Kind::Fleet, &Setup::with_llm(LlmMode::default()))
        .await?;
    let url = running.nats_url.clone().unwrap_or_default();
    let nats = toolrtt::over_nats(&url, calls).await;
    let floor = toolrtt::nats_floor(&url, calls).await;
    let local = toolrtt::in_process(running.workspace(), calls).await;
    running.stop().await;
    Ok((nats?, floor?, local?))
}

async fn breakdown_of(
    suite: &mut Suite,
    kind: Kind,
    tool_calls: usize,
    turns: usize,
) -> anyhow::Result<Breakdown> {
    eprintln!(
        "bench: breakdown on {} ({tool_calls} tool calls per turn)",
        kind.label()
    );
    let probe = ProbeLlm::start(tool_calls).await?;
    let setup = Setup {
        llm_base: Some(probe.base_url.clone()),
        ..Setup::with_llm(LlmMode::default())
    };
    let running = suite.start(kind, &setup).await?;
    let result = async {
        let observers = Observers::attach(&running).await?;
        breakdown::run(&running, &probe, &observers, tool_calls, turns).await
    }
    .await;
    running.stop().await;
    result
}

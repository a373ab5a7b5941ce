//! The benchmark suite: starts the fleet (NATS, Redis and every role as separate processes
//! from the release build) and upstream nanobot's `nanobot serve` against the same
//! `nanobot-mock-llm`, drives both through the same OpenAI-compatible HTTP API with the same
//! load generator and prompts, and reports each figure side by side with the ratio and the
//! issue's target. Figures are printed, never asserted: a missed target is a finding.
//!
//! # Layout
//! - [`opts`]: command-line options and the full/smoke sizes.
//! - [`plan`]: the scenarios in the order they run, and [`plan::Figures`].
//! - [`scenarios`]: one scenario on a fresh system; memory, CPU and start-up bookkeeping.
//! - [`load`]: the closed-loop HTTP load generator.
//! - [`fleet`], [`upstream`]: starting each system; [`system`]: a running one.
//! - [`servers`]: `nats-server`, `redis-server`, the mock LLM, readiness timing.
//! - [`toolrtt`]: tool round trip over NATS and in-process.
//! - [`history`]: turn cost against stored history, and the cost of archiving.
//! - [`telegram`]: the Telegram channel against the Bot API fake.
//! - [`scale`]: many Telegram bots on one fleet, one and two gateways; [`noisy`]: a bot at its
//!   limits next to a quiet one.
//! - [`breakdown`], [`probe`]: per-hop timing from client, NATS, Redis and LLM timestamps.
//! - [`procinfo`]: `/proc` readings; [`stats`]: percentiles.
//! - [`report`], [`resources`]: the comparison rows; [`render`]: Markdown tables and the
//!   start-up summary.
#![forbid(unsafe_code)]

pub mod breakdown;
pub mod fleet;
pub mod history;
pub mod load;
pub mod noisy;
pub mod opts;
pub mod plan;
pub mod probe;
pub mod procinfo;
pub mod render;
pub mod report;
pub mod resources;
pub mod scale;
pub mod scenarios;
pub mod servers;
pub mod stats;
pub mod system;
pub mod telegram;
pub mod toolrtt;
pub mod upstream;

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Serialize;

use opts::{Options, Sizes};
use scenarios::Suite;

/// Whether the baseline ran, and why not.
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    /// Whether upstream was measured.
    pub available: bool,
    /// Installed `nanobot-ai` version.
    pub version: Option<String>,
    /// Why it was not measured.
    pub reason: Option<String>,
}

/// Runs the suite, prints the table and writes the JSON results.
pub async fn run(opts: Options) -> anyhow::Result<()> {
    let sizes = if opts.smoke {
        Sizes::smoke()
    } else {
        Sizes::full()
    };
    let venv = opts
        .upstream_venv
        .clone()
        .unwrap_or_else(upstream::default_venv);
    let baseline = if opts.baseline.unwrap_or(!opts.smoke) {
        match upstream::check(&venv).await {
            Ok(version) => Baseline {
                available: true,
                version: Some(version),
                reason: None,
            },
            Err(reason) => Baseline {
                available: false,
                version: None,
                reason: Some(reason),
            },
        }
    } else {
        Baseline {
            available: false,
            version: None,
            reason: Some(if opts.smoke {
                "not requested (smoke run; pass --baseline true)".into()
            } else {
                "not requested (--baseline false)".into()
            }),
        }
    };
    if let Some(reason) = &baseline.reason {
        eprintln!("bench: upstream baseline unavailable: {reason}");
    }
    let mut suite = Suite {
        upstream_venv: baseline.available.then_some(venv),
        fleet_log_level: opts.fleet_log_level.clone(),
        sizes: Some(sizes.clone()),
        ..Suite::default()
    };
    let started = chrono::Utc::now();
    let load_before = loadavg();
    let figures = plan::run(&mut suite, &sizes, &opts.only).await;
    let rows = report::rows(&figures, &suite);
    let table = render::table(&rows);
    let breakdowns = render::breakdown_tables(&figures);
    println!("\n## nanobot-bench ({} run)\n", sizes.mode);
    println!("{}", describe(&baseline));
    println!("{}\n", interference(&figures));
    println!("{table}");
    println!("### Per-hop breakdown{breakdowns}");
    for error in &suite.errors {
        println!("error: {error}");
    }
    let document = serde_json::json!({
        "suite": "nanobot-bench",
        "mode": sizes.mode,
        "date": started.to_rfc3339(),
        "duration_s": (chrono::Utc::now() - started).num_milliseconds() as f64 / 1e3,
        "commit": commit(),
        "machine": procinfo::machine(),
        "baseline": baseline,
        "fleet_log_level": opts.fleet_log_level,
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "rows": rows,
        "figures": figures,
        "startup": render::startup_summary(&suite),
        "idle_memory": suite.idle,
        "peak_memory": suite.peak,
        "errors": suite.errors,
    });
    let out = opts.out.clone().unwrap_or_else(|| default_out(sizes.mode));
    write_json(&out, &document)?;
    println!("\nresults written to {}", out.display());
    Ok(())
}

/// Summarizes how busy the machine was with work outside the run during the load scenarios.
fn interference(figures: &plan::Figures) -> String {
    let runs = figures.runs();
    let mut worst: Option<(f64, String)> = None;
    let mut sum = 0.0;
    for (scenario, kind, run) in &runs {
        sum += run.foreign_cores;
        if worst.as_ref().is_none_or(|(w, _)| run.foreign_cores > *w) {
            worst = Some((run.foreign_cores, format!("{scenario} on {}", kind.label())));
        }
    }
    let Some((max, at)) = worst else {
        return "no load scenario ran".into();
    };
    format!(
        "Other work on the machine during the load scenarios: {:.2} cores on average, at most \
         {max:.2} ({at}).",
        sum / runs.len() as f64
    )
}

fn describe(baseline: &Baseline) -> String {
    let machine = procinfo::machine();
    let upstream = match (&baseline.version, &baseline.reason) {
        (Some(v), _) => format!("upstream nanobot-ai {v}"),
        (None, Some(reason)) => format!("upstream baseline unavailable: {reason}"),
        (None, None) => "upstream baseline unavailable".into(),
    };
    format!(
        "{} × {}, {} MiB, Linux {}; commit {}; {upstream}\n",
        machine.nproc,
        machine.cpu,
        machine.memory_mb,
        machine.kernel,
        commit()
    )
}

/// Returns `/proc/loadavg` (other work on the machine skews every figure).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn default_out(mode: &str) -> PathBuf {
    let name = if mode == "smoke" {
        "smoke.json"
    } else {
        "latest.json"
    };
    PathBuf::from("bench/results").join(name)
}

fn write_json(path: &Path, document: &serde_json::Value) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(document).context("encode the results")?;
    std::fs::write(path, text + "\n").with_context(|| format!("write {}", path.display()))
}

/// Returns the current git commit (with `-dirty` when the tree has changes), or `unknown`.
fn commit() -> String {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match run(&["rev-parse", "--short=12", "HEAD"]) {
        Some(sha) => {
            let dirty = run(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty { format!("{sha}-dirty") } else { sha }
        }
        None => "unknown".into(),
    }
}

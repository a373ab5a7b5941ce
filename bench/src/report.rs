//! The comparison rows: fleet, upstream, the fleet's advantage and the target.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::plan::{Figures, SLOW_LLM_MS, TOOL_CALLS};
use crate::resources;
use crate::scenarios::{LOADGEN, ScenarioRun, Suite};
use crate::system::Kind;

/// Fleet roles held to the per-service targets.
pub(crate) const SERVICES: [&str; 5] = ["gateway", "agent#1", "tools", "memory", "cron"];
/// Processes not part of either system under test.
pub(crate) const NOT_MEASURED: [&str; 2] = ["mock-llm", LOADGEN];

/// Whether a smaller or a larger figure is better.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Better {
    Lower,
    Higher,
}

/// One line of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Scenario.
    pub scenario: String,
    /// What is measured, with its unit.
    pub metric: String,
    /// The fleet's figure.
    pub fleet: Option<f64>,
    /// Upstream's figure.
    pub upstream: Option<f64>,
    /// How many times better the fleet is (>1: the fleet wins).
    pub advantage: Option<f64>,
    /// The target for the fleet.
    pub target: Option<String>,
    /// Whether the fleet meets it.
    pub met: Option<bool>,
}

pub(crate) fn row(
    scenario: &str,
    metric: &str,
    better: Better,
    fleet: Option<f64>,
    up: Option<f64>,
) -> Row {
    let advantage = match (fleet, up, better) {
        (Some(f), Some(u), Better::Lower) if f > 0.0 => Some(u / f),
        (Some(f), Some(u), Better::Higher) if u > 0.0 => Some(f / u),
        _ => None,
    };
    Row {
        scenario: scenario.into(),
        metric: metric.into(),
        fleet,
        upstream: up,
        advantage,
        target: None,
        met: None,
    }
}

impl Row {
    pub(crate) fn at_most(mut self, limit: f64, text: &str) -> Self {
        self.target = Some(text.into());
        self.met = self.fleet.map(|f| f <= limit);
        self
    }

    pub(crate) fn at_least(mut self, limit: f64, text: &str) -> Self {
        self.target = Some(text.into());
        self.met = self.fleet.map(|f| f >= limit);
        self
    }
}

fn pick(runs: &BTreeMap<Kind, ScenarioRun>, kind: Kind) -> Option<&ScenarioRun> {
    runs.get(&kind)
}

fn both<F: Fn(&ScenarioRun) -> f64>(
    runs: &BTreeMap<Kind, ScenarioRun>,
    f: F,
) -> (Option<f64>, Option<f64>) {
    (
        pick(runs, Kind::Fleet).map(&f),
        pick(runs, Kind::Upstream).map(&f),
    )
}

/// Builds the table rows from a run.
pub fn rows(figures: &Figures, suite: &Suite) -> Vec<Row> {
    let mut rows = Vec::new();
    let (f, u) = both(&figures.latency_c1, |r| r.load.latency.p50_ms);
    rows.push(
        row(
            "1 session, instant LLM",
            "turn latency p50 (ms)",
            Better::Lower,
            f,
            u,
        )
        .at_most(3.0, "≤ 3"),
    );
    let (f, u) = both(&figures.latency_c1, |r| r.load.latency.p99_ms);
    rows.push(
        row(
            "1 session, instant LLM",
            "turn latency p99 (ms)",
            Better::Lower,
            f,
            u,
        )
        .at_most(10.0, "≤ 10"),
    );
    let max_c = figures
        .max_throughput
        .values()
        .next()
        .map_or(0, |r| r.load.concurrency);
    let scenario = format!("{max_c} sessions, instant LLM");
    let (f, u) = both(&figures.max_throughput, |r| r.load.turns_per_s);
    let cpu_bound = f;
    rows.push(row(&scenario, "max turns/s", Better::Higher, f, u).at_least(1000.0, "≥ 1000"));
    let (f, u) = both(&figures.max_throughput, |r| r.load.latency.p99_ms);
    rows.push(row(&scenario, "turn latency p99 (ms)", Better::Lower, f, u));
    if let Some(bytes) =
        pick(&figures.max_throughput, Kind::Fleet).and_then(|r| r.redis_bytes_per_session)
    {
        let metric = "Redis memory per session of 10 turns (KiB)";
        rows.push(row(
            &scenario,
            metric,
            Better::Lower,
            Some(bytes / 1024.0),
            None,
        ));
    }
    cluster_rows(figures, &mut rows);
    if let Some(quiet) = &figures.max_throughput_quiet {
        let cpu: f64 = quiet
            .cpu_ms_per_turn
            .iter()
            .filter(|(n, _)| !NOT_MEASURED.contains(&n.as_str()))
            .map(|(_, ms)| ms)
            .sum();
        let metric = "CPU ms per turn, whole system, roles logging at warn";
        rows.push(row(&scenario, metric, Better::Lower, Some(cpu), None));
        let metric = "max turns/s, roles logging at warn";
        rows.push(row(
            &scenario,
            metric,
            Better::Higher,
            Some(quiet.load.turns_per_s),
            None,
        ));
    }
    slow_llm_rows(figures, cpu_bound, &mut rows);
    let scenario = format!("1 session, {TOOL_CALLS} sequential tool calls");
    let (f, u) = both(&figures.tool_heavy, |r| r.load.latency.p50_ms);
    rows.push(row(&scenario, "turn latency p50 (ms)", Better::Lower, f, u));
    let (f, u) = both(&figures.tool_heavy, |r| r.load.latency.p99_ms);
    rows.push(row(&scenario, "turn latency p99 (ms)", Better::Lower, f, u));
    tool_rows(figures, &mut rows);
    resources::memory_rows(figures, suite, &mut rows);
    resources::startup_rows(suite, &mut rows);
    replica_rows(figures, &mut rows);
    one_runner_rows(figures, &mut rows);
    resources::cpu_rows(figures, &mut rows);
    if let Some(history) = &figures.history {
        rows.extend(crate::history::rows(history));
    }
    if let Some(telegram) = &figures.telegram {
        rows.extend(crate::telegram::rows(telegram));
    }
    rows.extend(crate::scale::rows(&figures.bots_at_scale));
    if let Some(noisy) = &figures.noisy_neighbour {
        rows.extend(crate::noisy::rows(noisy));
    }
    rows
}

/// Max throughput on the 3-node NATS and 3-primary Redis Cluster, beside single servers.
fn cluster_rows(figures: &Figures, rows: &mut Vec<Row>) {
    if let Some(clustered) = &figures.max_throughput_clusters {
        let scenario = format!(
            "{} sessions, instant LLM, 3-node NATS + 3-primary Redis Cluster",
            clustered.load.concurrency
        );
        let on_clusters = clustered.load.turns_per_s;
        rows.push(row(
            &scenario,
            "max turns/s",
            Better::Higher,
            Some(on_clusters),
            None,
        ));
        rows.push(row(
            &scenario,
            "turn latency p99 (ms)",
            Better::Lower,
            Some(clustered.load.latency.p99_ms),
            None,
        ));
        let single = pick(&figures.max_throughput, Kind::Fleet).map(|r| r.load.turns_per_s);
        let ratio = single.filter(|s| *s > 0.0).map(|s| on_clusters / s);
        rows.push(row(
            &scenario,
            "turns/s on clusters ÷ on single servers (same run)",
            Better::Higher,
            ratio,
            None,
        ));
    }
}

/// The slow-LLM scenarios; at 500 sessions and more, turns/s must reach 90 % of the ideal
/// or of `cpu_bound` (the instant-LLM max), whichever is lower.
fn slow_llm_rows(figures: &Figures, cpu_bound: Option<f64>, rows: &mut Vec<Row>) {
    for (sessions, runs) in &figures.slow_llm {
        let scenario = format!("{sessions} sessions, {SLOW_LLM_MS} ms LLM");
        let ideal = *sessions as f64 * 1000.0 / SLOW_LLM_MS as f64;
        let (f, u) = both(runs, |r| r.load.turns_per_s);
        let mut tps = row(
            &scenario,
            &format!("turns/s (ideal {ideal:.0})"),
            Better::Higher,
            f,
            u,
        );
        let mut p99 = row(
            &scenario,
            "turn latency p99 (ms)",
            Better::Lower,
            None,
            None,
        );
        (p99.fleet, p99.upstream) = both(runs, |r| r.load.latency.p99_ms);
        p99.advantage = row("", "", Better::Lower, p99.fleet, p99.upstream).advantage;
        if *sessions >= 500 {
            let bound = ideal.min(cpu_bound.unwrap_or(ideal));
            tps = tps.at_least(
                0.9 * bound,
                &format!("≥ {:.0} (90 % of {bound:.0})", 0.9 * bound),
            );
            p99 = p99.at_most(260.0, "≤ 260");
        }
        rows.push(tps);
        rows.push(p99);
    }
}

fn tool_rows(figures: &Figures, rows: &mut Vec<Row>) {
    let rtt = &figures.tool_rtt;
    let up = rtt.upstream_in_process.as_ref();
    let scenario = "read_file round trip";
    let us = |ms: f64| ms * 1e3;
    rows.push(
        row(
            scenario,
            "p50 (µs): fleet over NATS vs upstream in-process",
            Better::Lower,
            Some(us(rtt.fleet_nats.p50_ms)),
            up.map(|s| us(s.p50_ms)),
        )
        .at_most(200.0, "≤ 200"),
    );
    rows.push(row(
        scenario,
        "p99 (µs): fleet over NATS vs upstream in-process",
        Better::Lower,
        Some(us(rtt.fleet_nats.p99_ms)),
        up.map(|s| us(s.p99_ms)),
    ));
    rows.push(row(
        scenario,
        "p50 (µs): NATS request/reply floor (echo responder)",
        Better::Lower,
        Some(us(rtt.nats_floor.p50_ms)),
        None,
    ));
    rows.push(row(
        scenario,
        "p50 (µs): in-process, Rust vs Python",
        Better::Lower,
        Some(us(rtt.rust_in_process.p50_ms)),
        up.map(|s| us(s.p50_ms)),
    ));
}

fn one_runner_rows(figures: &Figures, rows: &mut Vec<Row>) {
    let Some(run) = &figures.one_runner else {
        return;
    };
    let sessions = run.load.concurrency;
    let scenario = format!(
        "{sessions} sessions, {SLOW_LLM_MS} ms LLM, one runner at maxConcurrentTurns {}",
        crate::plan::ONE_RUNNER_TURNS
    );
    let ideal = sessions as f64 * 1000.0 / SLOW_LLM_MS as f64;
    rows.push(
        row(
            &scenario,
            &format!("turns/s (ideal {ideal:.0})"),
            Better::Higher,
            Some(run.load.turns_per_s),
            None,
        )
        .at_least(0.9 * ideal, &format!("≥ {:.0} (90 %)", 0.9 * ideal)),
    );
    rows.push(row(
        &scenario,
        "turn latency p99 (ms)",
        Better::Lower,
        Some(run.load.latency.p99_ms),
        None,
    ));
    rows.push(row(
        &scenario,
        "agent peak RSS (MB)",
        Better::Lower,
        run.peak_mb.get("agent#1").copied(),
        None,
    ));
}

fn replica_rows(figures: &Figures, rows: &mut Vec<Row>) {
    let tps = |n: usize| figures.replicas.get(&n).map(|r| r.load.turns_per_s);
    let upstream = figures
        .replicas_upstream
        .as_ref()
        .map(|r| r.load.turns_per_s);
    for &n in figures.replicas.keys() {
        let up = if n == 1 { upstream } else { None };
        rows.push(row(
            "200 ms LLM, runner-bound",
            &format!("turns/s with {n} agent runner(s)"),
            Better::Higher,
            tps(n),
            up,
        ));
    }
    if let (Some(one), Some(two)) = (tps(1), tps(2)) {
        rows.push(
            row(
                "200 ms LLM, runner-bound",
                "scaling 1 → 2 runners (×)",
                Better::Higher,
                Some(two / one),
                None,
            )
            .at_least(1.8, "≥ 1.8"),
        );
    }
    if let (Some(one), Some(four)) = (tps(1), tps(4)) {
        rows.push(row(
            "200 ms LLM, runner-bound",
            "scaling 1 → 4 runners (×)",
            Better::Higher,
            Some(four / one),
            None,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advantage_is_upstream_over_fleet_for_latency_and_fleet_over_upstream_for_rates() {
        let latency = row("s", "p50", Better::Lower, Some(2.0), Some(60.0)).at_most(3.0, "≤ 3");
        assert_eq!(latency.advantage, Some(30.0));
        assert_eq!(latency.met, Some(true));
        let rate = row("s", "turns/s", Better::Higher, Some(900.0), Some(15.0));
        assert_eq!(rate.advantage, Some(60.0));
        let missed = rate.at_least(1000.0, "≥ 1000");
        assert_eq!(missed.met, Some(false));
        let alone = row("s", "rss", Better::Lower, Some(9.0), None);
        assert_eq!((alone.advantage, alone.met), (None, None));
        let table = crate::render::table(&[missed, alone]);
        assert!(table.contains("| s | turns/s | 900 | 15.0 | 60.0× | ≥ 1000 | **no** |"));
        assert!(table.contains("| s | rss | 9.00 | — | — |  |  |"));
    }
}

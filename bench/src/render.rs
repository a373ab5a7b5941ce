//! Renders a run as Markdown: the comparison table, the per-hop breakdowns, and the
//! start-up summary of the JSON document.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::plan::Figures;
use crate::report::Row;
use crate::scenarios::Suite;
use crate::stats;
use crate::system::Kind;

fn num(v: Option<f64>) -> String {
    match v {
        None => "—".into(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

/// Renders the rows as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str("| scenario | metric | fleet | upstream | fleet advantage | target | met |\n");
    out.push_str("|---|---|---:|---:|---:|---|---|\n");
    for r in rows {
        let advantage = r.advantage.map_or("—".into(), |a| format!("{a:.1}×"));
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.scenario,
            r.metric,
            num(r.fleet),
            num(r.upstream),
            advantage,
            r.target.as_deref().unwrap_or(""),
            met
        );
    }
    out
}

/// Renders the per-hop breakdowns as Markdown tables.
pub fn breakdown_tables(figures: &Figures) -> String {
    let mut out = String::new();
    for b in &figures.breakdown {
        let _ = writeln!(
            out,
            "\n**{}**, {} tool calls per turn, {} sequential turns: total p50 {:.2} ms, p99 {:.2} ms, \
             mean {:.2} ms; first LLM request {:.0} bytes\n",
            b.system.label(),
            b.tool_calls,
            b.turns,
            b.total.p50_ms,
            b.total.p99_ms,
            b.total.mean_ms,
            b.llm_request_bytes
        );
        out.push_str("| hop | mean (ms) | p50 (ms) | p99 (ms) |\n|---|---:|---:|---:|\n");
        for hop in &b.hops {
            let l = &hop.latency;
            let _ = writeln!(
                out,
                "| {} | {:.3} | {:.3} | {:.3} |",
                hop.name, l.mean_ms, l.p50_ms, l.p99_ms
            );
        }
        if !b.redis_commands.is_empty() {
            let per_turn: f64 = b.redis_commands.values().sum();
            let names: Vec<String> = b
                .redis_commands
                .iter()
                .map(|(k, v)| format!("{k} {v:.1}"))
                .collect();
            let _ = writeln!(
                out,
                "\nRedis commands per turn: {per_turn:.1} ({})",
                names.join(", ")
            );
        }
        if let Some(reads) = b.redis_reads_per_turn {
            let _ = writeln!(
                out,
                "Redis round trips per turn (requests read by the server, every client): {reads:.1}"
            );
        }
    }
    out
}

/// Returns the median of start-ups by process name, for the JSON document.
pub fn startup_summary(suite: &Suite) -> BTreeMap<Kind, BTreeMap<String, serde_json::Value>> {
    let mut out: BTreeMap<Kind, BTreeMap<String, serde_json::Value>> = BTreeMap::new();
    for (kind, starts) in &suite.startups {
        let mut by_name: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
        for s in starts {
            let entry = by_name.entry(s.name.clone()).or_default();
            entry.0.push(s.spawn_to_ready_ms);
            entry.1.extend(s.connect_to_ready_ms);
        }
        for (name, (spawn, connect)) in by_name {
            let max = |v: &[f64]| {
                v.iter()
                    .copied()
                    .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
            };
            let value = serde_json::json!({
                "starts": spawn.len(),
                "spawn_to_ready_ms_median": stats::median(&spawn),
                "spawn_to_ready_ms_max": max(&spawn),
                "connect_to_ready_ms_median": (!connect.is_empty()).then(|| stats::median(&connect)),
                "connect_to_ready_ms_max": max(&connect),
            });
            out.entry(*kind).or_default().insert(name, value);
        }
    }
    out
}

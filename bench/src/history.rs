//! Memory scenarios (issue 11), fleet only: what a turn costs in a session with 10,000 stored
//! rows against one with 10 (all but the last 10 rows archived, as consolidation leaves a
//! long-lived session), driven with the same sequential turns through the API on one fleet;
//! and what the memory worker spends to archive 1,000 messages (a `/new` archive job, instant
//! LLM), from publish to its result.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use prost::Message as _;
use serde::Serialize;
use serde_json::json;

use nanobot_proto::{ConsolidationRequest, ConsolidationResult, MemoryJobKind, keys, subjects};

use crate::report::{Better, Row, row};
use crate::stats::{Summary, summarize};
use crate::system::{Running, cpu_delta};

/// Stored rows of the short and the long session.
pub const SIZES: [usize; 2] = [10, 10_000];
/// Rows left unarchived in a seeded session.
const UNARCHIVED: usize = 10;
/// Messages of one archive job.
const ARCHIVED: usize = 1_000;
/// Archive jobs measured.
const ARCHIVE_RUNS: usize = 3;
/// Turns before measuring.
const WARMUP: usize = 3;

/// The memory scenarios' figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HistoryFigures {
    /// Turn latency by stored rows.
    pub latency: BTreeMap<usize, Summary>,
    /// Agent CPU milliseconds per turn by stored rows.
    pub agent_cpu_ms: BTreeMap<usize, f64>,
    /// Wall milliseconds to archive 1,000 messages (median of the runs).
    pub archive_wall_ms: Option<f64>,
    /// Memory worker CPU milliseconds to archive 1,000 messages (median of the runs).
    pub archive_cpu_ms: Option<f64>,
}

/// Runs both scenarios on a running fleet.
pub async fn run(running: &Running, turns: usize) -> anyhow::Result<HistoryFigures> {
    let url = running.redis_url.clone().context("the fleet's redis")?;
    let cfg = nanobot_runtime::config::StoreConfig { url };
    let mut redis =
        nanobot_runtime::store::connect(&cfg, &tokio_util::sync::CancellationToken::new()).await?;
    let http = reqwest::Client::new();
    let mut out = HistoryFigures::default();
    for rows in SIZES {
        let session = format!("history-{rows}");
        seed(&mut redis, &format!("api:{session}"), rows).await?;
        for _ in 0..WARMUP {
            turn(&http, running, &session).await?;
        }
        let before = running.cpu();
        let mut samples = Vec::with_capacity(turns);
        for _ in 0..turns {
            let started = Instant::now();
            turn(&http, running, &session).await?;
            samples.push(started.elapsed());
        }
        let cpu = cpu_delta(&before, &running.cpu());
        let agent: f64 = cpu
            .iter()
            .filter(|(name, _)| name.starts_with("agent"))
            .map(|(_, secs)| secs)
            .sum();
        out.latency.insert(rows, summarize(&samples));
        out.agent_cpu_ms
            .insert(rows, agent * 1e3 / turns.max(1) as f64);
    }
    let (wall, cpu) = archive_cost(running).await?;
    out.archive_wall_ms = Some(wall);
    out.archive_cpu_ms = Some(cpu);
    Ok(out)
}

/// Stores a session of `rows` alternating user/assistant rows, all but the last
/// [`UNARCHIVED`] archived.
async fn seed(
    redis: &mut nanobot_runtime::store::Store,
    session: &str,
    rows: usize,
) -> anyhow::Result<()> {
    let messages = keys::session_messages("default", session);
    for start in (0..rows).step_by(1_000) {
        let batch: Vec<String> = (start..(start + 1_000).min(rows))
            .map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                json!({"role": role, "content": format!("message {i} about the garden and its roses"), "timestamp": "2026-11-01T10:00:00.000000"}).to_string()
            })
            .collect();
        redis::cmd("RPUSH")
            .arg(&messages)
            .arg(batch)
            .query_async::<()>(redis)
            .await?;
    }
    redis::cmd("HSET")
        .arg(keys::session_meta("default", session))
        .arg("created_at")
        .arg("2026-11-01T10:00:00.000000")
        .arg("updated_at")
        .arg("2026-11-01T10:00:00.000000")
        .arg("last_consolidated")
        .arg(rows.saturating_sub(UNARCHIVED))
        .arg("metadata")
        .arg("{}")
        .query_async::<()>(redis)
        .await?;
    redis::cmd("SADD")
        .arg(keys::sessions("default"))
        .arg(session)
        .query_async::<()>(redis)
        .await?;
    Ok(())
}

async fn turn(http: &reqwest::Client, running: &Running, session: &str) -> anyhow::Result<()> {
    let response = http
        .post(format!("{}/v1/chat/completions", running.api_base))
        .json(&json!({"session_id": session, "messages": [{"role": "user", "content": "and the roses?"}]}))
        .timeout(Duration::from_secs(60))
        .send()
        .await?;
    anyhow::ensure!(
        response.status().is_success(),
        "turn answered {}",
        response.status()
    );
    Ok(())
}

/// Archives 1,000 messages [`ARCHIVE_RUNS`] times; returns the median wall and memory-worker
/// CPU milliseconds.
async fn archive_cost(running: &Running) -> anyhow::Result<(f64, f64)> {
    let url = running.nats_url.clone().context("the fleet's nats")?;
    let client = async_nats::connect(url).await?;
    let js = async_nats::jetstream::new(client.clone());
    let mut results = client.subscribe(subjects::consolidated("default")).await?;
    let rows: Vec<serde_json::Value> = (0..ARCHIVED)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": format!("archived message {i} about the garden"), "timestamp": "2026-11-01T10:00:00.000000"})
        })
        .collect();
    let mut walls = Vec::new();
    let mut cpus = Vec::new();
    for run in 0..ARCHIVE_RUNS {
        let id = format!("bench-archive-{}-{run}", std::process::id());
        let request = ConsolidationRequest {
            id: id.clone(),
            bot: "default".into(),
            session_key: format!("api:bench-archive-{run}"),
            messages_json: serde_json::to_string(&rows)?,
            kind: MemoryJobKind::Archive as i32,
            ..Default::default()
        };
        let before = running.cpu();
        let started = Instant::now();
        nanobot_runtime::bus::publish(&js, subjects::consolidate("default"), Some(&id), &request)
            .await?;
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(60), results.next())
                .await
                .context("no archive result within 60 s")?
                .context("result subscription ended")?;
            let result = ConsolidationResult::decode(msg.payload)?;
            if result.request_id == id {
                anyhow::ensure!(result.error.is_empty(), "archive failed: {}", result.error);
                break;
            }
        }
        walls.push(started.elapsed().as_secs_f64() * 1e3);
        let cpu = cpu_delta(&before, &running.cpu());
        cpus.push(cpu.get("memory").copied().unwrap_or(0.0) * 1e3);
    }
    Ok((crate::stats::median(&walls), crate::stats::median(&cpus)))
}

/// The comparison rows (fleet only; the target is that history does not make turns slower).
pub fn rows(figures: &HistoryFigures) -> Vec<Row> {
    let [short, long] = SIZES;
    let p50 = |n: usize| figures.latency.get(&n).map(|s| s.p50_ms);
    let mut rows = Vec::new();
    for n in SIZES {
        let scenario = format!("session with {n} stored rows");
        rows.push(row(
            &scenario,
            "turn latency p50 (ms)",
            Better::Lower,
            p50(n),
            None,
        ));
        rows.push(row(
            &scenario,
            "agent CPU per turn (ms)",
            Better::Lower,
            figures.agent_cpu_ms.get(&n).copied(),
            None,
        ));
    }
    let growth = match (p50(long), p50(short)) {
        (Some(l), Some(s)) if s > 0.0 => Some(l / s),
        _ => None,
    };
    rows.push(
        row(
            "10,000 vs 10 stored rows",
            "turn latency p50 ratio",
            Better::Lower,
            growth,
            None,
        )
        .at_most(1.5, "≤ 1.5 (cost does not grow with history)"),
    );
    rows.push(row(
        "archive 1,000 messages (instant LLM)",
        "wall time (ms)",
        Better::Lower,
        figures.archive_wall_ms,
        None,
    ));
    rows.push(row(
        "archive 1,000 messages (instant LLM)",
        "memory worker CPU (ms)",
        Better::Lower,
        figures.archive_cpu_ms,
        None,
    ));
    rows
}

//! AutoCompact across workers: every worker looks for idle sessions every
//! `idleCompactCheckIntervalSeconds` and asks for an `Idle` memory job for each. The job's id
//! names the session and when it went idle, so scans by several workers (JetStream
//! de-duplication, then the job's done-marker) archive an idle spell once; the job itself runs
//! like any memory job (fenced session writes, `consolidate::idle`).

use std::time::Duration;

use async_nats::jetstream;
use tokio_util::sync::CancellationToken;

use nanobot_core::memory::idle;
use nanobot_proto::{ConsolidationRequest, MemoryJobKind, subjects};
use nanobot_runtime::bus;

use crate::jobs::Deps;

/// Looks for idle sessions until `cancel` fires; does nothing when AutoCompact is off.
pub async fn run(deps: &Deps, js: &jetstream::Context, cancel: &CancellationToken) {
    let d = &deps.cfg.agents.defaults;
    let after = Duration::from_secs_f64(d.idle_compact_after_minutes.max(0.0) * 60.0);
    if after.is_zero() {
        return;
    }
    let mut tick = tokio::time::interval(Duration::from_secs_f64(
        d.idle_compact_check_interval_seconds,
    ));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = scan(deps, js, after).await {
            tracing::warn!("idle session scan failed: {e:#}");
        }
    }
}

/// Asks for an `Idle` job for every idle session of every bot.
async fn scan(deps: &Deps, js: &jetstream::Context, after: Duration) -> anyhow::Result<()> {
    let now = chrono::Local::now().naive_local();
    for bot in deps.all_bots() {
        for key in bot.sessions.list().await? {
            let activity = bot.sessions.activity(&key).await?;
            if !idle::is_idle(&key, &activity, now, after) {
                continue;
            }
            let job = ConsolidationRequest {
                id: idle::job_id(&key, &activity.updated_at),
                bot: bot.spec.id.clone(),
                session_key: key.clone(),
                kind: MemoryJobKind::Idle as i32,
                ..Default::default()
            };
            bus::publish(js, subjects::consolidate(&job.bot), Some(&job.id), &job).await?;
            tracing::debug!(session_id = %key, "idle session queued for compaction");
        }
    }
    Ok(())
}

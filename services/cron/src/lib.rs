//! Cron scheduler: the leader among the cron replicas reads each bot's
//! `<workspace>/cron/jobs.json` and, when a job is due, publishes a `CronFire` on
//! `subjects::cron_fire` (JetStream work queue) for an agent runner to run as a turn, then
//! records the run in the file. The fire id (job and due time) makes a repeat by a new leader
//! a no-op.
//!
//! # Layout
//! - `store`: `<workspace>/cron/jobs.json` in upstream's format, locked and written atomically.
//! - `schedule`: next runs (`at`, `every`, cron expressions in IANA zones) and validation.
//! - `tool`: the `cron` tool, served by the tool executors.
//! - `leader`: the Redis leader lease.
//! - `registry`: the bots as the registry has them now.
#![forbid(unsafe_code)]

pub mod leader;
pub mod limits;
pub mod owner;
pub mod registry;
pub mod schedule;
pub mod store;
pub mod tool;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use nanobot_proto::{ConsolidationRequest, CronFire, CronFireKind, MemoryJobKind, subjects};
use nanobot_runtime::bus::{self, Bus, BusError};
use nanobot_runtime::config::{Config, DreamConfig, HeartbeatConfig};
use nanobot_runtime::service;
use tracing::Instrument as _;

use crate::store::JobsFile;

/// How often the leader checks for due jobs.
const TICK: Duration = Duration::from_millis(500);

/// Runs a cron replica until `shutdown`.
pub async fn run(
    cfg: Config,
    health_addr: Option<SocketAddr>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let started = service::start("cron", &cfg, health_addr, shutdown).await?;
    let cancel = started.cancel.clone();
    let redis = nanobot_runtime::store::connect(&cfg.store, &cancel)
        .await
        .context("connect to redis")?;
    let live = registry::Live::follow(&started.bus.js, cfg.clone(), &cancel).await;
    started.health.set_ready(true);
    let instance = started.health.instance.clone();
    tracing::info!(%instance, "cron scheduler ready");
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut leadership = leader::Leadership::new(redis.clone(), &instance, cfg.scope.as_deref());
    let mut leading = false;
    loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            _ = tick.tick() => leading = on_tick(&live.now(), &started.bus, &mut leadership, leading).await,
        }
    }
    leadership.resign().await;
    tracing::info!("cron scheduler stopped");
    Ok(())
}

async fn on_tick(
    cfg: &Config,
    bus: &Bus,
    leadership: &mut leader::Leadership,
    was_leading: bool,
) -> bool {
    let leading = leadership.hold().await;
    if leading != was_leading {
        tracing::info!(leading, "cron leadership changed");
    }
    if leading {
        fire_due(cfg, bus).await;
    }
    leading
}

/// Fires every due job of every bot: the fire is published first (its id is the job and the
/// due time, so JetStream and the runners drop a repeat), then the job's state is recorded in
/// `jobs.json`. A leader that dies in between leaves the job due, and the next leader
/// publishes the same fire again, which changes nothing. A job missed while the whole fleet
/// was down is due once: its next run is computed from now.
async fn fire_due(cfg: &Config, bus: &Bus) {
    let now = store::now_ms();
    let bots = cfg.bots();
    for (bot, claim) in bots.iter().zip(owner::Claim::all(&bots)) {
        let heartbeat = &cfg.gateway.heartbeat;
        let (dream, tz) = (&cfg.agents.defaults.dream, &cfg.agents.defaults.timezone);
        let due = store::update(&bot.workspace, |file| {
            let registered = register_heartbeat(file, heartbeat, now);
            let dream = register_dream(file, dream, tz, now);
            let (changed, due) = due_fires(&claim, file, now);
            (registered || dream.is_some() || changed, (dream, due))
        });
        let (dream, due) = match due {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(bot = %bot.id, error = %e, "failed to read cron jobs");
                continue;
            }
        };
        if dream == Some(DreamJob::Removed) {
            // As upstream: a disabled Dream skips the history written so far.
            let skip = memory_job(
                &bot.id,
                format!("dream-skip:{now}"),
                MemoryJobKind::DreamSkip,
            );
            if let Err(e) = publish_memory_job(bus, &skip).await {
                tracing::warn!(bot = %bot.id, error = %e, "failed to ask for the dream cursor skip");
            }
        }
        for fire in due {
            // The root of the fired work's trace (the turn, or Dream's memory job).
            let span = tracing::info_span!(parent: None, "cron_fire", job_id = %fire.job_id);
            nanobot_runtime::telemetry::root(&span, &bot.id, "cron");
            let published = async {
                match fire.kind() {
                    CronFireKind::Dream => {
                        let job = memory_job(&bot.id, fire.id.clone(), MemoryJobKind::Dream);
                        publish_memory_job(bus, &job).await
                    }
                    _ => {
                        let subject = subjects::cron_fire(&bot.id);
                        bus::publish(&bus.js, subject, Some(&fire.id), &fire).await
                    }
                }
            };
            let published = published.instrument(span).await;
            if let Err(e) = published {
                tracing::warn!(job_id = %fire.job_id, error = %e, "failed to publish cron fire");
                continue;
            }
            tracing::info!(bot = %bot.id, job_id = %fire.job_id, "cron job fired");
            let recorded = store::update(&bot.workspace, |file| {
                (record_fire(file, &fire, store::now_ms()), ())
            });
            if let Err(e) = recorded {
                tracing::warn!(job_id = %fire.job_id, error = %e, "failed to record cron fire");
            }
        }
    }
}

/// A memory job asked for by the scheduler (its id is the JetStream message id and the
/// memory worker's done-marker, so a repeat by a new leader runs once).
fn memory_job(bot: &str, id: String, kind: MemoryJobKind) -> ConsolidationRequest {
    ConsolidationRequest {
        id,
        bot: bot.to_string(),
        kind: kind as i32,
        ..Default::default()
    }
}

async fn publish_memory_job(bus: &Bus, job: &ConsolidationRequest) -> Result<(), BusError> {
    bus::publish(&bus.js, subjects::consolidate(&job.bot), Some(&job.id), job).await
}

/// Returns the fires of `claim`'s bot's jobs due at `now` ([`owner`]: its own, adopting a job
/// of no bot in its own workspace); fills in the next run of enabled jobs that have none yet
/// (jobs written by hand), reporting whether that changed the file.
fn due_fires(claim: &owner::Claim, file: &mut JobsFile, now: i64) -> (bool, Vec<CronFire>) {
    let bot = claim.bot.as_str();
    let mut changed = false;
    let mut fires = Vec::new();
    for job in file.jobs.iter_mut().filter(|j| j.enabled) {
        match claim.verdict(job) {
            owner::Verdict::Run => {}
            owner::Verdict::Skip => continue,
            owner::Verdict::Adopt => {
                job.bot = Some(bot.to_string());
                changed = true;
            }
            owner::Verdict::DisableOrphan => {
                tracing::warn!(job_id = %job.id, "disabling cron job of no bot in a shared workspace");
                disable(job, claim.shared_orphan_reason(), now);
                changed = true;
                continue;
            }
        }
        // Of the system jobs, the heartbeat runs on the agents, `dream` on the memory workers.
        let kind = match (job.payload.kind.as_str(), job.id.as_str()) {
            (store::SYSTEM_EVENT, HEARTBEAT_JOB) => CronFireKind::Heartbeat,
            (store::SYSTEM_EVENT, DREAM_JOB) => CronFireKind::Dream,
            (store::SYSTEM_EVENT, _) => continue,
            _ => CronFireKind::AgentTurn,
        };
        let route = job.payload.route();
        if kind == CronFireKind::AgentTurn && route.is_none() {
            // As upstream: an agent job bound to no chat session cannot be answered anywhere;
            // it is disabled, with the reason as its last error.
            tracing::warn!(job_id = %job.id, "disabling cron job bound to no chat session");
            disable(job, store::UNBOUND_AGENT_JOB_REASON.into(), now);
            changed = true;
            continue;
        }
        let Some(due) = job.state.next_run_at_ms else {
            let next = schedule::next_run(&job.schedule, now);
            if next.is_some() {
                job.state.next_run_at_ms = next;
                changed = true;
            }
            continue;
        };
        if due > now {
            continue;
        }
        let (session_key, origin_channel, origin_chat_id) = route.unwrap_or_default();
        fires.push(CronFire {
            id: format!("{}:{due}", job.id),
            bot: bot.to_string(),
            job_id: job.id.clone(),
            job_name: job.name.clone(),
            message: job.payload.message.clone(),
            scheduled_ms: due,
            deliver: job.payload.deliver,
            channel: job.payload.channel.clone().unwrap_or_default(),
            to: job.payload.to.clone().unwrap_or_default(),
            session_key,
            origin_channel,
            origin_chat_id,
            origin_metadata_json: serde_json::to_string(&job.payload.origin_metadata)
                .unwrap_or_default(),
            kind: kind as i32,
        });
    }
    (changed, fires)
}

/// Disables a job that cannot run, with `reason` as its last error.
fn disable(job: &mut store::Job, reason: String, now: i64) {
    job.enabled = false;
    job.state.next_run_at_ms = None;
    job.state.last_status = Some(store::STATUS_ERROR.into());
    job.state.last_error = Some(reason);
    job.updated_at_ms = now;
}

/// Id and name of the protected heartbeat job, as upstream registers it.
pub const HEARTBEAT_JOB: &str = "heartbeat";

/// Keeps the protected `heartbeat` job as `gateway.heartbeat` says (every `intervalS`; absent
/// when disabled), as upstream registers it at start; reports whether the file changed.
pub(crate) fn register_heartbeat(file: &mut JobsFile, cfg: &HeartbeatConfig, now: i64) -> bool {
    let at = file.jobs.iter().position(|j| j.id == HEARTBEAT_JOB);
    let every_ms = i64::try_from(cfg.interval_s.max(1)).unwrap_or(i64::MAX / 1000) * 1000;
    match (at, cfg.enabled) {
        (Some(i), false) => {
            file.jobs.remove(i);
            true
        }
        (None, false) => false,
        (Some(i), true) if file.jobs[i].schedule.every_ms == Some(every_ms) => false,
        (at, true) => {
            let schedule = store::Schedule {
                kind: "every".into(),
                every_ms: Some(every_ms),
                ..Default::default()
            };
            let mut job: store::Job = serde_json::from_value(serde_json::json!({
                "id": HEARTBEAT_JOB, "name": HEARTBEAT_JOB, "schedule": {"kind": "every"},
                "payload": {"kind": store::SYSTEM_EVENT},
                "createdAtMs": now, "updatedAtMs": now,
            }))
            .expect("a valid job");
            job.state.next_run_at_ms = schedule::next_run(&schedule, now);
            job.schedule = schedule;
            match at {
                Some(i) => file.jobs[i] = job,
                None => file.jobs.push(job),
            }
            true
        }
    }
}

/// Id and name of the protected Dream job, as upstream registers it.
pub const DREAM_JOB: &str = "dream";

/// What [`register_dream`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DreamJob {
    /// Added, or its schedule changed.
    Written,
    /// Removed (Dream was disabled).
    Removed,
}

/// Keeps the protected `dream` job as `agents.defaults.dream` says (every `intervalH` hours,
/// or its legacy `cron` expression in the agent's zone; absent when disabled), as upstream
/// registers it at start.
pub(crate) fn register_dream(
    file: &mut JobsFile,
    cfg: &DreamConfig,
    tz: &str,
    now: i64,
) -> Option<DreamJob> {
    let at = file.jobs.iter().position(|j| j.id == DREAM_JOB);
    if !cfg.enabled {
        return at.map(|i| {
            file.jobs.remove(i);
            DreamJob::Removed
        });
    }
    let schedule = match cfg.cron.as_deref().map(str::trim).filter(|c| !c.is_empty()) {
        Some(expr) => store::Schedule {
            kind: "cron".into(),
            expr: Some(expr.to_string()),
            tz: Some(tz.to_string()),
            ..Default::default()
        },
        None => store::Schedule {
            kind: "every".into(),
            every_ms: Some((cfg.interval_h * 3_600_000.0).round().max(1.0) as i64),
            ..Default::default()
        },
    };
    if at.is_some_and(|i| file.jobs[i].schedule == schedule) {
        return None;
    }
    let mut job: store::Job = serde_json::from_value(serde_json::json!({
        "id": DREAM_JOB, "name": DREAM_JOB, "schedule": {"kind": "every"},
        "payload": {"kind": store::SYSTEM_EVENT, "message": DREAM_JOB},
        "createdAtMs": now, "updatedAtMs": now,
    }))
    .expect("a valid job");
    job.state.next_run_at_ms = schedule::next_run(&schedule, now);
    if job.state.next_run_at_ms.is_none() {
        tracing::warn!(expr = ?schedule.expr, "dream schedule has no next run; Dream will not run");
    }
    job.schedule = schedule;
    match at {
        Some(i) => file.jobs[i] = job,
        None => file.jobs.push(job),
    }
    Some(DreamJob::Written)
}

/// Records a published fire: an `at` job is deleted (or disabled), any other job's next run is
/// computed from `now`. A job changed since (removed, or already recorded by another leader)
/// is left alone. The run itself (status, error, duration) is recorded by whoever runs it: an
/// agent turn's by the runner when the turn has ended ([`JobsFile::record_run`]); the system
/// jobs' (Dream on the memory workers, the heartbeat) here, as `ok` once handed over.
fn record_fire(file: &mut JobsFile, fire: &CronFire, now: i64) -> bool {
    let Some(index) = file
        .jobs
        .iter()
        .position(|j| j.id == fire.job_id && j.state.next_run_at_ms == Some(fire.scheduled_ms))
    else {
        return false;
    };
    let job = &mut file.jobs[index];
    if fire.kind() != CronFireKind::AgentTurn {
        job.state.record(store::Run {
            run_at_ms: fire.scheduled_ms,
            status: store::STATUS_OK.into(),
            duration_ms: 0,
            error: None,
        });
    }
    job.updated_at_ms = now;
    if job.schedule.kind == "at" {
        if job.delete_after_run {
            file.jobs.remove(index);
        } else {
            job.enabled = false;
            job.state.next_run_at_ms = None;
        }
    } else {
        job.state.next_run_at_ms = schedule::next_run(&job.schedule, now);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Job, Payload, Schedule};

    fn job(id: &str, schedule: Schedule, next: Option<i64>) -> Job {
        let mut job: Job = serde_json::from_value(serde_json::json!({
            "id": id, "name": id, "schedule": {"kind": "every"},
            "payload": {"kind": "agent_turn", "message": format!("run {id}"),
                        "sessionKey": "cli:c", "originChannel": "cli", "originChatId": "c"}
        }))
        .unwrap();
        job.schedule = schedule;
        job.state.next_run_at_ms = next;
        job
    }

    /// The claim of bot `b`, alone in its workspace.
    fn solo() -> owner::Claim {
        owner::Claim {
            bot: "b".into(),
            before: Vec::new(),
            after: Vec::new(),
        }
    }

    fn every(ms: i64) -> Schedule {
        Schedule {
            kind: "every".into(),
            every_ms: Some(ms),
            ..Default::default()
        }
    }

    #[test]
    fn a_job_missed_while_the_fleet_was_down_fires_once_and_resumes_from_now() {
        // Due an hour ago with a one-minute period: one fire, then one period after now.
        let mut file = JobsFile::default();
        file.jobs.push(job("late", every(60_000), Some(1_000)));
        let now = 3_601_000;
        let (_, fires) = due_fires(&solo(), &mut file, now);
        assert_eq!(fires.len(), 1);
        assert_eq!(fires[0].id, "late:1000");
        assert!(record_fire(&mut file, &fires[0], now));
        assert_eq!(file.jobs[0].state.next_run_at_ms, Some(now + 60_000));
        assert!(due_fires(&solo(), &mut file, now).1.is_empty());
        assert!(!record_fire(&mut file, &fires[0], now), "recorded once");
    }

    #[test]
    fn at_jobs_are_deleted_or_disabled_after_their_run_and_dream_fires_for_the_memory_workers() {
        let at = Schedule {
            kind: "at".into(),
            at_ms: Some(500),
            ..Default::default()
        };
        let mut file = JobsFile::default();
        file.jobs.push(job("once", at.clone(), Some(500)));
        file.jobs[0].delete_after_run = true;
        file.jobs.push(job("kept", at, Some(500)));
        let mut dream = job("dream", every(1000), Some(0));
        dream.payload = Payload {
            kind: store::SYSTEM_EVENT.into(),
            ..Default::default()
        };
        file.jobs.push(dream);
        let (_, fires) = due_fires(&solo(), &mut file, 1_000);
        assert_eq!(
            fires.iter().map(|f| f.job_id.as_str()).collect::<Vec<_>>(),
            ["once", "kept", "dream"]
        );
        assert_eq!(
            fires[2].kind(),
            CronFireKind::Dream,
            "for the memory workers"
        );
        for fire in &fires {
            record_fire(&mut file, fire, 1_000);
        }
        assert_eq!(file.jobs.len(), 2, "the one-shot job is gone");
        assert_eq!(file.jobs[0].id, "kept");
        assert!(!file.jobs[0].enabled);
        assert!(
            file.jobs[0].state.run_history.is_empty(),
            "an agent turn's run is recorded by its runner"
        );
    }

    #[test]
    fn the_dream_job_follows_its_config_and_an_upstream_dream_job_is_kept_as_is() {
        let mut file: JobsFile = serde_json::from_str(
            r#"{"version":1,"jobs":[{"id":"dream","name":"dream","enabled":true,
                "schedule":{"kind":"every","everyMs":7200000},
                "payload":{"kind":"system_event","message":"dream"},
                "state":{"nextRunAtMs":5000}}]}"#,
        )
        .unwrap();
        let cfg = DreamConfig::default();
        assert_eq!(
            register_dream(&mut file, &cfg, "UTC", 1_000),
            None,
            "upstream's job kept"
        );
        assert_eq!(file.jobs[0].state.next_run_at_ms, Some(5000));
        let hourly = DreamConfig {
            interval_h: 1.0,
            ..cfg.clone()
        };
        assert_eq!(
            register_dream(&mut file, &hourly, "UTC", 1_000),
            Some(DreamJob::Written)
        );
        assert_eq!(file.jobs[0].schedule.every_ms, Some(3_600_000));
        assert_eq!(file.jobs[0].state.next_run_at_ms, Some(3_601_000));
        let legacy = DreamConfig {
            cron: Some("0 3 * * *".into()),
            ..cfg.clone()
        };
        register_dream(&mut file, &legacy, "Asia/Tokyo", 1_000);
        assert_eq!(file.jobs[0].schedule.kind, "cron");
        assert_eq!(file.jobs[0].schedule.tz.as_deref(), Some("Asia/Tokyo"));
        assert_eq!(file.jobs.len(), 1);
        let off = DreamConfig {
            enabled: false,
            ..cfg
        };
        assert_eq!(
            register_dream(&mut file, &off, "UTC", 1_000),
            Some(DreamJob::Removed)
        );
        assert!(file.jobs.is_empty());
        assert_eq!(register_dream(&mut file, &off, "UTC", 1_000), None);
    }

    #[test]
    fn the_heartbeat_job_is_registered_protected_and_fired_as_a_heartbeat() {
        let mut file = JobsFile::default();
        let cfg = HeartbeatConfig {
            enabled: true,
            interval_s: 60,
            keep_recent_messages: 8,
        };
        assert!(register_heartbeat(&mut file, &cfg, 1_000));
        assert!(!register_heartbeat(&mut file, &cfg, 2_000), "idempotent");
        let job = &file.jobs[0];
        assert_eq!(
            (job.id.as_str(), job.payload.kind.as_str()),
            ("heartbeat", store::SYSTEM_EVENT)
        );
        assert_eq!(job.state.next_run_at_ms, Some(61_000));
        let (_, fires) = due_fires(&solo(), &mut file, 61_000);
        assert_eq!(fires[0].kind(), CronFireKind::Heartbeat);
        let longer = HeartbeatConfig {
            interval_s: 120,
            ..cfg.clone()
        };
        assert!(register_heartbeat(&mut file, &longer, 3_000));
        assert_eq!(file.jobs[0].schedule.every_ms, Some(120_000));
        let off = HeartbeatConfig {
            enabled: false,
            ..cfg
        };
        assert!(register_heartbeat(&mut file, &off, 4_000));
        assert!(file.jobs.is_empty());
    }

    #[test]
    fn bots_sharing_a_workspace_fire_only_their_own_jobs_and_a_job_of_no_bot_is_disabled() {
        let claim = |bot: &str, before: &[&str], after: &[&str]| owner::Claim {
            bot: bot.into(),
            before: before.iter().map(|b| b.to_string()).collect(),
            after: after.iter().map(|b| b.to_string()).collect(),
        };
        let (alpha, beta) = (
            claim("alpha", &[], &["beta"]),
            claim("beta", &["alpha"], &[]),
        );
        let mut file = JobsFile::default();
        for (id, owner) in [("a", Some("alpha")), ("b", Some("beta")), ("legacy", None)] {
            let mut made = job(id, every(60_000), Some(500));
            made.payload.message = format!("提醒 {id} ⏰");
            made.bot = owner.map(str::to_string);
            file.jobs.push(made);
        }
        let (_, beta_fires) = due_fires(&beta, &mut file, 1_000);
        assert_eq!(
            beta_fires
                .iter()
                .map(|f| (f.job_id.as_str(), f.bot.as_str(), f.message.as_str()))
                .collect::<Vec<_>>(),
            [("b", "beta", "提醒 b ⏰")]
        );
        let (changed, alpha_fires) = due_fires(&alpha, &mut file, 1_000);
        assert!(changed, "the job of no bot is disabled");
        assert_eq!(
            alpha_fires
                .iter()
                .map(|f| (f.job_id.as_str(), f.bot.as_str()))
                .collect::<Vec<_>>(),
            [("a", "alpha")]
        );
        let legacy = &file.jobs[2];
        assert!(!legacy.enabled);
        assert_eq!(legacy.state.last_error, Some(alpha.shared_orphan_reason()));
        assert_eq!(legacy.bot, None, "kept as found, never claimed");

        // Alone in its workspace, a bot adopts a job of no bot (an upstream file's) and runs it.
        let mut upstream = JobsFile::default();
        upstream.jobs.push(job("old", every(60_000), Some(500)));
        let (changed, fires) = due_fires(&solo(), &mut upstream, 1_000);
        assert!(changed && fires.len() == 1);
        assert_eq!(upstream.jobs[0].bot.as_deref(), Some("b"));
    }

    #[test]
    fn a_hand_written_job_gets_its_next_run_before_it_fires() {
        let mut file = JobsFile::default();
        file.jobs.push(job("new", every(1_000), None));
        let (changed, fires) = due_fires(&solo(), &mut file, 10_000);
        assert!(changed && fires.is_empty());
        assert_eq!(file.jobs[0].state.next_run_at_ms, Some(11_000));
    }

    #[test]
    fn an_agent_job_bound_to_no_chat_is_disabled_with_upstreams_reason_and_never_fires() {
        let mut file = JobsFile::default();
        let mut unbound = job("lost", every(1_000), Some(500));
        unbound.payload.session_key = None;
        file.jobs.push(unbound);
        let (changed, fires) = due_fires(&solo(), &mut file, 1_000);
        assert!(changed && fires.is_empty());
        let state = &file.jobs[0].state;
        assert!(!file.jobs[0].enabled);
        assert_eq!(state.next_run_at_ms, None);
        assert_eq!(state.last_status.as_deref(), Some("error"));
        assert_eq!(
            state.last_error.as_deref(),
            Some(
                "agent cron payload is missing bound session delivery context; recreate it from a chat session"
            )
        );
    }

    #[test]
    fn a_runs_outcome_is_recorded_once_by_its_runner() {
        let mut file = JobsFile::default();
        file.jobs.push(job("j", every(1_000), Some(2_000)));
        let failed = store::Run {
            run_at_ms: 1_000,
            status: "error".into(),
            duration_ms: 40,
            error: Some("boom".into()),
        };
        assert!(file.record_run("j", failed.clone()));
        assert!(file.record_run("j", failed), "a repeat replaces the run");
        let state = &file.jobs[0].state;
        assert_eq!(state.run_history.len(), 1);
        assert_eq!(state.last_status.as_deref(), Some("error"));
        assert_eq!(state.last_error.as_deref(), Some("boom"));
        assert_eq!(state.run_history[0].duration_ms, 40);
        assert!(!file.record_run("gone", store::Run::default()));
    }
}

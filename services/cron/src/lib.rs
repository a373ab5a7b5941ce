//! Cron scheduler: the leader among the cron replicas reads each bot's
//! `<workspace>/cron/jobs.json` and, when a job is due, publishes a `CronFire` on
//! `subjects::cron_fire` (JetStream work queue) for an agent runner to run as a turn. Fire
//! times live in Redis so a new leader neither skips nor repeats a fire.
//!
//! # Layout
//! - `jobs`: the jobs file and due-time rules.
//! - `leader`: the Redis leader lease.
#![forbid(unsafe_code)]

pub mod jobs;
pub mod leader;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use nanobot_runtime::store::Store;
use redis::AsyncCommands as _;

use nanobot_proto::{CronFire, keys, subjects};
use nanobot_runtime::bus::{self, Bus};
use nanobot_runtime::config::Config;
use nanobot_runtime::{service, store};

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
    let redis = store::connect(&cfg.store, &cancel)
        .await
        .context("connect to redis")?;
    started.health.set_ready(true);
    let instance = started.health.instance.clone();
    tracing::info!(%instance, "cron scheduler ready");
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut leadership = leader::Leadership::new(redis.clone(), &instance);
    let mut leading = false;
    loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            _ = tick.tick() => leading = on_tick(&cfg, &started.bus, &redis, &mut leadership, leading).await,
        }
    }
    leadership.resign().await;
    tracing::info!("cron scheduler stopped");
    Ok(())
}

async fn on_tick(
    cfg: &Config,
    bus: &Bus,
    redis: &Store,
    leadership: &mut leader::Leadership,
    was_leading: bool,
) -> bool {
    let leading = leadership.hold().await;
    if leading != was_leading {
        tracing::info!(leading, "cron leadership changed");
    }
    if leading {
        fire_due(cfg, bus, redis).await;
    }
    leading
}

async fn fire_due(cfg: &Config, bus: &Bus, redis: &Store) {
    let now = chrono::Utc::now().timestamp_millis();
    for bot in cfg.bots() {
        let jobs = match jobs::load(&bot.workspace) {
            Ok(j) => j,
            Err(e) => {
                tracing::warn!(bot = %bot.id, error = %e, "failed to read cron jobs");
                continue;
            }
        };
        for job in jobs {
            let mut conn = redis.clone();
            let last: Option<i64> = conn
                .get(keys::cron_last_fire(&bot.id, &job.id))
                .await
                .unwrap_or(None);
            let Some(due) = jobs::next_due(&job, last, now) else {
                continue;
            };
            if due > now {
                continue;
            }
            let fire = CronFire {
                id: format!("{}:{due}", job.id),
                bot: bot.id.clone(),
                job_id: job.id.clone(),
                job_name: job.name.clone(),
                message: job.payload.message.clone(),
                scheduled_ms: due,
                deliver: job.payload.deliver,
                channel: job.payload.channel.clone().unwrap_or_default(),
                to: job.payload.to.clone().unwrap_or_default(),
            };
            match bus::publish(&bus.js, subjects::cron_fire(&bot.id), Some(&fire.id), &fire).await {
                Ok(()) => {
                    // An `every` job that fell far behind fires once and resumes from now.
                    let recorded = if job.schedule.kind == "every"
                        && now - due > job.schedule.every_ms.unwrap_or(0)
                    {
                        now
                    } else {
                        due
                    };
                    if let Err(e) = conn
                        .set::<_, _, ()>(keys::cron_last_fire(&bot.id, &job.id), recorded)
                        .await
                    {
                        tracing::warn!(job_id = %job.id, error = %e, "failed to record cron fire");
                    }
                    tracing::info!(bot = %bot.id, job_id = %job.id, "cron job fired");
                }
                Err(e) => {
                    tracing::warn!(job_id = %job.id, error = %e, "failed to publish cron fire")
                }
            }
        }
    }
}

//! Agent runners: pull inbound chat messages (`subjects::INBOUND_ALL`), cron fires
//! (`subjects::CRON_FIRE_ALL`) and subagent tasks (`subjects::SUBAGENT_ALL`) from JetStream, run each as a turn (session from Redis, LLM,
//! tool calls as NATS requests to `nanobot-tools`), save the session, and publish replies on
//! `subjects::outbound`. Any number of runners share the durable consumers; a session's
//! turns run one at a time, in arrival order, under its lease (see [`session`]).
//!
//! # Layout: three layers and a ground floor, each importing only downward
//! - [`handlers`]: receive a bus message (inbound, cron fire, heartbeat, subagent task, the bot
//!   registry), keep its ack deadline extended, settle it.
//! - [`session`]: who runs a message, when and how often: taking the session's lease, draining
//!   its mailbox in stream order, attempts. States the exactly-once invariant.
//! - [`turn`]: what one attempt does, top to bottom ([`turn::Turn::run`]): command, recovery,
//!   model, commit-then-publish; checkpoints, follow-ups, the runner's own tools, the hook.
//! - [`base`]: the ground floor: [`base::deps::Deps`], incoming messages, commands and turn
//!   inputs, bots, leases and mailboxes, the outbox, outcomes, errors. Imports nothing above.
//!
//! This file starts the consumer loops; the modules re-exported below keep their old paths.
#![forbid(unsafe_code)]

pub mod base;
pub mod handlers;
pub mod session;
pub mod turn;

#[cfg(test)]
mod layers_tests;

pub use base::{bots, error, lease, restart, stop};
pub use turn::{checkpoints, commands, goal_tools};

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer::pull};
use futures::StreamExt as _;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use nanobot_proto::subjects;
use nanobot_runtime::config::Config;
use nanobot_runtime::{service, shutdown, store};

use crate::base::deps::Deps;
use crate::base::lease::Leases;
use crate::base::mailbox::Mailbox;

/// Runs an agent runner until `shutdown` completes, then drains in-flight turns.
pub async fn run(
    cfg: Config,
    health_addr: Option<SocketAddr>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let started = service::start("agent", &cfg, health_addr, shutdown).await?;
    let cancel = started.cancel.clone();
    let deps = Arc::new(deps(cfg, &started).await?);
    let gauges = deps.clone();
    started.health.set_detail(Box::new(move || {
        serde_json::json!({
            "turnsRunning": gauges.active.len(),
            "messagesWaiting": gauges.waiting.load(std::sync::atomic::Ordering::Relaxed),
        })
    }));
    let registry = tokio::spawn(handlers::registry::follow(deps.clone()));
    let stop_server = tokio::spawn(stop::serve(
        deps.nats.clone(),
        subjects::scoped(subjects::STOP_ALL, deps.cfg.scope.as_deref()),
        deps.active.clone(),
        cancel.clone(),
    ));
    let tracker = TaskTracker::new();
    let loops = consume_all(&deps, &tracker).await?;
    started.health.set_ready(true);
    tracing::info!(instance = %started.health.instance, "agent runner ready");
    cancel.cancelled().await;
    started.health.set_ready(false);
    for l in loops {
        let _ = l.await;
    }
    let _ = stop_server.await;
    let _ = registry.await;
    tracker.close();
    let in_flight = tracker.len();
    shutdown::drain("agent turns", tracker.wait()).await;
    tracing::info!(in_flight, "agent runner stopped");
    Ok(())
}

/// What the runner's handlers, sessions and turns share.
async fn deps(cfg: Config, started: &service::Started) -> anyhow::Result<Deps> {
    let redis = store::connect(&cfg.store, &started.cancel)
        .await
        .context("connect to redis")?;
    let bots = bots::Bots::new(bots::build(&cfg, &started.bus.client, &redis));
    Ok(Deps {
        leases: Leases::new(
            redis.clone(),
            &started.health.instance,
            Duration::from_secs_f64(cfg.runner.session_lease_secs),
        ),
        mailbox: Mailbox::open(&started.bus.js).await?,
        turns: Arc::new(Semaphore::new(cfg.runner.max_concurrent_turns as usize)),
        waiting: Default::default(),
        cfg,
        js: started.bus.js.clone(),
        redis,
        bots,
        nats: started.bus.client.clone(),
        active: Arc::new(stop::ActiveTurns::default()),
        started: std::time::Instant::now(),
        cancel: started.cancel.clone(),
        removed: Default::default(),
    })
}

/// Starts the consumer loops of chat messages, cron fires and subagent tasks; their handlers
/// run on `tracker`.
async fn consume_all(
    deps: &Arc<Deps>,
    tracker: &TaskTracker,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    // Messages held here at once: running or waiting for a session another runner holds.
    let permits = Arc::new(Semaphore::new(
        deps.cfg.runner.max_waiting_messages as usize,
    ));
    let mut loops = Vec::new();
    // All three are created before any loop pulls.
    for (stream, name, filter) in [
        (
            subjects::INBOUND_STREAM,
            subjects::INBOUND_CONSUMER,
            subjects::INBOUND_ALL,
        ),
        (
            subjects::JOBS_STREAM,
            subjects::CRON_FIRE_CONSUMER,
            subjects::CRON_FIRE_ALL,
        ),
        (
            subjects::JOBS_STREAM,
            subjects::SUBAGENT_CONSUMER,
            subjects::SUBAGENT_ALL,
        ),
    ] {
        let c = consumer(&deps.js, stream, name, filter, deps.ack_wait()).await?;
        nanobot_runtime::metrics::watch_consumer(c.clone(), deps.cancel.clone());
        loops.push(c);
    }
    Ok(loops
        .into_iter()
        .zip([Kind::Inbound, Kind::Cron, Kind::Subagent])
        .map(|(c, kind)| {
            tokio::spawn(consume(
                c,
                kind,
                deps.clone(),
                permits.clone(),
                tracker.clone(),
                deps.cancel.clone(),
            ))
        })
        .collect())
}

/// Creates the durable consumer, or updates it to this runner's settings.
async fn consumer(
    js: &jetstream::Context,
    stream: &str,
    name: &str,
    filter: &str,
    ack_wait: Duration,
) -> anyhow::Result<jetstream::consumer::Consumer<pull::Config>> {
    let stream = js
        .get_stream(stream)
        .await
        .with_context(|| format!("open stream {stream}"))?;
    stream
        .create_consumer(pull::Config {
            durable_name: Some(name.into()),
            filter_subject: filter.into(),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait,
            // Waiting for a busy session does not count: its receiver keeps extending the
            // deadline. Redeliveries happen when runners die or dependencies fail.
            max_deliver: -1,
            max_ack_pending: 10_000,
            ..Default::default()
        })
        .await
        .with_context(|| format!("create consumer {name}"))
}

#[derive(Clone, Copy)]
enum Kind {
    Inbound,
    Cron,
    Subagent,
}

/// Background jobs (cron fires, subagent tasks) one consumer loop holds at once.
const JOBS_IN_FLIGHT: usize = 8;

/// Pulls messages while a permit is free, so at most `maxWaitingMessages` messages are held
/// here (at most `maxConcurrentTurns` of them running) and the rest wait in JetStream, not in
/// memory. Chat messages take their permit before they are pulled; background jobs (few) take
/// theirs once pulled (at most [`JOBS_IN_FLIGHT`] per loop), so an idle job consumer never
/// holds permits the chat messages could use.
async fn consume(
    consumer: jetstream::consumer::Consumer<pull::Config>,
    kind: Kind,
    deps: Arc<Deps>,
    permits: Arc<Semaphore>,
    tracker: TaskTracker,
    cancel: CancellationToken,
) {
    let in_flight = Arc::new(Semaphore::new(JOBS_IN_FLIGHT));
    loop {
        let pool = match kind {
            Kind::Inbound => &permits,
            Kind::Cron | Kind::Subagent => &in_flight,
        };
        let held = tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            p = pool.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        let batch = tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            b = consumer.fetch().max_messages(1).expires(Duration::from_secs(5)).messages() => b,
        };
        let mut batch = match batch {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "failed to pull messages, retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        // A pull waits up to its expiry for a message: stay responsive to shutdown meanwhile.
        let next = tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            n = batch.next() => n,
        };
        let Some(next) = next else {
            continue;
        };
        let msg = match next {
            Ok(m) => m,
            Err(e) => {
                // A 503 while the consumer's leader is elected again: pause, as for a failed
                // pull, instead of pulling again at once (thousands of pulls a second).
                tracing::warn!(error = %e, "failed to receive message, retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let (deps, permits) = (deps.clone(), permits.clone());
        tracker.spawn(async move {
            let _permit = match kind {
                Kind::Inbound => held,
                Kind::Cron | Kind::Subagent => {
                    let waiting = async {
                        tokio::select! {
                            _ = deps.cancel.cancelled() => None,
                            p = permits.acquire_owned() => p.ok(),
                        }
                    };
                    let permit = handlers::keep_alive(&msg, deps.ack_wait(), waiting).await;
                    let Some(permit) = permit else {
                        handlers::settle(&deps, &msg, Err(anyhow::anyhow!("runner shutting down")))
                            .await;
                        return;
                    };
                    drop(held);
                    permit
                }
            };
            match kind {
                Kind::Inbound => handlers::inbound::handle(&deps, msg).await,
                Kind::Cron => handlers::cron_fire::handle(&deps, msg).await,
                Kind::Subagent => handlers::subagent::handle(&deps, msg).await,
            }
        });
    }
}

//! Memory workers: consume memory jobs (`subjects::CONSOLIDATE_ALL`, a JetStream work queue):
//! consolidation of sessions over their context budget, `/new` archives and idle sessions
//! (AutoCompact) into the bot's `memory/history.jsonl`, Dream runs and the Dream commands;
//! answer each on `subjects::consolidated`. One worker at a time writes a bot's memory files
//! (the per-bot memory lease, `nanobot_runtime::lease`); session writes carry the session
//! lease's fencing token.
//!
//! # Layout
//! - `bots`: per-bot sessions, LLM client, prompt builder and tool list.
//! - `jobs`: one job end to end (dedup marker, memory lease, dispatch by kind).
//! - `autocompact`: the scan asking for idle sessions to be archived.
//! - `consolidate`: the Consolidator.
//! - `dream`: Dream runs and the Dream commands; `git`: the memory files' git history.
//! - `writer`: the memory lease check before every write.
//! - `registry`: bots added, changed and removed live.
#![forbid(unsafe_code)]

pub mod autocompact;
pub mod bots;
pub mod consolidate;
pub mod dream;
pub mod git;
pub mod jobs;
pub mod registry;
pub mod writer;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, AckKind, consumer::pull};
use prost::Message as _;
use tracing::Instrument as _;

use nanobot_proto::{ConsolidationRequest, ConsolidationResult, subjects};
use nanobot_runtime::bus::work;
use nanobot_runtime::config::Config;
use nanobot_runtime::{service, shutdown, store, telemetry};

pub use jobs::Deps;

/// Runs a memory worker until `shutdown`.
pub async fn run(
    cfg: Config,
    health_addr: Option<SocketAddr>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let started = service::start("memory", &cfg, health_addr, shutdown).await?;
    let cancel = started.cancel.clone();
    let redis = store::connect(&cfg.store, &cancel)
        .await
        .context("connect to redis")?;
    let stream = started
        .bus
        .js
        .get_stream(subjects::JOBS_STREAM)
        .await
        .context("open jobs stream")?;
    // Jobs may run long (Dream): a worker extends the deadline while it works, so the
    // redelivery delay only applies to a worker that died.
    let ack_wait = Duration::from_secs_f64(cfg.runner.redeliver_after_secs.max(1.0));
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(subjects::CONSOLIDATE_CONSUMER.into()),
            filter_subject: subjects::CONSOLIDATE_ALL.into(),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait,
            max_deliver: 20,
            ..Default::default()
        })
        .await
        .context("create memory job consumer")?;
    nanobot_runtime::metrics::watch_consumer(consumer.clone(), cancel.clone());
    let (cfg, follower) = registry::open(&started.bus.js, cfg).await;
    let deps = std::sync::Arc::new(Deps::new(
        cfg,
        redis,
        started.bus.client.clone(),
        &started.health.instance,
    ));
    let scanner = {
        let (deps, js, cancel) = (deps.clone(), started.bus.js.clone(), cancel.clone());
        tokio::spawn(async move { autocompact::run(&deps, &js, &cancel).await })
    };
    let follower =
        follower.map(|f| tokio::spawn(registry::follow(deps.clone(), f, cancel.clone())));
    started.health.set_ready(true);
    tracing::info!(instance = %started.health.instance, "memory worker ready");
    let mut handled = 0u64;
    loop {
        // One job at a time, pulled when this worker is free: nothing waits here that another
        // worker could run.
        let Some(msg) = work::pull_one(&consumer, &cancel, "memory jobs").await else {
            break;
        };
        let _busy = started.health.track();
        let every = work::progress_every(ack_wait);
        work::while_in_progress(&msg, every, handle(&deps, msg.clone())).await;
        handled += 1;
    }
    let _ = scanner.await;
    if let Some(follower) = follower {
        let _ = follower.await;
    }
    shutdown::drain("memory worker", async {}).await;
    tracing::info!(handled, "memory worker stopped");
    Ok(())
}

/// The `channel` label of a memory job's metrics.
const MEMORY_CHANNEL: &str = "memory";

/// Runs one job and settles it: acked and answered when done; redelivered later when it may
/// succeed then (busy, a dependency failed); terminated and answered with an error when it
/// never can.
async fn handle(deps: &Deps, msg: jetstream::Message) {
    let request = match ConsolidationRequest::decode(msg.payload.clone()) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(subject = %msg.subject, error = %e, "dropping undecodable memory job");
            let _ = msg.ack_with(AckKind::Term).await;
            return;
        }
    };
    let Some(bot) = deps.bot(&request.bot) else {
        tracing::warn!(bot = %request.bot, "dropping memory job for unknown bot");
        let _ = msg.ack_with(AckKind::Term).await;
        return;
    };
    let kind = request.kind();
    let span = tracing::info_span!("memory_job", session_id = %request.session_key, kind = kind.as_str_name(), job_id = %request.id);
    telemetry::set_parent_from(&span, msg.headers.as_ref());
    async {
        // Its LLM calls count under its bot.
        let scope = nanobot_runtime::metrics::Scope::new(&bot.spec.id, MEMORY_CHANNEL);
        let run = nanobot_runtime::metrics::scoped(scope, jobs::run(deps, &bot, &request));
        let (ack, result) = match run.await {
            Ok(result) => (AckKind::Ack, result),
            Err(e) if e.retryable() => {
                tracing::warn!("memory job will be retried: {e:#}");
                let _ = msg
                    .ack_with(AckKind::Nak(Some(Duration::from_secs(2))))
                    .await;
                return;
            }
            Err(e) => {
                tracing::error!("failed to run memory job: {e:#}");
                let result = ConsolidationResult {
                    error: e.to_user_message(),
                    ..Default::default()
                };
                (AckKind::Term, result)
            }
        };
        if let Err(e) = msg.ack_with(ack).await {
            tracing::warn!(error = %e, "failed to acknowledge memory job");
        }
        let result = ConsolidationResult {
            request_id: request.id.clone(),
            bot: bot.spec.id.clone(),
            session_key: request.session_key.clone(),
            ..result
        };
        let payload = bytes::Bytes::from(result.encode_to_vec());
        if let Err(e) = deps
            .nats
            .publish_with_headers(
                subjects::consolidated(&bot.spec.id),
                nanobot_runtime::bus::headers(None),
                payload,
            )
            .await
        {
            tracing::debug!(error = %e, "failed to announce memory job result");
        }
    }
    .instrument(span)
    .await;
}

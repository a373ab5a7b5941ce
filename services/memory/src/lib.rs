//! Memory workers: consume consolidation requests (`subjects::CONSOLIDATE_ALL`, a JetStream
//! work queue), archive old session messages into the bot's `memory/history.jsonl`, advance
//! `last_consolidated` in Redis, and announce results on `subjects::consolidated`. Writers of
//! one bot's memory files are serialised by the per-bot memory lease (the fleet's one lease
//! primitive, `nanobot_runtime::lease`) plus a file lock.
//!
//! # Layout
//! - `consolidate`: the archive rules.
#![forbid(unsafe_code)]

pub mod consolidate;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, AckKind, consumer::pull};
use futures::StreamExt as _;
use prost::Message as _;
use tracing::Instrument as _;

use nanobot_core::session::SessionStore;
use nanobot_proto::{ConsolidationRequest, ConsolidationResult, keys, subjects};
use nanobot_runtime::config::Config;
use nanobot_runtime::lease::Leases;
use nanobot_runtime::{service, shutdown, store, telemetry};

/// How long a worker holds a bot's memory lease without renewing it.
const MEMORY_LOCK_TTL: Duration = Duration::from_secs(60);

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
    let consumer = stream
        .get_or_create_consumer(
            subjects::CONSOLIDATE_CONSUMER,
            pull::Config {
                durable_name: Some(subjects::CONSOLIDATE_CONSUMER.into()),
                filter_subject: subjects::CONSOLIDATE_ALL.into(),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(120),
                max_deliver: 10,
                ..Default::default()
            },
        )
        .await
        .context("create consolidation consumer")?;
    let mut messages = consumer
        .messages()
        .await
        .context("subscribe to consolidation requests")?;
    started.health.set_ready(true);
    tracing::info!(instance = %started.health.instance, "memory worker ready");
    let mut handled = 0u64;
    loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            next = messages.next() => match next {
                Some(Ok(msg)) => {
                    let _busy = started.health.track();
                    handle(&cfg, &redis, &started.bus.client, &started.health.instance, msg).await;
                    handled += 1;
                }
                Some(Err(e)) => tracing::warn!(error = %e, "failed to receive consolidation request"),
                None => break,
            },
        }
    }
    shutdown::drain("memory worker", async {}).await;
    tracing::info!(handled, "memory worker stopped");
    Ok(())
}

async fn handle(
    cfg: &Config,
    redis: &nanobot_runtime::store::Store,
    nats: &async_nats::Client,
    instance: &str,
    msg: jetstream::Message,
) {
    let request = match ConsolidationRequest::decode(msg.payload.clone()) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(subject = %msg.subject, error = %e, "dropping undecodable consolidation request");
            let _ = msg.ack_with(AckKind::Term).await;
            return;
        }
    };
    let Some(bot) = cfg.bot(&request.bot) else {
        tracing::warn!(bot = %request.bot, "dropping consolidation request for unknown bot");
        let _ = msg.ack_with(AckKind::Term).await;
        return;
    };
    let span = tracing::info_span!("consolidate", session_id = %request.session_key, reason = %request.reason);
    telemetry::set_parent_from(&span, msg.headers.as_ref());
    async {
        let leases = Leases::new(redis.clone(), instance, MEMORY_LOCK_TTL);
        let Some(guard) = leases
            .acquire_within(
                &keys::memory_lock(&bot.id),
                &keys::memory_fence(&bot.id),
                MEMORY_LOCK_TTL / 4,
            )
            .await
        else {
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
            return;
        };
        let store = SessionStore::new(redis.clone(), &bot.id);
        let outcome = if request.reason == "archive" {
            consolidate::archive_snapshot(&bot, &request.session_key, &request.messages_json).await
        } else {
            consolidate::by_tokens(&store, &bot, &cfg.agents.defaults, &request.session_key).await
        };
        guard.release().await;
        let result = match outcome {
            Ok(o) => {
                let _ = msg.ack().await;
                ConsolidationResult {
                    request_id: request.id.clone(),
                    bot: bot.id.clone(),
                    session_key: request.session_key.clone(),
                    archived_messages: u32::try_from(o.archived).unwrap_or(u32::MAX),
                    last_consolidated: u32::try_from(o.last_consolidated).unwrap_or(u32::MAX),
                    error: String::new(),
                }
            }
            Err(e) => {
                tracing::error!("failed to consolidate: {e:#}");
                let _ = msg
                    .ack_with(AckKind::Nak(Some(Duration::from_secs(5))))
                    .await;
                ConsolidationResult {
                    request_id: request.id.clone(),
                    bot: bot.id.clone(),
                    session_key: request.session_key.clone(),
                    error: "consolidation failed".into(),
                    ..Default::default()
                }
            }
        };
        let payload = bytes::Bytes::from(result.encode_to_vec());
        if let Err(e) = nats
            .publish_with_headers(
                subjects::consolidated(&bot.id),
                nanobot_runtime::bus::headers(None),
                payload,
            )
            .await
        {
            tracing::debug!(error = %e, "failed to announce consolidation result");
        }
    }
    .instrument(span)
    .await;
}

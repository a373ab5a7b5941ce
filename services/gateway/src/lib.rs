//! Channel gateways of the nanobot fleet: they turn chat events into
//! [`InboundMessage`](nanobot_proto::InboundMessage)s published on
//! [`subjects::inbound`](nanobot_proto::subjects::inbound) (JetStream stream
//! [`subjects::INBOUND_STREAM`](nanobot_proto::subjects::INBOUND_STREAM)), and deliver the
//! [`OutboundMessage`](nanobot_proto::OutboundMessage)s the agent runners publish on
//! [`subjects::outbound`](nanobot_proto::subjects::outbound) (stream
//! [`subjects::OUTBOUND_STREAM`](nanobot_proto::subjects::OUTBOUND_STREAM)).
//!
//! Channels served today: the OpenAI-compatible HTTP API (`nanobot serve` upstream) and the
//! chat channels of [`channels`] (Telegram, Slack, Discord, email, WebSocket and its web chat).
//!
//! # Layout
//! - [`api`]: the OpenAI-compatible HTTP API (`/v1/chat/completions`, `/v1/models`, `/health`).
//! - [`channels`]: the chat-channel layer (one module per channel behind one trait) and its
//!   durable outbound delivery.
//! - [`outbound`]: outbound delivery: the per-replica consumer of a channel's replies and the
//!   routing of each reply to the request waiting for it.
//! - [`error`]: the split between user-facing text and internal error detail.
//! - [`render`]: Markdown → chat formats (Telegram HTML, splitting long replies).
//! - [`peers`]: the live gateway replicas, spreading the channels' long connections among them.
#![forbid(unsafe_code)]

pub mod api;
pub mod channels;
pub mod error;
pub mod outbound;
pub mod peers;
pub mod registry;
pub mod render;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use nanobot_runtime::config::Config;
use nanobot_runtime::{service, shutdown};

/// Channel name of the HTTP API, as upstream (`api:<session_id>` session keys).
pub const API_CHANNEL: &str = "api";

/// Runs the gateway until `shutdown` completes: starts the outbound consumer of the API
/// channel, then serves the HTTP API on `api.host:api.port`. On shutdown it stops accepting,
/// lets in-flight requests finish within [`shutdown::GRACE`] and returns.
pub async fn run(
    cfg: Config,
    health_addr: Option<SocketAddr>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    run_seeding(cfg, BTreeMap::new(), health_addr, shutdown).await
}

/// [`run`], seeding the bot registry with `seed` (the config file's `bots` as written,
/// references unresolved) before the API's first `/v1/bots` request.
pub async fn run_seeding(
    cfg: Config,
    seed: BTreeMap<String, serde_json::Value>,
    health_addr: Option<SocketAddr>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let started = service::start("gateway", &cfg, health_addr, shutdown).await?;
    let pending = Arc::new(outbound::Pending::default());
    // The consumer outlives the HTTP drain: in-flight requests still need their replies.
    let consumer_cancel = CancellationToken::new();
    let consumer = outbound::start(
        &started.bus.js,
        API_CHANNEL,
        pending.clone(),
        consumer_cancel.clone(),
    )
    .await
    .context("start the api outbound consumer")?;

    let channel_cancel = CancellationToken::new();
    let mut channel_tasks = if !cfg.has_chat_channels() {
        tokio::task::JoinSet::new()
    } else {
        start_channels(&cfg, &started, &channel_cancel).await?
    };

    let addr = format!("{}:{}", cfg.api.host, cfg.api.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("bind the api listener {addr}"))?;
    let bound = listener
        .local_addr()
        .context("read the api listener address")?;
    let state = api::AppState::new(
        &cfg,
        started.bus.js.clone(),
        pending,
        started.health.clone(),
    )
    .seeding(seed)
    .following(
        nanobot_runtime::bot_registry::LiveConfig::follow(
            &started.bus.js,
            cfg.clone(),
            &started.cancel,
        )
        .await,
    );
    let server = tokio::spawn(api::serve(
        listener,
        api::router(state),
        cfg.api.read_timeout(),
        started.cancel.clone(),
    ));
    started.health.set_ready(true);
    tracing::info!(addr = %bound, "api listening");

    started.cancel.cancelled().await;
    started.health.set_ready(false);
    let in_flight = started.health.in_flight();
    tracing::info!(in_flight, "stopping the api");
    shutdown::drain("api requests", async {
        if let Err(e) = server.await {
            tracing::warn!(error = %e, "api server task failed");
        }
    })
    .await;
    channel_cancel.cancel();
    shutdown::drain("chat channels", async {
        while channel_tasks.join_next().await.is_some() {}
    })
    .await;
    consumer_cancel.cancel();
    if let Err(e) = consumer.await {
        tracing::warn!(error = %e, "outbound consumer task failed");
    }
    Ok(())
}

/// Starts the chat channels, the gateway beacons that place them and the bot registry
/// follower; returns their tasks.
async fn start_channels(
    cfg: &Config,
    started: &service::Started,
    cancel: &CancellationToken,
) -> anyhow::Result<tokio::task::JoinSet<()>> {
    let redis = nanobot_runtime::store::connect(&cfg.store, &started.cancel)
        .await
        .context("connect to redis")?;
    let instance = started.health.instance.clone();
    let peers = peers::Peers::start(&instance, &started.bus.client, cfg.scope.as_deref(), cancel)
        .await
        .context("start the gateway beacons")?;
    let deps = channels::ChannelDeps {
        js: started.bus.js.clone(),
        nats: started.bus.client.clone(),
        redis,
        instance,
        placement: Some(peers),
    };
    let (running, tasks) = channels::start(cfg, &deps, cancel)
        .await
        .context("start the chat channels")?;
    tracing::info!(channels = ?running, "chat channels started");
    let mut tasks = tasks;
    tasks.spawn(registry::follow(cfg.clone(), running, deps, cancel.clone()));
    Ok(tasks)
}

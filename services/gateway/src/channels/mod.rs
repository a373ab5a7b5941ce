//! The chat-channel layer: one module per channel behind [`Channel`]. A channel instance serves
//! one bot (its own token, workspace and settings), receives its platform's events and publishes
//! [`InboundMessage`]s on [`subjects::inbound`]; the shared [`delivery`] loop hands it the
//! bot's [`OutboundMessage`]s from a durable JetStream consumer. Adding Discord or Slack is one
//! new module implementing [`Channel`] plus one line in [`start`].
//!
//! # Layout
//! - [`acl`]: `allowFrom` matching.
//! - [`poison`]: text over the bus limit cut to fit, a handler's panic turned into a skip: no
//!   update can wedge its channel.
//! - [`media`]: stored attachment names (never paths) and the per-message attachment caps.
//! - [`delivery`]: the durable outbound consumer shared by the gateway replicas, with the
//!   delivered-record that keeps a redelivery from sending twice.
//! - [`stream`]: edit-in-place streaming (one preview message per reply, edited as deltas
//!   arrive, taken over by the final reply) for Slack and Discord.
//! - [`telegram`]: Telegram through teloxide.
//! - [`email`]: email, IMAP polling in and SMTP out.
//! - [`slack`]: Slack (Socket Mode or the Events API) over reqwest and tokio-tungstenite.
//! - [`discord`]: Discord through twilight.
//! - [`websocket`]: upstream's WebSocket channel and the web chat page.
//! - [`feishu`], [`dingtalk`], [`wecom`], [`qq`], [`napcat`]: the Chinese platforms; their Redis
//!   state lives in the generic `keys::channel_*` family.

pub mod acl;
mod backoff;
pub mod delivery;
pub mod dingtalk;
pub mod discord;
pub mod email;
pub mod feishu;
mod media;
pub mod napcat;
mod poison;
pub mod qq;
pub mod slack;
mod stream;
pub mod telegram;
mod typing;
pub mod websocket;
pub mod wecom;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_nats::jetstream;
use async_trait::async_trait;
use nanobot_runtime::lease::{Leases, Placement};
use nanobot_runtime::store::Store;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use nanobot_proto::{InboundMessage, OutboundMessage};
use nanobot_runtime::bus::{self, BusError};
use nanobot_runtime::config::Config;

pub use self::delivery::{Progress, SendError};

/// Settings every chat channel has, as upstream's `channels.<name>` keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelSettings {
    /// `allowFrom`: ids, usernames or `"*"`; empty denies everyone.
    pub allow_from: Vec<String>,
    /// Deliver progress text (`channels.<name>.sendProgress`, else `channels.sendProgress`).
    pub send_progress: bool,
    /// Deliver tool hints (`channels.<name>.sendToolHints`, else `channels.sendToolHints`).
    pub send_tool_hints: bool,
}

impl ChannelSettings {
    /// Returns a section's settings: its `allowFrom`, and its `sendProgress`/`sendToolHints`
    /// overrides, else `channels.sendProgress`/`channels.sendToolHints`.
    pub fn from_overrides(
        cfg: &Config,
        allow_from: &[String],
        send_progress: Option<bool>,
        send_tool_hints: Option<bool>,
    ) -> Self {
        Self {
            allow_from: allow_from.to_vec(),
            send_progress: send_progress.unwrap_or(cfg.channels.send_progress),
            send_tool_hints: send_tool_hints.unwrap_or(cfg.channels.send_tool_hints),
        }
    }
}

/// One chat channel serving one bot.
#[async_trait]
pub trait Channel: Send + Sync + 'static {
    /// Returns the channel name (`telegram`): the subject token and session-key prefix.
    fn name(&self) -> &'static str;

    /// Returns the bot this instance serves.
    fn bot(&self) -> &str;

    /// Returns the shared settings.
    fn settings(&self) -> &ChannelSettings;

    /// Receives platform events until `cancel`, publishing chat messages through `inbound`.
    async fn run(
        self: Arc<Self>,
        inbound: Inbound,
        cancel: CancellationToken,
    ) -> anyhow::Result<()>;

    /// Delivers one outbound message (final, error, progress or tool hint). Returns once the
    /// platform accepted every part; `progress` records parts already accepted so a
    /// redelivery resumes after them.
    async fn send(&self, msg: &OutboundMessage, progress: &mut Progress) -> Result<(), SendError>;

    /// Sees every outbound message of the bot on every replica, in publish order and without
    /// durability: stream deltas, and finals (to stop a typing indicator).
    async fn observe(&self, _msg: &OutboundMessage) {}
}

/// Publishes inbound chat messages on JetStream, de-duplicated by message id.
#[derive(Debug, Clone)]
pub struct Inbound {
    js: jetstream::Context,
}

impl Inbound {
    /// Returns the publisher over `js`.
    pub fn new(js: jetstream::Context) -> Self {
        Self { js }
    }

    /// Publishes `msg` on its session's subject with its id as the de-duplication id: a
    /// re-publish (after a poller takeover) is dropped by the stream, and past its window by
    /// the runners' seen-set.
    /// Text over the broker's message limit is cut to fit, with a note ([`poison::fit`]).
    ///
    /// The turn's trace starts here: inside a [`receive_span`] (which the
    /// channel opened when the platform's event arrived, so ACL, media download and
    /// transcription are in it) the message continues that span; otherwise the publish opens
    /// a `receive {channel}` root span itself. Either way the turn's spans in every process
    /// hang under the gateway's root and carry `nanobot.bot` and `nanobot.channel`.
    pub async fn publish(&self, msg: &InboundMessage) -> Result<(), BusError> {
        let current = tracing::Span::current();
        let span = if is_receive_span(&current) {
            current
        } else {
            receive_span(&msg.bot, &msg.channel)
        };
        span.record("messaging.message.id", msg.id.as_str());
        self.publish_in_span(msg).instrument(span).await
    }

    async fn publish_in_span(&self, msg: &InboundMessage) -> Result<(), BusError> {
        let limit = self.js.client().server_info().max_payload;
        let msg = poison::fit(msg, limit);
        if let std::borrow::Cow::Owned(cut) = &msg {
            tracing::warn!(inbound_id = %cut.id, channel = %cut.channel, limit, "inbound text over the message size limit cut to fit");
        }
        bus::publish(&self.js, msg.subject(), Some(&msg.id), msg.as_ref()).await
    }
}

/// The name of the gateway's root span of a channel turn.
const RECEIVE_SPAN: &str = "receive";

/// Returns the root span of one platform event of `bot` on `channel` (`receive {channel}`,
/// tagged with both). A channel that opens it when the event arrives and handles the event
/// inside it (`.instrument(span)`) gets its ACL check, media download and transcription into
/// the turn's trace; [`Inbound::publish`] opens one itself otherwise.
pub fn receive_span(bot: &str, channel: &str) -> tracing::Span {
    let span = tracing::info_span!(
        parent: None,
        "receive",
        "otel.name" = %format_args!("{RECEIVE_SPAN} {channel}"),
        "otel.kind" = "server",
        "messaging.system" = %channel,
        "messaging.message.id" = tracing::field::Empty,
    );
    nanobot_runtime::telemetry::root(&span, bot, channel);
    span
}

fn is_receive_span(span: &tracing::Span) -> bool {
    span.metadata().is_some_and(|m| m.name() == RECEIVE_SPAN)
}

/// The live channels of one name, by bot: the delivery loops read it per message, so a bot
/// added or removed while the gateway runs is served (or not) at once.
pub type LiveBots = Arc<std::sync::RwLock<BTreeMap<String, Arc<dyn Channel>>>>;

/// Returns bot `bot`'s channel in `bots`.
fn live_get(bots: &LiveBots, bot: &str) -> Option<Arc<dyn Channel>> {
    bots.read()
        .unwrap_or_else(|e| e.into_inner())
        .get(bot)
        .cloned()
}

/// The channels of one gateway replica, by channel name and bot, with each bot's
/// cancellation token (stopping a bot stops its receivers only).
#[derive(Default, Clone)]
pub struct Channels {
    by_name: BTreeMap<&'static str, LiveBots>,
    receivers: BTreeMap<String, CancellationToken>,
    webhooks: telegram::webhook::Webhooks,
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self
            .by_name
            .iter()
            .map(|(n, bots)| {
                let bots = bots.read().unwrap_or_else(|e| e.into_inner());
                format!("{n}: {:?}", bots.keys().collect::<Vec<_>>())
            })
            .collect();
        f.debug_list().entries(names).finish()
    }
}

impl Channels {
    fn add(&mut self, channel: Arc<dyn Channel>) {
        self.by_name
            .entry(channel.name())
            .or_default()
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(channel.bot().to_string(), channel);
    }

    /// Returns whether no channel is configured.
    pub fn is_empty(&self) -> bool {
        self.by_name
            .values()
            .all(|b| b.read().unwrap_or_else(|e| e.into_inner()).is_empty())
    }

    /// Stops bot `bot`'s receivers and takes its channels out of delivery (its replies still
    /// queued are dropped; its data is kept).
    pub fn stop_bot(&mut self, bot: &str) {
        if let Some(token) = self.receivers.remove(bot) {
            token.cancel();
        }
        self.webhooks.forget(bot);
        for bots in self.by_name.values() {
            bots.write().unwrap_or_else(|e| e.into_inner()).remove(bot);
        }
    }

    /// (Re)starts bot `bot` from `cfg` (a config serving that bot alone, [`nanobot_runtime::bot_registry::only`]):
    /// stops its old receivers, builds its channels, starts their receivers under a token of
    /// their own and, for a channel name new to this replica, its delivery loops. Other bots'
    /// channels and deliveries are untouched.
    pub async fn start_bot(
        &mut self,
        cfg: &Config,
        bot: &str,
        deps: &ChannelDeps,
        cancel: &CancellationToken,
        tasks: &mut JoinSet<()>,
    ) -> anyhow::Result<()> {
        let mut built = Channels::default();
        let telegram = build(cfg, deps, &mut built)?;
        self.stop_bot(bot);
        let telegram: Vec<_> = telegram.into_iter().filter(|c| c.bot() == bot).collect();
        let inbound = Inbound::new(deps.js.clone());
        self.webhooks
            .serve(&telegram, &inbound, cancel, tasks)
            .await?;
        let token = cancel.child_token();
        for (name, bots) in built.by_name {
            let channels: Vec<_> = bots
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .values()
                .cloned()
                .collect();
            let is_new = !self.by_name.contains_key(name);
            for channel in channels.into_iter().filter(|c| c.bot() == bot) {
                spawn_receiver(channel.clone(), deps, &token, tasks);
                self.add(channel);
            }
            if is_new && let Some(live) = self.by_name.get(name) {
                delivery::start(name, live.clone(), deps, cancel.clone(), tasks).await?;
            }
        }
        self.receivers.insert(bot.to_string(), token);
        Ok(())
    }
}

fn spawn_receiver(
    channel: Arc<dyn Channel>,
    deps: &ChannelDeps,
    cancel: &CancellationToken,
    tasks: &mut JoinSet<()>,
) {
    let inbound = Inbound::new(deps.js.clone());
    let cancel = cancel.clone();
    tasks.spawn(async move {
        let bot = channel.bot().to_string();
        let name = channel.name();
        if let Err(e) = channel.run(inbound, cancel).await {
            tracing::error!(channel = name, %bot, error = format!("{e:#}"), "channel receiver failed");
        }
    });
}

/// What the channels need from the gateway.
#[derive(Clone)]
pub struct ChannelDeps {
    /// JetStream.
    pub js: jetstream::Context,
    /// Core NATS.
    pub nats: async_nats::Client,
    /// Redis.
    pub redis: Store,
    /// This replica's instance name (lease holder).
    pub instance: String,
    /// Where the channels' connection leases go among the replicas ([`crate::peers`]);
    /// `None`: first come, first served.
    pub placement: Option<Arc<dyn Placement>>,
}

impl std::fmt::Debug for ChannelDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelDeps")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl ChannelDeps {
    /// Returns the lease taker for a channel's long connection (poller, gateway socket): held
    /// by this replica's name, lasting `ttl`, spread over the replicas by [`Self::placement`].
    pub fn leases(&self, ttl: std::time::Duration) -> Leases {
        let leases = Leases::new(self.redis.clone(), &self.instance, ttl);
        match &self.placement {
            Some(placement) => leases.placed(placement.clone()),
            None => leases,
        }
    }
}

/// Builds every configured channel of every bot into `channels`.
/// Returns the Telegram ones again (the webhook listener serves them).
fn build(
    cfg: &Config,
    deps: &ChannelDeps,
    channels: &mut Channels,
) -> anyhow::Result<Vec<Arc<telegram::TelegramChannel>>> {
    let mut telegram = Vec::new();
    for tg in cfg.telegram_bots() {
        let channel = Arc::new(telegram::TelegramChannel::new(cfg, tg, deps)?);
        telegram.push(channel.clone());
        channels.add(channel);
    }
    for email in cfg.email_bots() {
        channels.add(Arc::new(email::EmailChannel::new(cfg, email, deps)?));
    }
    slack::SlackChannel::all(cfg, deps)?
        .into_iter()
        .for_each(|c| channels.add(c));
    for dc in cfg.discord_bots() {
        channels.add(Arc::new(discord::DiscordChannel::new(cfg, dc, deps)?));
    }
    if let Some(ws) = cfg.websocket() {
        channels.add(Arc::new(websocket::WebSocketChannel::new(cfg, ws, deps)?));
    }
    for channel in feishu::all(cfg, deps)?
        .into_iter()
        .chain(dingtalk::all(cfg, deps)?)
        .chain(wecom::all(cfg, deps)?)
        .chain(qq::all(cfg, deps)?)
        .chain(napcat::all(cfg, deps)?)
    {
        channels.add(channel);
    }
    Ok(telegram)
}

/// Builds every configured channel of every bot, starts their receivers (each bot under a
/// token of its own, a child of `cancel`) and the outbound delivery loops, and returns the
/// running tasks (they stop on `cancel`).
pub async fn start(
    cfg: &Config,
    deps: &ChannelDeps,
    cancel: &CancellationToken,
) -> anyhow::Result<(Channels, JoinSet<()>)> {
    let mut channels = Channels::default();
    let telegram = build(cfg, deps, &mut channels)?;
    let mut tasks = JoinSet::new();
    let inbound = Inbound::new(deps.js.clone());
    channels
        .webhooks
        .serve(&telegram, &inbound, cancel, &mut tasks)
        .await?;
    for (name, bots) in &channels.by_name.clone() {
        let all: Vec<_> = bots
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for channel in all {
            let token = channels
                .receivers
                .entry(channel.bot().to_string())
                .or_insert_with(|| cancel.child_token())
                .clone();
            spawn_receiver(channel, deps, &token, &mut tasks);
        }
        delivery::start(name, bots.clone(), deps, cancel.clone(), &mut tasks).await?;
    }
    Ok((channels, tasks))
}

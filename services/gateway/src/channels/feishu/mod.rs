//! Feishu / Lark over plain reqwest (REST) and tokio-tungstenite (the long connection): one
//! [`FeishuChannel`] per app.
//!
//! - Receiving in `websocket` mode ([`ws`], 0.3.5's way): `POST /callback/ws/endpoint` with the
//!   App ID and Secret hands out a WebSocket URL; Feishu then sends protobuf [`frame`]s (data
//!   frames carry events and are acknowledged one by one; control frames are ping/pong).
//!   Exactly one gateway replica holds the connection, under the lease
//!   [`keys::channel_connection`] (fenced); another takes over within `leaseSecs` after the
//!   holder dies.
//! - Receiving in `webhook` mode ([`events`]): Feishu POSTs events to the gateway's listener
//!   (every replica listens); an encrypted body is decrypted with `encryptKey` ([`crypto`]) and
//!   its signature checked, `verificationToken` compared, the `url_verification` challenge
//!   answered.
//! - Each event ([`receive`]): `im.message.receive_v1` only; one inbound message per Feishu
//!   message across redeliveries and replicas (the event id marked done in
//!   [`keys::channel_event`], the inbound id `feishu:{message_id}` de-duplicated by the stream);
//!   groups answered when @mentioned unless `groupPolicy` is `open`; `allowFrom` (open ids),
//!   pairing codes for unknown direct senders; the `reactEmoji` reaction; images and files
//!   downloaded.
//! - Sending ([`outbound`]): `POST /open-apis/im/v1/messages` as text, rich text (`post`) or a
//!   markdown card as 0.3.5 picks, in chunks within Feishu's byte limit, each with a `uuid`
//!   derived from the delivery id and the part so a redelivery after a crash is not posted
//!   twice; images and files uploaded; `doneEmoji` on the answered message. With `streaming`,
//!   one card is posted and updated in place while the reply is written.
//!
//! The App Secret, the Encrypt Key, the Verification Token and the tenant token are never
//! logged: errors carry Feishu's codes only.
//!
//! [`keys::channel_connection`]: nanobot_proto::keys::channel_connection
//! [`keys::channel_event`]: nanobot_proto::keys::channel_event

mod api;
mod crypto;
mod events;
pub mod format;
pub mod frame;
mod inbound;
mod outbound;
mod reaction;
mod receive;
mod render;
mod ws;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use reqwest::Method;
use tokio_util::sync::CancellationToken;

use nanobot_core::pairing::PairingStore;
use nanobot_proto::OutboundMessage;
use nanobot_runtime::config::Config;
use nanobot_runtime::config::feishu::{FeishuBot, FeishuConfig};
use nanobot_runtime::lease::Leases;
use nanobot_runtime::store::Store;

use super::stream::Streamer;
use super::{Channel, ChannelDeps, ChannelSettings, Inbound, Progress, SendError};
use crate::channels::backoff::Backoff;

pub use self::render::split_within_bytes;

/// Channel name (subject token, session prefix).
pub const CHANNEL: &str = "feishu";

/// Builds the Feishu / Lark channel of every bot that enables it (no network yet).
pub fn all(cfg: &Config, deps: &ChannelDeps) -> anyhow::Result<Vec<Arc<dyn Channel>>> {
    cfg.feishu_bots()
        .into_iter()
        .map(|b| FeishuChannel::new(cfg, b, deps).map(|c| Arc::new(c) as Arc<dyn Channel>))
        .collect()
}

/// One bot's Feishu / Lark channel.
pub struct FeishuChannel {
    bot_id: String,
    cfg: FeishuConfig,
    settings: ChannelSettings,
    api: api::Api,
    redis: Store,
    pairing: PairingStore,
    leases: Leases,
    media_dir: PathBuf,
    /// Per-message attachment caps.
    caps: crate::channels::media::Caps,
    /// The bot's own open id (`/open-apis/bot/v3/info`), for mentions.
    me: OnceLock<String>,
    /// Streaming cards (`streaming`).
    streams: Streamer,
}

impl std::fmt::Debug for FeishuChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeishuChannel")
            .field("bot", &self.bot_id)
            .field("app_id", &self.cfg.app_id)
            .finish_non_exhaustive()
    }
}

impl FeishuChannel {
    /// Builds the channel of one bot (no network yet).
    pub fn new(cfg: &Config, bot: FeishuBot, deps: &ChannelDeps) -> anyhow::Result<Self> {
        let c = &bot.config;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("build the Feishu HTTP client")?;
        let settings =
            ChannelSettings::from_overrides(cfg, &c.allow_from, c.send_progress, c.send_tool_hints);
        let interval = Duration::from_secs_f64(c.stream_edit_interval);
        let lease_ttl = Duration::from_secs_f64(c.lease_secs);
        Ok(Self {
            streams: Streamer::new(CHANNEL, &bot.bot, deps.redis.clone(), interval),
            api: api::Api::new(http, &c.api_root(), &c.app_id, &c.app_secret),
            media_dir: bot.workspace.join(".nanobot").join("media").join(CHANNEL),
            caps: crate::channels::media::Caps::from_config(cfg),
            pairing: PairingStore::new(deps.redis.clone(), &bot.bot),
            leases: deps.leases(lease_ttl),
            redis: deps.redis.clone(),
            bot_id: bot.bot,
            cfg: bot.config,
            settings,
            me: OnceLock::new(),
        })
    }

    /// Fetches a tenant token and the bot's open id, retrying network failures with backoff
    /// until `cancel`; refused credentials are an error (this channel stops, others go on).
    async fn identify(&self, cancel: &CancellationToken) -> anyhow::Result<Option<String>> {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
        loop {
            let info = self
                .api
                .call(Method::GET, "/open-apis/bot/v3/info", None)
                .await;
            match info {
                Ok(info) => {
                    let bot = info.get("bot").unwrap_or(&info["data"]["bot"]);
                    let id = bot["open_id"].as_str().unwrap_or_default().to_string();
                    let _ = self.me.set(id.clone());
                    return Ok(Some(id));
                }
                Err(e) if !e.is_transient() => {
                    anyhow::bail!(
                        "feishu refused channels.feishu.appId/appSecret of bot {} (app {}): {e}; the Feishu channel is not served",
                        self.bot_id,
                        self.cfg.app_id
                    );
                }
                Err(e) => {
                    tracing::warn!(bot = %self.bot_id, error = %e, retry_in = ?backoff.current(), "feishu bot info failed")
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return Ok(None),
                _ = backoff.sleep() => {}
            }
        }
    }
}

#[async_trait]
impl Channel for FeishuChannel {
    fn name(&self) -> &'static str {
        CHANNEL
    }

    fn bot(&self) -> &str {
        &self.bot_id
    }

    fn settings(&self) -> &ChannelSettings {
        &self.settings
    }

    async fn run(
        self: Arc<Self>,
        inbound: Inbound,
        cancel: CancellationToken,
    ) -> anyhow::Result<()> {
        let Some(me) = self.identify(&cancel).await? else {
            return Ok(());
        };
        tracing::info!(bot = %self.bot_id, app_id = %self.cfg.app_id, open_id = %me, mode = %self.cfg.mode, domain = %self.cfg.domain, "feishu channel started");
        match self.cfg.mode.as_str() {
            "webhook" => events::listen(self, inbound, cancel).await,
            _ => ws::run(self, inbound, cancel).await,
        }
    }

    async fn send(&self, msg: &OutboundMessage, progress: &mut Progress) -> Result<(), SendError> {
        outbound::send(self, msg, progress).await
    }

    async fn observe(&self, msg: &OutboundMessage) {
        if self.cfg.streaming {
            self.streams.observe(self, msg).await;
        }
    }
}

//! DingTalk (钉钉) through its Stream mode and robot OpenAPI, as 0.3.5: one
//! [`DingTalkChannel`] per bot (per app, `clientId`).
//!
//! - Receiving ([`stream`]): one gateway replica holds the app's Stream WebSocket under the
//!   lease [`keys::channel_connection`] (fenced); another takes over within `leaseSecs` after
//!   the holder dies. Each robot message is acknowledged once handled; the message id is
//!   marked done ([`keys::channel_event`]) and the inbound id is `dingtalk:{msgId}`, so a
//!   redelivery never runs twice.
//! - Each message ([`receive`]): text, rich text and files parsed as 0.3.5; `disablePrivateChat`,
//!   `allowFrom` with pairing for unknown 1:1 senders, `groupUserIsolation`.
//! - Sending ([`outbound`]) from whichever replica the delivery lands on: `sampleMarkdown` robot
//!   messages to the user (`oToMessages/batchSend`) or the group (`groupMessages/send`), files
//!   uploaded and sent as images or files.
//! - `apiBase` and `oapiBase` point the HTTP calls elsewhere (a relay, the test fake); the Stream
//!   endpoint is whatever `connections/open` answers.
//!
//! The client secret, the access token and the connection ticket are never logged; keys use a
//! hash of the client id.
//!
//! [`keys::channel_connection`]: nanobot_proto::keys::channel_connection
//! [`keys::channel_event`]: nanobot_proto::keys::channel_event

mod api;
mod outbound;
mod receive;
mod stream;

pub use self::outbound::{escape_sender_name, reply_text};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use nanobot_core::pairing::PairingStore;
use nanobot_proto::OutboundMessage;
use nanobot_runtime::config::Config;
use nanobot_runtime::config::dingtalk::{DingTalkBot, DingTalkConfig};
use nanobot_runtime::lease::Leases;
use nanobot_runtime::store::Store;

use super::telegram::token_id;
use super::{Channel, ChannelDeps, ChannelSettings, Inbound, Progress, SendError};

/// Channel name (subject token, session prefix).
pub const CHANNEL: &str = "dingtalk";

/// Builds the DingTalk channel of every bot that enables it (no network yet).
pub fn all(cfg: &Config, deps: &ChannelDeps) -> anyhow::Result<Vec<Arc<dyn Channel>>> {
    cfg.dingtalk_bots()
        .into_iter()
        .map(|b| DingTalkChannel::new(cfg, b, deps).map(|c| Arc::new(c) as Arc<dyn Channel>))
        .collect()
}

/// One bot's DingTalk channel.
pub struct DingTalkChannel {
    bot_id: String,
    cfg: DingTalkConfig,
    settings: ChannelSettings,
    /// A hash of the client id (keys, logs).
    app_id: String,
    api: api::Api,
    redis: Store,
    leases: Leases,
    pairing: PairingStore,
    media_dir: PathBuf,
    caps: crate::channels::media::Caps,
    /// File downloads (their URLs carry no credential).
    download: reqwest::Client,
}

impl std::fmt::Debug for DingTalkChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DingTalkChannel")
            .field("bot", &self.bot_id)
            .field("app_id", &self.app_id)
            .finish_non_exhaustive()
    }
}

impl DingTalkChannel {
    /// Builds the channel of one bot (no network yet).
    pub fn new(cfg: &Config, b: DingTalkBot, deps: &ChannelDeps) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .context("build the DingTalk HTTP client")?;
        let c = &b.config;
        let settings =
            ChannelSettings::from_overrides(cfg, &c.allow_from, c.send_progress, c.send_tool_hints);
        let lease_ttl = Duration::from_secs_f64(c.lease_secs);
        Ok(Self {
            api: api::Api::new(http, c),
            app_id: token_id(&c.client_id),
            redis: deps.redis.clone(),
            leases: deps.leases(lease_ttl),
            pairing: PairingStore::new(deps.redis.clone(), &b.bot),
            media_dir: b.workspace.join(".nanobot").join("media").join(CHANNEL),
            caps: crate::channels::media::Caps::from_config(cfg),
            download: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .redirect(reqwest::redirect::Policy::limited(3))
                .build()
                .context("build the DingTalk download client")?,
            bot_id: b.bot,
            cfg: b.config,
            settings,
        })
    }
}

#[async_trait]
impl Channel for DingTalkChannel {
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
        tracing::info!(bot = %self.bot_id, app_id = %self.app_id, "dingtalk channel started");
        stream::run(self, inbound, cancel).await
    }

    async fn send(&self, msg: &OutboundMessage, progress: &mut Progress) -> Result<(), SendError> {
        outbound::send(self, msg, progress).await
    }
}

//! WeCom (企业微信) intelligent bots (智能机器人) over their long connection, as 0.3.5 uses them
//! through WeCom's AI-bot SDK: one [`WeComChannel`] per bot id.
//!
//! - Receiving ([`conn`]): WeCom allows one long connection per bot (a new subscribe kicks the
//!   old one), so exactly one gateway replica holds it, under the lease
//!   [`keys::channel_connection`] (fenced). The holder connects to `wsUrl`, subscribes with the
//!   bot id and secret, sends a heartbeat every 30 s, and reconnects with backoff (1 s doubling
//!   to 30 s); a replica SIGKILLed leaves a lease that expires, and another connects within
//!   `leaseSecs`. The inbound id is `wecom:{msgid}`, so a callback WeCom pushes twice makes one
//!   inbound message (the stream's de-duplication and the runners' seen-set).
//! - Each message ([`receive`]): text, image, voice (WeCom's transcript), file and mixed, as
//!   0.3.5; senders outside `allowFrom` are ignored, unknown single-chat senders get a pairing
//!   code; images and files are downloaded and decrypted ([`crypto`]) within the attachment
//!   caps (and 0.3.5's 200 MB). An `enter_chat` event gets `welcomeMessage`.
//! - Sending ([`outbound`]): replies go over the connection, so only the holder sends; a
//!   delivery landing on another replica is retried and reaches the holder. A reply is a
//!   finished stream message (`msgtype: stream`, markdown) answering the user's message (its
//!   `req_id`, kept in [`keys::channel_state`]), in parts of at most 20,480 UTF-8 bytes; with no
//!   message to answer (cron) or past the answer's life, a markdown push (`aibot_send_msg`).
//!   Stream ids derive from the delivery id, so a part sent again after a crash replaces the
//!   message it already showed instead of adding one.
//!
//! The secret is never logged and never part of a key: keys use a hash of the bot id.

mod conn;
mod crypto;
mod frame;
mod link;
mod outbound;
mod receive;
mod upload;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use nanobot_core::pairing::PairingStore;
use nanobot_proto::OutboundMessage;
use nanobot_runtime::config::Config;
use nanobot_runtime::config::wecom::{WECOM_WS_URL, WeComBot, WeComConfig};
use nanobot_runtime::lease::Leases;
use nanobot_runtime::store::Store;

use self::link::Link;
use super::media::Caps;
pub(crate) use super::telegram::token_id;
use super::{Channel, ChannelDeps, ChannelSettings, Inbound, Progress, SendError};

/// Channel name (subject token, session prefix).
pub const CHANNEL: &str = "wecom";

/// Builds the WeCom channel of every bot that enables it (no network yet).
pub fn all(cfg: &Config, deps: &ChannelDeps) -> anyhow::Result<Vec<Arc<dyn Channel>>> {
    cfg.wecom_bots()
        .into_iter()
        .map(|bot| Ok(Arc::new(WeComChannel::new(cfg, bot, deps)?) as Arc<dyn Channel>))
        .collect()
}

/// One bot's WeCom channel.
pub struct WeComChannel {
    bot_id: String,
    cfg: WeComConfig,
    settings: ChannelSettings,
    /// Hash of the WeCom bot id: the connection lease's id.
    conn_id: String,
    leases: Leases,
    redis: Store,
    pairing: PairingStore,
    media_dir: PathBuf,
    caps: Caps,
    download: reqwest::Client,
    /// The open connection while this replica holds it.
    link: Mutex<Option<Arc<Link>>>,
}

impl std::fmt::Debug for WeComChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeComChannel")
            .field("bot", &self.bot_id)
            .field("wecom_bot_id", &self.cfg.bot_id)
            .finish_non_exhaustive()
    }
}

impl WeComChannel {
    /// Builds the channel of one bot (no network yet).
    pub fn new(cfg: &Config, wc: WeComBot, deps: &ChannelDeps) -> anyhow::Result<Self> {
        let settings = ChannelSettings::from_overrides(
            cfg,
            &wc.config.allow_from,
            wc.config.send_progress,
            wc.config.send_tool_hints,
        );
        let lease_ttl = Duration::from_secs_f64(wc.config.lease_secs);
        Ok(Self {
            conn_id: token_id(&wc.config.bot_id),
            leases: deps.leases(lease_ttl),
            redis: deps.redis.clone(),
            pairing: PairingStore::new(deps.redis.clone(), &wc.bot),
            media_dir: wc.workspace.join(".nanobot").join("media").join(CHANNEL),
            caps: Caps::from_config(cfg),
            download: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .context("build the WeCom download client")?,
            link: Mutex::new(None),
            bot_id: wc.bot,
            cfg: wc.config,
            settings,
        })
    }

    /// Returns the open connection, if this replica holds it.
    fn link(&self) -> Option<Arc<Link>> {
        self.link
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_link(&self, link: Option<Arc<Link>>) {
        *self.link.lock().unwrap_or_else(PoisonError::into_inner) = link;
    }
}

#[async_trait]
impl Channel for WeComChannel {
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
        tracing::info!(bot = %self.bot_id, wecom_bot_id = %self.cfg.bot_id, custom_ws_url = self.cfg.ws_url != WECOM_WS_URL, "wecom channel started");
        conn::run(self, inbound, cancel).await
    }

    async fn send(&self, msg: &OutboundMessage, progress: &mut Progress) -> Result<(), SendError> {
        outbound::send(self, msg, progress).await
    }
}

//! Slack over plain reqwest (Web API) and tokio-tungstenite (Socket Mode): one
//! [`SlackChannel`] per bot token.
//!
//! - Receiving in `socket` mode ([`socket`]): every gateway replica opens its own Socket Mode
//!   connection (`apps.connections.open` with the app token); Slack hands each event to one of
//!   the app's connections. An envelope is acknowledged once its event was handled, so an
//!   event whose replica dies mid-way is redelivered by Slack; `disconnect` messages (Slack
//!   refreshing the connection) and dropped sockets reconnect.
//! - Receiving in `http` mode ([`events`]): every replica listens for the Events API; requests
//!   are verified with the signing secret (v0 HMAC-SHA256, timestamp within 5 minutes),
//!   `url_verification` challenges answered, and an event answered 200 once handled (else 500
//!   and Slack retries).
//! - Each event ([`receive`]): Slack's retries and duplicates are one inbound message — the
//!   event id is marked done in Redis ([`keys::slack_event`]) after its inbound message was
//!   accepted, and the inbound id is the message's `slack:{channel}:{ts}`, which JetStream and
//!   the runners de-duplicate if two replicas handle the same event at once.
//! - Sending ([`outbound`]): mrkdwn chunks with `chat.postMessage` in the message's thread,
//!   files through `files.getUploadURLExternal`/`files.completeUploadExternal`, the receipt
//!   reaction swapped for the done reaction on the final reply. With `streaming`, the reply is
//!   posted once and edited in place (`chat.update`) by the channel layer's
//!   [`Streamer`](super::stream::Streamer).
//!
//! Tokens and the signing secret are never logged: errors carry Slack's error codes only.
//!
//! [`keys::slack_event`]: nanobot_proto::keys::slack_event

mod api;
mod events;
mod inbound;
mod outbound;
mod receive;
mod socket;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use nanobot_runtime::store::Store;
use tokio_util::sync::CancellationToken;

use nanobot_core::pairing::PairingStore;
use nanobot_proto::OutboundMessage;
use nanobot_runtime::config::{Config, SlackBot, SlackConfig};

use super::stream::Streamer;
use super::{Channel, ChannelDeps, ChannelSettings, Inbound, Progress, SendError};
use crate::channels::backoff::Backoff;

pub use self::inbound::{FileRef, Parsed, inbound_id, parse, session_key, thread_of};

/// Channel name (subject token, session prefix).
pub const CHANNEL: &str = "slack";

/// One bot's Slack channel.
pub struct SlackChannel {
    bot_id: String,
    cfg: SlackConfig,
    settings: ChannelSettings,
    /// Web API with the bot token.
    api: api::Api,
    /// Web API with the app-level token (Socket Mode's `apps.connections.open`).
    app_api: api::Api,
    redis: Store,
    pairing: PairingStore,
    media_dir: PathBuf,
    /// Per-message attachment caps.
    caps: crate::channels::media::Caps,
    /// The bot's own user id (`auth.test`).
    me: OnceLock<String>,
    /// Streaming previews (`streaming`).
    streams: Streamer,
}

impl std::fmt::Debug for SlackChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackChannel")
            .field("bot", &self.bot_id)
            .finish_non_exhaustive()
    }
}

impl SlackChannel {
    /// Builds every Slack channel the configuration enables (no network yet).
    pub fn all(cfg: &Config, deps: &ChannelDeps) -> anyhow::Result<Vec<Arc<Self>>> {
        cfg.slack_bots()
            .into_iter()
            .map(|s| Self::new(cfg, s, deps).map(Arc::new))
            .collect()
    }

    /// Builds the channel of one bot (no network yet).
    pub fn new(cfg: &Config, slack: SlackBot, deps: &ChannelDeps) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("build the Slack HTTP client")?;
        let c = &slack.config;
        let settings =
            ChannelSettings::from_overrides(cfg, &c.allow_from, c.send_progress, c.send_tool_hints);
        let interval = Duration::from_secs_f64(c.stream_edit_interval);
        Ok(Self {
            streams: Streamer::new(CHANNEL, &slack.bot, deps.redis.clone(), interval),
            api: api::Api::new(http.clone(), &c.api_base, &c.bot_token),
            app_api: api::Api::new(http, &c.api_base, &c.app_token),
            media_dir: slack.workspace.join(".nanobot").join("media").join(CHANNEL),
            caps: crate::channels::media::Caps::from_config(cfg),
            pairing: PairingStore::new(deps.redis.clone(), &slack.bot),
            redis: deps.redis.clone(),
            bot_id: slack.bot,
            cfg: slack.config,
            settings,
            me: OnceLock::new(),
        })
    }

    /// Reads the bot's user id (`auth.test`) once, retrying network failures with backoff
    /// until `cancel`; a refused token is an error (the channel cannot work).
    async fn identify(&self, cancel: &CancellationToken) -> anyhow::Result<Option<String>> {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
        loop {
            match self.api.call("auth.test", &serde_json::json!({})).await {
                Ok(me) => {
                    let id = me["user_id"].as_str().unwrap_or_default().to_string();
                    let _ = self.me.set(id.clone());
                    return Ok(Some(id));
                }
                Err(e) if e.is_bad_credentials() || !e.is_transient() => {
                    anyhow::bail!(
                        "slack refused channels.slack.botToken of bot {} ({e}); the Slack channel is not served",
                        self.bot_id
                    );
                }
                Err(e) => {
                    tracing::warn!(bot = %self.bot_id, error = %e, retry_in = ?backoff.current(), "slack auth.test failed")
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
impl Channel for SlackChannel {
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
        tracing::info!(bot = %self.bot_id, user_id = %me, mode = %self.cfg.mode, "slack channel started");
        match self.cfg.mode.as_str() {
            "http" => events::listen(self, inbound, cancel).await,
            _ => socket::run(self, inbound, cancel).await,
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

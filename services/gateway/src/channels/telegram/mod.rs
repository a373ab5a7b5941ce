//! Telegram through teloxide: one [`TelegramChannel`] per bot token.
//!
//! - Receiving in polling mode ([`poller`]): exactly one gateway replica long-polls a token at a time, holding
//!   the lease [`keys::telegram_poller`] (fenced by [`keys::telegram_poller_fence`]); the
//!   `getUpdates` offset lives in [`keys::telegram_offset`] and is written only under the
//!   lease's fence, after the update's inbound message was accepted by JetStream. The inbound id
//!   is derived from the update (`tg:{update_id}:{message_id}`), so an update fetched again
//!   after a takeover is dropped by the stream's de-duplication and the runners' seen-set.
//! - Receiving in webhook mode ([`webhook`]): every replica listens and answers Telegram's POSTs;
//!   the lease then only elects the replica that edits streaming previews.
//! - Albums (parts sharing a `media_group_id`) are one turn once no part came for 0.6 s: the
//!   poller reads them again until then; in webhook mode they are buffered in Redis across
//!   replicas ([`album`]).
//! - Every Bot API call goes through `proxy` when one is set.
//! - Each update ([`receive`]): ACL and pairing, group policy, `/start`, the 👀 reaction,
//!   typing, media download and transcription, then one inbound message.
//! - Sending ([`outbound`]): HTML chunks with a plain-text fallback, flood control and
//!   timeouts retried, streaming previews edited by the lease holder.
//!
//! The token is never logged and never part of a key: keys use [`token_id`], a hash of it.

mod album;
mod inbound;
mod media;
mod outbound;
mod poller;
mod receive;
mod stream;
mod typing;
pub(crate) mod webhook;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use nanobot_runtime::store::Store;
use teloxide::Bot;
use teloxide::requests::Requester as _;
use tokio_util::sync::CancellationToken;

use nanobot_core::pairing::PairingStore;
use nanobot_proto::OutboundMessage;
use nanobot_runtime::config::{Config, TelegramBot, TelegramConfig};
use nanobot_runtime::lease::Leases;

use super::{Channel, ChannelDeps, ChannelSettings, Inbound, Progress, SendError};

pub use self::inbound::{Me, Parsed, content, parse, sender_id, session_key, thread_of};

/// Channel name (subject token, session prefix).
pub const CHANNEL: &str = "telegram";

/// Returns a stable, non-reversible id of a bot token for Redis keys and logs.
pub fn token_id(token: &str) -> String {
    let digest = sha1_smol::Sha1::from(token.as_bytes()).digest().to_string();
    digest[..16].to_string()
}

/// Returns `text` with `token` masked (teloxide's network errors carry the request URL).
pub(crate) fn redact(text: &str, token: &str) -> String {
    if token.is_empty() {
        return text.to_string();
    }
    text.replace(token, "***")
}

/// Returns the HTTP client of one bot's Bot API calls: teloxide's defaults (their 17 s timeout
/// stays above the long poll's [`poller::POLL_SECS`]), through `proxy` when one is set (http,
/// https, socks5 or socks5h, credentials in the URL, as upstream). The URL is never logged.
fn http_client(cfg: &TelegramConfig) -> anyhow::Result<reqwest_tg::Client> {
    let mut builder = teloxide::net::default_reqwest_settings();
    if let Some(proxy) = cfg
        .proxy
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let proxy = reqwest_tg::Proxy::all(proxy).map_err(|_| {
            anyhow::anyhow!("channels.telegram.proxy is not an http, https, socks5 or socks5h URL")
        })?;
        builder = builder.proxy(proxy);
    }
    builder.build().context("build the Telegram HTTP client")
}

/// One bot's Telegram channel.
pub struct TelegramChannel {
    bot_id: String,
    cfg: TelegramConfig,
    settings: ChannelSettings,
    api: Bot,
    token_id: String,
    redis: Store,
    leases: Leases,
    pairing: PairingStore,
    media_dir: PathBuf,
    /// Per-message attachment caps.
    caps: crate::channels::media::Caps,
    transcriber: Option<media::Transcriber>,
    me: OnceLock<Me>,
    /// True while this replica holds the token's lease (it edits streaming previews).
    holder: AtomicBool,
    typing: typing::Typing,
    streams: stream::Streams,
}

impl std::fmt::Debug for TelegramChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramChannel")
            .field("bot", &self.bot_id)
            .field("token_id", &self.token_id)
            .finish_non_exhaustive()
    }
}

impl TelegramChannel {
    /// Builds the channel of one bot (no network yet).
    pub fn new(cfg: &Config, tg: TelegramBot, deps: &ChannelDeps) -> anyhow::Result<Self> {
        let url = tg.config.api_base.trim_end_matches('/');
        let url = url::Url::parse(url).context("channels.telegram.apiBase")?;
        let api =
            Bot::with_client(tg.config.token.clone(), http_client(&tg.config)?).set_api_url(url);
        let lease_ttl = Duration::from_secs_f64(tg.config.lease_secs);
        let settings = ChannelSettings::from_overrides(
            cfg,
            &tg.config.allow_from,
            tg.config.send_progress,
            tg.config.send_tool_hints,
        );
        Ok(Self {
            token_id: token_id(&tg.config.token),
            transcriber: media::Transcriber::from_config(cfg),
            media_dir: tg.workspace.join(".nanobot").join("media").join(CHANNEL),
            caps: crate::channels::media::Caps::from_config(cfg),
            pairing: PairingStore::new(deps.redis.clone(), &tg.bot),
            leases: deps.leases(lease_ttl),
            redis: deps.redis.clone(),
            bot_id: tg.bot,
            cfg: tg.config,
            settings,
            api,
            me: OnceLock::new(),
            holder: AtomicBool::new(false),
            typing: typing::Typing::default(),
            streams: stream::Streams::default(),
        })
    }

    fn redact(&self, text: &str) -> String {
        redact(text, &self.cfg.token)
    }

    /// Reads the bot's identity (`getMe`) once, retrying with backoff until `cancel`.
    async fn identify(&self, cancel: &CancellationToken) -> Option<Me> {
        if let Some(me) = self.me.get() {
            return Some(me.clone());
        }
        let mut delay = Duration::from_millis(200);
        loop {
            match self.api.get_me().await {
                Ok(me) => {
                    let me = Me {
                        id: me.id.0,
                        username: me.username().to_string(),
                    };
                    let _ = self.me.set(me.clone());
                    return Some(me);
                }
                Err(e) => {
                    tracing::warn!(bot = %self.bot_id, token_id = %self.token_id, error = %self.redact(&e.to_string()), retry_in = ?delay, "telegram getMe failed")
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return None,
                _ = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(Duration::from_secs(30));
        }
    }

    fn is_holder(&self) -> bool {
        self.holder.load(Ordering::Acquire)
    }
}

#[async_trait]
impl Channel for TelegramChannel {
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
        let Some(me) = self.identify(&cancel).await else {
            return Ok(());
        };
        let proxied = self
            .cfg
            .proxy
            .as_deref()
            .is_some_and(|p| !p.trim().is_empty());
        tracing::info!(bot = %self.bot_id, token_id = %self.token_id, username = %me.username, mode = %self.cfg.mode, proxied, "telegram channel started");
        receive::register_commands(&self).await;
        let polling = self.cfg.mode != "webhook";
        if !polling && !webhook::register(&self, &cancel).await {
            return Ok(());
        }
        poller::run(self, inbound, cancel, polling).await
    }

    async fn send(&self, msg: &OutboundMessage, progress: &mut Progress) -> Result<(), SendError> {
        outbound::send(self, msg, progress).await
    }

    async fn observe(&self, msg: &OutboundMessage) {
        stream::observe(self, msg).await;
    }
}

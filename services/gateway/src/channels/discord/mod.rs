//! Discord through twilight: one [`DiscordChannel`] per bot token.
//!
//! - Receiving ([`gateway`]): a Discord token allows one gateway session (per shard), so exactly
//!   one gateway replica holds the WebSocket connection, under the lease
//!   [`keys::discord_gateway`] (fenced by [`keys::discord_gateway_fence`]). A replica that loses
//!   the lease closes its connection at once; a dead holder (SIGKILL) is replaced within
//!   `leaseSecs`. The inbound id is the Discord message id (`dc:{id}`), so a message seen twice
//!   (a resume replaying it, or two connections overlapping) is dropped by the stream's
//!   de-duplication and the runners' seen-set. Messages Discord dispatched while no replica was
//!   connected are not replayed by Discord to a new session.
//! - Each message ([`receive`]): own and system messages dropped; in guilds only senders in
//!   `allowFrom` (or paired), only in `allowChannels`, and only when @mentioned or replied to
//!   (the mention stripped) unless `groupPolicy` is `open`; unknown DM senders get a pairing
//!   code; the 👀 reaction, typing, the 🔧 working reaction after `workingEmojiDelay`,
//!   attachments downloaded, then one inbound message.
//! - Sending ([`outbound`]) through REST from whichever replica the delivery lands on: files,
//!   then the text in chunks of at most 2,000 characters, the first a reply to the user's message.
//!   With `streaming` (upstream's default), the reply is posted once and edited in place by the
//!   channel layer's [`Streamer`](super::stream::Streamer); the final reply edits it into its
//!   first chunk and sends the rest as new messages.
//! - REST goes to `apiBase`, the gateway to `gatewayUrl` when set.
//!
//! The token is never logged and never part of a key: keys use [`token_id`].

mod gateway;
mod outbound;
mod receive;
mod typing;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use twilight_http::error::ErrorType;
use twilight_model::id::Id;
use twilight_model::id::marker::UserMarker;

use nanobot_core::pairing::PairingStore;
use nanobot_proto::{OutboundKind, OutboundMessage};
use nanobot_runtime::config::{Config, DiscordBot, DiscordConfig};
use nanobot_runtime::lease::Leases;

use super::stream::Streamer;
use super::telegram::token_id;
use super::{Channel, ChannelDeps, ChannelSettings, Inbound, Progress, SendError};
use crate::channels::backoff::Backoff;

/// Channel name (subject token, session prefix).
pub const CHANNEL: &str = "discord";

/// Longest a REST call may take.
const REST_TIMEOUT: Duration = Duration::from_secs(30);

/// One bot's Discord channel.
pub struct DiscordChannel {
    bot_id: String,
    cfg: DiscordConfig,
    settings: ChannelSettings,
    http: Arc<twilight_http::Client>,
    token_id: String,
    leases: Leases,
    pairing: PairingStore,
    media_dir: PathBuf,
    /// Per-message attachment caps.
    caps: crate::channels::media::Caps,
    /// Attachment downloads (Discord's CDN URLs carry no token).
    download: reqwest::Client,
    me: OnceLock<Id<UserMarker>>,
    typing: typing::Typing,
    working: typing::Working,
    /// Streaming previews (`streaming`).
    streams: Streamer,
}

impl std::fmt::Debug for DiscordChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordChannel")
            .field("bot", &self.bot_id)
            .field("token_id", &self.token_id)
            .finish_non_exhaustive()
    }
}

/// Returns twilight's REST "proxy" host for `api_base` (`{scheme}://{host}/api/v10/...` is what
/// twilight requests, so a path before `/api` rides along with the host) and whether it is http.
fn rest_host(api_base: &str) -> anyhow::Result<(String, bool)> {
    let url = url::Url::parse(api_base.trim_end_matches('/'))
        .context("channels.discord.apiBase is not a URL")?;
    let host = url
        .host_str()
        .context("channels.discord.apiBase has no host")?;
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    let prefix = url
        .path()
        .trim_end_matches('/')
        .strip_suffix("/api")
        .context("channels.discord.apiBase must end in /api")?;
    Ok((format!("{host}{port}{prefix}"), url.scheme() == "http"))
}

impl DiscordChannel {
    /// Builds the channel of one bot (no network yet).
    pub fn new(cfg: &Config, dc: DiscordBot, deps: &ChannelDeps) -> anyhow::Result<Self> {
        // twilight builds its TLS configs from the process default provider; the workspace
        // links two (ring and aws-lc-rs), so one is chosen here. Already installed is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (host, use_http) = rest_host(&dc.config.api_base)?;
        let http = Arc::new(
            twilight_http::Client::builder()
                .token(dc.config.token.clone())
                .proxy(host, use_http)
                .timeout(REST_TIMEOUT)
                .build(),
        );
        let settings = ChannelSettings::from_overrides(
            cfg,
            &dc.config.allow_from,
            dc.config.send_progress,
            dc.config.send_tool_hints,
        );
        let lease_ttl = Duration::from_secs_f64(dc.config.lease_secs);
        let interval = Duration::from_secs_f64(dc.config.stream_edit_interval);
        Ok(Self {
            streams: Streamer::new(CHANNEL, &dc.bot, deps.redis.clone(), interval),
            token_id: token_id(&dc.config.token),
            media_dir: dc.workspace.join(".nanobot").join("media").join(CHANNEL),
            caps: crate::channels::media::Caps::from_config(cfg),
            pairing: PairingStore::new(deps.redis.clone(), &dc.bot),
            leases: deps.leases(lease_ttl),
            download: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .context("build the Discord download client")?,
            bot_id: dc.bot,
            cfg: dc.config,
            settings,
            http,
            me: OnceLock::new(),
            typing: typing::Typing::default(),
            working: typing::Working::default(),
        })
    }

    /// Reads the bot's user id (`GET /users/@me`) once, retrying network failures with backoff
    /// until `cancel`. A rejected token is an error: this channel stops, the others go on.
    async fn identify(&self, cancel: &CancellationToken) -> anyhow::Result<Option<Id<UserMarker>>> {
        if let Some(me) = self.me.get() {
            return Ok(Some(*me));
        }
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
        loop {
            let user = match self.http.current_user().await {
                Ok(response) => response.model().await.map_err(anyhow::Error::from),
                Err(e) => Err(e.into()),
            };
            match user {
                Ok(user) => {
                    let _ = self.me.set(user.id);
                    tracing::info!(bot = %self.bot_id, token_id = %self.token_id, user_id = %user.id, username = %user.name, "discord bot identified");
                    return Ok(Some(user.id));
                }
                Err(e) if is_unauthorized(&e) => {
                    anyhow::bail!(
                        "discord rejected the bot token of bot {} (token id {}): check channels.discord.token",
                        self.bot_id,
                        self.token_id
                    );
                }
                Err(e) => {
                    tracing::warn!(bot = %self.bot_id, token_id = %self.token_id, error = %e, retry_in = ?backoff.current(), "discord users/@me failed")
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return Ok(None),
                _ = backoff.sleep() => {}
            }
        }
    }
}

fn is_unauthorized(e: &anyhow::Error) -> bool {
    e.downcast_ref::<twilight_http::Error>()
        .is_some_and(|e| match e.kind() {
            ErrorType::Unauthorized => true,
            ErrorType::Response { status, .. } => status.get() == 401,
            _ => false,
        })
}

#[async_trait]
impl Channel for DiscordChannel {
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
        tracing::info!(bot = %self.bot_id, token_id = %self.token_id, user_id = %me, custom_gateway = !self.cfg.gateway_url.is_empty(), "discord channel started");
        gateway::run(self, inbound, cancel).await
    }

    async fn send(&self, msg: &OutboundMessage, progress: &mut Progress) -> Result<(), SendError> {
        outbound::send(self, msg, progress).await
    }

    async fn observe(&self, msg: &OutboundMessage) {
        let done = matches!(
            OutboundKind::try_from(msg.kind),
            Ok(OutboundKind::Final | OutboundKind::Error)
        );
        if done && let Ok(chat) = msg.chat_id.parse() {
            self.typing.stop(chat);
            self.working.stop(chat);
        }
        if self.cfg.streaming {
            self.streams.observe(self, msg).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_base_becomes_twilights_host_with_any_path_prefix() {
        assert_eq!(
            rest_host("https://discord.com/api").unwrap(),
            ("discord.com".to_string(), false)
        );
        assert_eq!(
            rest_host("http://127.0.0.1:8080/api/").unwrap(),
            ("127.0.0.1:8080".to_string(), true)
        );
        assert_eq!(
            rest_host("https://relay.example/discord/api").unwrap(),
            ("relay.example/discord".to_string(), false)
        );
        assert!(rest_host("https://discord.com/v10").is_err());
    }
}

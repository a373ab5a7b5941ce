//! The QQ official bot (QQ 开放平台 API v2): one [`QqChannel`] per bot (`appId` + `secret`).
//!
//! - Access token ([`api`]): `POST {tokenUrl}` with `appId` and `clientSecret`, kept per
//!   process and fetched again shortly before it expires; a 401 or close code 4004 drops it.
//! - Receiving ([`gateway`]): one replica per app holds the WebSocket under the lease
//!   [`keys::channel_connection`]; the session id and last sequence number are kept in
//!   [`keys::channel_state`] ([`session`]) so a replica taking over RESUMEs it.
//! - Each message ([`receive`]): C2C and group @-messages, de-duplicated by
//!   [`keys::channel_event`] and by the inbound id `qq:{message id}`; `allowFrom` and pairing;
//!   `ackMessage`; attachments capped at `downloadMaxBytes`.
//! - Sending ([`outbound`]) from whichever replica the delivery lands on: passive replies with
//!   `msg_id` and a `msg_seq` per part that survives redelivery ([`seq`]).
//!
//! A bad `appId`/`secret` is one error line naming the bot; the other channels go on.
//!
//! [`keys::channel_connection`]: nanobot_proto::keys::channel_connection
//! [`keys::channel_state`]: nanobot_proto::keys::channel_state
//! [`keys::channel_event`]: nanobot_proto::keys::channel_event

mod api;
mod gateway;
mod outbound;
mod receive;
mod seq;
mod session;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use nanobot_core::pairing::PairingStore;
use nanobot_proto::OutboundMessage;
use nanobot_runtime::config::Config;
use nanobot_runtime::config::qq::{QqBot, QqConfig};
use nanobot_runtime::lease::Leases;
use nanobot_runtime::store::Store;

use self::api::{Api, ApiError};
use self::session::SessionStore;
use super::{Channel, ChannelDeps, ChannelSettings, Inbound, Progress, SendError};
use crate::channels::backoff::Backoff;

/// Channel name (subject token, session prefix).
pub const CHANNEL: &str = "qq";

/// Builds the QQ channel of every bot that enables it (no network yet).
pub fn all(cfg: &Config, deps: &ChannelDeps) -> anyhow::Result<Vec<Arc<dyn Channel>>> {
    cfg.qq_bots()
        .into_iter()
        .map(|qq| Ok(Arc::new(QqChannel::new(cfg, qq, deps)?) as Arc<dyn Channel>))
        .collect()
}

/// One bot's QQ channel.
pub struct QqChannel {
    bot_id: String,
    cfg: QqConfig,
    settings: ChannelSettings,
    api: Api,
    redis: Store,
    leases: Leases,
    sessions: SessionStore,
    pairing: PairingStore,
    media_dir: PathBuf,
    caps: crate::channels::media::Caps,
    /// Attachment downloads (QQ's CDN links carry no token; redirects refused, as 0.3.5).
    download: reqwest::Client,
}

impl std::fmt::Debug for QqChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QqChannel")
            .field("bot", &self.bot_id)
            .field("app_id", &self.cfg.app_id)
            .finish_non_exhaustive()
    }
}

impl QqChannel {
    /// Builds the channel of one bot (no network yet).
    pub fn new(cfg: &Config, qq: QqBot, deps: &ChannelDeps) -> anyhow::Result<Self> {
        let settings = ChannelSettings::from_overrides(
            cfg,
            &qq.config.allow_from,
            qq.config.send_progress,
            qq.config.send_tool_hints,
        );
        let lease_ttl = Duration::from_secs_f64(qq.config.lease_secs);
        Ok(Self {
            api: Api::new(&qq.config).context("build the QQ API client")?,
            redis: deps.redis.clone(),
            leases: deps.leases(lease_ttl),
            sessions: SessionStore::new(deps.redis.clone(), &qq.bot, &qq.config.app_id),
            pairing: PairingStore::new(deps.redis.clone(), &qq.bot),
            media_dir: qq.workspace.join(".nanobot").join("media").join(CHANNEL),
            caps: crate::channels::media::Caps::from_config(cfg),
            download: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .context("build the QQ download client")?,
            bot_id: qq.bot,
            cfg: qq.config,
            settings,
        })
    }

    /// Fetches the first access token, retrying network failures with backoff until `cancel`;
    /// refused credentials are an error (this channel stops, the others go on).
    async fn authenticate(&self, cancel: &CancellationToken) -> anyhow::Result<bool> {
        let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(60));
        loop {
            match self.api.token().await {
                Ok(_) => return Ok(true),
                Err(ApiError::Credentials(why)) => anyhow::bail!(
                    "qq refused the app credentials of bot {} (app id {}): {why}; check channels.qq.appId and secret",
                    self.bot_id,
                    self.cfg.app_id
                ),
                Err(e) => {
                    tracing::warn!(bot = %self.bot_id, error = %e, retry_in = ?backoff.current(), "qq access token not fetched yet")
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return Ok(false),
                _ = backoff.sleep() => {}
            }
        }
    }
}

#[async_trait]
impl Channel for QqChannel {
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
        if !self.authenticate(&cancel).await? {
            return Ok(());
        }
        tracing::info!(bot = %self.bot_id, app_id = %self.cfg.app_id, custom_gateway = !self.cfg.gateway_url.is_empty(), "qq channel started");
        gateway::run(self, inbound, cancel).await;
        Ok(())
    }

    async fn send(&self, msg: &OutboundMessage, progress: &mut Progress) -> Result<(), SendError> {
        outbound::send(self, msg, progress).await
    }
}

/// TLS for `wss://` with the webpki roots through ring (the build links more than one rustls
/// provider, so none is picked implicitly).
fn tls() -> tokio_tungstenite::Connector {
    let roots = rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_tungstenite::Connector::Rustls(Arc::new(config))
}

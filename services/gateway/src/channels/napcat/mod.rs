//! QQ through NapCat / OneBot v11: one [`NapcatChannel`] per bot, talking to NapCat's forward
//! WebSocket at `wsUrl` ([`onebot`]).
//!
//! - Receiving ([`session`]): NapCat sends every event to every connected client, so exactly one
//!   gateway replica holds the event connection, under the lease [`keys::channel_connection`]
//!   (fenced by [`keys::channel_connection_fence`]); it reconnects with backoff while it holds
//!   it, and another replica connects within `leaseSecs` after it dies. The inbound id is
//!   `napcat:{self_id}:{message_id}`, so an event seen twice (two connections overlapping at a
//!   takeover) is dropped by the stream's de-duplication. Events NapCat sent while no replica
//!   was connected are not replayed.
//! - Each message ([`receive`]): private chats as `private:{qq}`, groups as `group:{id}` with
//!   `groupPolicy` (and its per-group overrides) deciding whether an un-addressed message is
//!   answered; senders outside `allowFrom` ignored in groups and given a pairing code in
//!   private; images downloaded up to `maxImageBytes`; 0.3.5's `group_increase` welcome.
//! - Sending ([`outbound`]) from whichever replica the delivery lands on: on the event
//!   connection when this replica holds it, else on an API-only connection of its own
//!   (`{wsUrl}/api`, which NapCat sends no events; `wsUrl` itself, its events dropped, for an
//!   implementation without that path);
//!   images then text, the text split at [`outbound::MAX_MESSAGE_CHARS`].
//!
//! The access token is never logged and never part of a key: keys use a digest of `wsUrl`.

mod onebot;
mod outbound;
mod receive;
mod segments;
mod session;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use nanobot_core::pairing::PairingStore;
use nanobot_proto::OutboundMessage;
use nanobot_runtime::config::Config;
use nanobot_runtime::config::napcat::{NapcatBot, NapcatConfig};
use nanobot_runtime::lease::Leases;

use self::onebot::Conn;
use super::telegram::token_id;
use super::{Channel, ChannelDeps, ChannelSettings, Inbound, Progress, SendError};

/// Channel name (subject token, session prefix).
pub const CHANNEL: &str = "napcat";

/// Builds the NapCat channel of every bot that enables it (no network yet).
pub fn all(cfg: &Config, deps: &ChannelDeps) -> anyhow::Result<Vec<Arc<dyn Channel>>> {
    cfg.napcat_bots()
        .into_iter()
        .map(|nc| Ok(Arc::new(NapcatChannel::new(cfg, nc, deps)?) as Arc<dyn Channel>))
        .collect()
}

/// One bot's NapCat channel.
pub struct NapcatChannel {
    bot_id: String,
    cfg: NapcatConfig,
    settings: ChannelSettings,
    /// Digest of `wsUrl`: names the connection's lease (the URL may carry a token).
    conn_id: String,
    /// `wsUrl` without its query, for logs.
    url_for_logs: String,
    leases: Leases,
    pairing: PairingStore,
    media_dir: PathBuf,
    caps: super::media::Caps,
    /// Image downloads (no redirects, as 0.3.5).
    download: reqwest::Client,
    /// The event connection while this replica holds it.
    events_conn: Mutex<Option<Conn>>,
    /// This replica's sending connection when it does not hold the event connection.
    send_conn: tokio::sync::Mutex<Option<Conn>>,
}

impl std::fmt::Debug for NapcatChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NapcatChannel")
            .field("bot", &self.bot_id)
            .field("ws_url", &self.url_for_logs)
            .finish_non_exhaustive()
    }
}

impl NapcatChannel {
    /// Builds the channel of one bot (no network yet).
    pub fn new(cfg: &Config, nc: NapcatBot, deps: &ChannelDeps) -> anyhow::Result<Self> {
        let settings = ChannelSettings::from_overrides(
            cfg,
            &nc.config.allow_from,
            nc.config.send_progress,
            nc.config.send_tool_hints,
        );
        let ws_url = nc.config.ws_url.trim().to_string();
        Ok(Self {
            conn_id: token_id(&ws_url),
            url_for_logs: ws_url
                .split(['?', '#'])
                .next()
                .unwrap_or_default()
                .to_string(),
            leases: deps.leases(Duration::from_secs_f64(nc.config.lease_secs)),
            pairing: PairingStore::new(deps.redis.clone(), &nc.bot),
            media_dir: nc.workspace.join(".nanobot").join("media").join(CHANNEL),
            caps: super::media::Caps::from_config(cfg),
            download: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .context("build the NapCat download client")?,
            events_conn: Mutex::new(None),
            send_conn: tokio::sync::Mutex::new(None),
            bot_id: nc.bot,
            cfg: nc.config,
            settings,
        })
    }

    /// Returns a connection to send on: the event connection when this replica holds it, else
    /// its own (opened when needed).
    async fn sending_conn(&self) -> Result<Conn, SendError> {
        let held = self
            .events_conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(conn) = held.filter(Conn::is_open) {
            return Ok(conn);
        }
        let mut own = self.send_conn.lock().await;
        if let Some(conn) = own.as_ref().filter(|c| c.is_open()) {
            return Ok(conn.clone());
        }
        let conn = Conn::open_api(&self.cfg.ws_url, &self.cfg.access_token)
            .await
            .map_err(|e| {
                SendError::Transient(format!("connect to NapCat at {}: {e}", self.url_for_logs))
            })?;
        *own = Some(conn.clone());
        Ok(conn)
    }

    fn set_events_conn(&self, conn: Option<Conn>) {
        *self
            .events_conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = conn;
    }
}

#[async_trait]
impl Channel for NapcatChannel {
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
        tracing::info!(bot = %self.bot_id, ws_url = %self.url_for_logs, "napcat channel started");
        session::run(self, inbound, cancel).await
    }

    async fn send(&self, msg: &OutboundMessage, progress: &mut Progress) -> Result<(), SendError> {
        outbound::send(self, msg, progress).await
    }
}

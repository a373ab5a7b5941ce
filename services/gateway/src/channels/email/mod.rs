//! Email: IMAP polling in, SMTP replies out, as upstream's `nanobot/channels/email`. One
//! [`EmailChannel`] per bot mailbox; a correspondent's address is the chat (session
//! `email:<address>`).
//!
//! - Receiving ([`poller`]): exactly one gateway replica polls a mailbox at a time, holding the
//!   lease [`keys::email_poller`] (fenced by [`keys::email_poller_fence`], the fleet's one lease
//!   primitive). It searches the unseen mail above the last processed UID, kept with the
//!   mailbox's UIDVALIDITY in [`keys::email_cursor`] and written only under the lease's fence
//!   after the mail's inbound message was accepted by JetStream (or the mail was skipped). The
//!   inbound id is derived from the Message-ID (else mailbox, UIDVALIDITY and UID), so a mail
//!   read again after a takeover is dropped by the stream's de-duplication and the runners'
//!   seen-set.
//! - Each mail ([`receive`]): never the bot's own address, never machine-sent mail
//!   (auto-replies, bounces, lists), upstream's SPF/DKIM checks (believing only the receiving
//!   server's own `Authentication-Results`, [`authres`]), `allowFrom` by address
//!   (case-insensitive) or an approved pairing; then one inbound message in upstream's
//!   `[EMAIL-CONTEXT]` format, attachments saved in the bot's media directory.
//! - Sending ([`outbound`]): one SMTP submission per reply through the shared delivery layer,
//!   threaded with In-Reply-To/References and a `Re: ` subject, with a Message-ID derived from
//!   the delivery id (a resend after a crash carries the same id).
//!
//! Passwords are never logged; keys use [`mailbox_id`], a hash of host, user and mailbox.

pub mod authres;
mod imap;
mod outbound;
pub mod parse;
mod poller;
mod receive;

pub use self::outbound::{body_of, reply_subject};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nanobot_runtime::store::Store;
use redis::AsyncCommands as _;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use nanobot_core::pairing::PairingStore;
use nanobot_proto::{OutboundMessage, keys};
use nanobot_runtime::config::{EmailBot, EmailConfig};
use nanobot_runtime::lease::Leases;

use super::{Channel, ChannelDeps, ChannelSettings, Inbound, Progress, SendError};

/// Channel name (subject token, session prefix).
pub const CHANNEL: &str = "email";

/// How long the thread of a mail is kept for its reply.
const THREAD_TTL_SECS: u64 = 30 * 24 * 3600;

/// Returns a stable id of a mailbox (host, user, mailbox) for Redis keys and logs.
pub fn mailbox_id(cfg: &EmailConfig) -> String {
    let name = format!(
        "{}:{}|{}|{}",
        cfg.imap_host.to_lowercase(),
        cfg.imap_port,
        cfg.imap_username.to_lowercase(),
        cfg.imap_mailbox
    );
    let digest = sha1_smol::Sha1::from(name.as_bytes()).digest().to_string();
    digest[..16].to_string()
}

/// What a reply needs to continue a mail's thread.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    /// The incoming mail's subject.
    pub subject: String,
    /// Its Message-ID (with angle brackets; empty when it had none).
    pub message_id: String,
    /// Its References.
    pub references: Vec<String>,
}

/// One bot's email channel.
pub struct EmailChannel {
    bot_id: String,
    cfg: EmailConfig,
    settings: ChannelSettings,
    /// `allowFrom`, lower case.
    allow_from: Vec<String>,
    /// The bot's own addresses (`fromAddress`, `smtpUsername`, `imapUsername`), lower case.
    own_addresses: Vec<String>,
    mailbox_id: String,
    redis: Store,
    leases: Leases,
    pairing: PairingStore,
    media_dir: PathBuf,
    /// Per-message attachment caps.
    caps: crate::channels::media::Caps,
    smtp: outbound::Smtp,
}

impl std::fmt::Debug for EmailChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailChannel")
            .field("bot", &self.bot_id)
            .field("mailbox_id", &self.mailbox_id)
            .finish_non_exhaustive()
    }
}

impl EmailChannel {
    /// Builds the channel of one bot (no network yet).
    pub fn new(
        fleet: &nanobot_runtime::config::Config,
        email: EmailBot,
        deps: &ChannelDeps,
    ) -> anyhow::Result<Self> {
        let cfg = email.config;
        let own_addresses = [&cfg.from_address, &cfg.smtp_username, &cfg.imap_username]
            .into_iter()
            .map(|a| normalize_address(a))
            .filter(|a| !a.is_empty())
            .collect();
        Ok(Self {
            // Upstream never emails progress or tool hints.
            settings: ChannelSettings {
                allow_from: cfg.allow_from.clone(),
                send_progress: false,
                send_tool_hints: false,
            },
            allow_from: cfg
                .allow_from
                .iter()
                .map(|a| a.trim().to_lowercase())
                .collect(),
            own_addresses,
            mailbox_id: mailbox_id(&cfg),
            leases: deps.leases(Duration::from_secs_f64(cfg.lease_secs)),
            pairing: PairingStore::new(deps.redis.clone(), &email.bot),
            redis: deps.redis.clone(),
            media_dir: email.workspace.join(".nanobot").join("media").join(CHANNEL),
            caps: crate::channels::media::Caps::from_config(fleet),
            smtp: outbound::Smtp::new(&cfg)?,
            bot_id: email.bot,
            cfg,
        })
    }

    /// Returns the largest mail read whole: the per-message attachment bytes plus room for
    /// its text; a larger one is read only up to [`imap::HEAD_ROOM`], its attachments noted as
    /// not saved.
    fn max_mail_bytes(&self) -> u32 {
        let max = self
            .caps
            .max_bytes
            .saturating_add(u64::from(imap::HEAD_ROOM));
        u32::try_from(max).unwrap_or(u32::MAX)
    }

    /// Returns whether `address` (lower case) is one of the bot's own.
    fn is_own(&self, address: &str) -> bool {
        self.own_addresses.iter().any(|a| a == address)
    }

    /// Stores the thread a reply to `inbound_id` (and the next mail to `address`) continues.
    async fn remember_thread(
        &self,
        inbound_id: &str,
        address: &str,
        thread: &Thread,
    ) -> redis::RedisResult<()> {
        let json = serde_json::to_string(thread).unwrap_or_default();
        let mut conn = self.redis.clone();
        let by_id = keys::email_thread(&self.bot_id, inbound_id);
        let by_address = keys::email_thread(&self.bot_id, &format!("to:{address}"));
        redis::pipe()
            .set_ex(&by_id, &json, THREAD_TTL_SECS)
            .ignore()
            .set_ex(&by_address, &json, THREAD_TTL_SECS)
            .ignore()
            .query_async::<()>(&mut conn)
            .await
    }

    /// Returns the thread of the mail `reply_to` answers, else the latest from `address`.
    async fn thread(&self, reply_to: &str, address: &str) -> redis::RedisResult<Option<Thread>> {
        let mut conn = self.redis.clone();
        let mut candidates = Vec::new();
        if !reply_to.is_empty() {
            candidates.push(keys::email_thread(&self.bot_id, reply_to));
        }
        candidates.push(keys::email_thread(&self.bot_id, &format!("to:{address}")));
        for key in candidates {
            let json: Option<String> = conn.get(&key).await?;
            if let Some(thread) = json.and_then(|j| serde_json::from_str(&j).ok()) {
                return Ok(Some(thread));
            }
        }
        Ok(None)
    }
}

/// Returns the bare address of `value` (`Name <a@b>` or `a@b`), lower case; empty when it has
/// none.
pub fn normalize_address(value: &str) -> String {
    let raw = value.trim();
    let inner = match (raw.rfind('<'), raw.rfind('>')) {
        (Some(open), Some(close)) if open < close => &raw[open + 1..close],
        _ => raw,
    };
    let inner = inner.trim();
    if inner.contains('@') {
        inner.to_lowercase()
    } else {
        String::new()
    }
}

#[async_trait]
impl Channel for EmailChannel {
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
        if !self.cfg.consent_granted {
            tracing::warn!(bot = %self.bot_id, "email channel disabled: consentGranted is false; set channels.email.consentGranted=true after explicit user permission");
            return Ok(());
        }
        tracing::info!(bot = %self.bot_id, mailbox_id = %self.mailbox_id, host = %self.cfg.imap_host, mailbox = %self.cfg.imap_mailbox, "email channel started");
        poller::run(self, inbound, cancel).await
    }

    async fn send(&self, msg: &OutboundMessage, progress: &mut Progress) -> Result<(), SendError> {
        outbound::send(self, msg, progress).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_normalized_and_mailboxes_have_stable_ids() {
        assert_eq!(normalize_address("Bot <Bot@X.org>"), "bot@x.org");
        assert_eq!(normalize_address(" bot@x.org "), "bot@x.org");
        assert_eq!(normalize_address("bot"), "");
        let cfg = EmailConfig {
            imap_host: "imap.x".into(),
            imap_username: "bot@x".into(),
            ..EmailConfig::default()
        };
        let same = EmailConfig {
            imap_host: "IMAP.x".into(),
            ..cfg.clone()
        };
        let other = EmailConfig {
            imap_mailbox: "Bot".into(),
            ..cfg.clone()
        };
        assert_eq!(mailbox_id(&cfg), mailbox_id(&same));
        assert_ne!(mailbox_id(&cfg), mailbox_id(&other));
        assert_eq!(mailbox_id(&cfg).len(), 16);
    }
}

//! `nanobot pairing list | approve CODE | revoke SENDER`: the pairing requests of chat-channel
//! senders, in Redis, shared by every gateway replica.

use std::time::Duration;

use anyhow::Context as _;
use clap::Subcommand;
use tokio_util::sync::CancellationToken;

use nanobot_core::pairing::PairingStore;
use nanobot_runtime::config::Config;
use nanobot_runtime::store;

/// Pairing subcommands.
#[derive(Debug, Subcommand)]
pub enum PairingAction {
    /// List pending pairing requests (code, bot, channel, sender).
    List,
    /// Approve a pending code: its sender may talk to the bot from now on.
    Approve {
        /// The 8-character code the sender received.
        code: String,
    },
    /// Revoke an approved sender.
    Revoke {
        /// The sender id as listed (`42|alice`).
        sender: String,
        /// Channel of the sender.
        #[arg(long, default_value = "telegram")]
        channel: String,
    },
}

/// Runs `action` for `bot` (every bot when `None`); returns the exit code.
pub async fn run(cfg: &Config, bot: Option<&str>, action: &PairingAction) -> anyhow::Result<i32> {
    let cancel = CancellationToken::new();
    let guard = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        guard.cancel();
    });
    let redis = store::connect(&cfg.store, &cancel)
        .await
        .with_context(|| format!("connect to redis at {}", cfg.store.url))?;
    let bots: Vec<String> = match bot {
        Some(b) => vec![b.to_string()],
        None => cfg.bots().into_iter().map(|b| b.id).collect(),
    };
    match action {
        PairingAction::List => {
            let mut any = false;
            for bot in &bots {
                for p in PairingStore::new(redis.clone(), bot).pending().await? {
                    any = true;
                    println!(
                        "{}  bot={}  channel={}  sender={}",
                        p.code, p.bot, p.channel, p.sender_id
                    );
                }
            }
            if !any {
                println!("No pending pairing requests.");
            }
            Ok(0)
        }
        PairingAction::Approve { code } => {
            for bot in &bots {
                if let Some(p) = PairingStore::new(redis.clone(), bot).approve(code).await? {
                    println!("Approved {} on {} (bot {}).", p.sender_id, p.channel, p.bot);
                    return Ok(0);
                }
            }
            eprintln!("No pending pairing request with code {code} (it may have expired).");
            Ok(1)
        }
        PairingAction::Revoke { sender, channel } => {
            let mut revoked = false;
            for bot in &bots {
                revoked |= PairingStore::new(redis.clone(), bot)
                    .revoke(channel, sender)
                    .await?;
            }
            if revoked {
                println!("Revoked {sender} on {channel}.");
                Ok(0)
            } else {
                eprintln!("{sender} was not approved on {channel}.");
                Ok(1)
            }
        }
    }
}

//! `nanobot sessions import [--workspace PATH] [--force]`: upstream's JSONL sessions (HEAD's
//! `<config dir>/sessions/<workspace id>/`, `<workspace>/sessions/`, the legacy
//! `~/.nanobot/sessions/`) into the bot's Redis sessions, idempotently
//! (`nanobot_core::session::import`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Subcommand;
use tokio_util::sync::CancellationToken;

use nanobot_core::session::SessionStore;
use nanobot_core::session::import::{self, Outcome};
use nanobot_runtime::config::{self, Config};
use nanobot_runtime::lease::Leases;
use nanobot_runtime::store;

/// Sessions subcommands.
#[derive(Debug, Subcommand)]
pub enum SessionsAction {
    /// Load upstream nanobot's JSONL sessions into Redis. Sessions already in Redis are left
    /// alone (so running it again imports nothing twice) unless `--force`.
    Import {
        /// Upstream workspace whose sessions to import (default: the bot's workspace).
        #[arg(long, short = 'w')]
        workspace: Option<PathBuf>,
        /// Replace sessions that already exist in Redis.
        #[arg(long)]
        force: bool,
    },
}

/// Runs `action` for `bot` (default: the first bot); `config_path` is the config file whose
/// directory holds HEAD's session store. Returns the exit code: 1 when a file failed.
pub async fn run(
    cfg: &Config,
    config_path: &Path,
    bot: Option<&str>,
    action: &SessionsAction,
) -> anyhow::Result<i32> {
    let SessionsAction::Import { workspace, force } = action;
    let spec = match bot {
        Some(id) => cfg
            .bot(id)
            .with_context(|| format!("no bot {id:?} in the config"))?,
        None => cfg.bots().remove(0),
    };
    let workspace = workspace.clone().unwrap_or(spec.workspace);
    let config_dir = config_path.parent().unwrap_or(Path::new("."));
    let dirs = import::source_dirs(&workspace, config_dir, dirs::home_dir().as_deref());
    let files = import::session_files(&dirs);
    if files.is_empty() {
        let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        println!("no session files found in {}", looked.join(", "));
        return Ok(0);
    }
    let cancel = CancellationToken::new();
    let guard = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        guard.cancel();
    });
    let redis = store::connect(&cfg.store, &cancel)
        .await
        .with_context(|| format!("connect to redis at {}", config::redact_url(&cfg.store.url)))?;
    let ttl = Duration::from_secs_f64(cfg.runner.session_lease_secs);
    let leases = Leases::new(redis.clone(), "nanobot-cli-import", ttl);
    let sessions = SessionStore::new(redis, &spec.id);
    let outcomes = import::import_files(&sessions, &leases, &files, *force, ttl * 3).await;
    let (mut imported, mut failed) = (0, 0);
    for outcome in &outcomes {
        match outcome {
            Outcome::Imported(s) => {
                imported += 1;
                let corrupt = match s.corrupt_lines {
                    0 => String::new(),
                    n => format!(", {n} corrupt line(s) skipped"),
                };
                println!(
                    "imported {} ({} messages, last_consolidated {}{corrupt}) from {}",
                    s.key,
                    s.messages.len(),
                    s.last_consolidated,
                    s.source.display()
                );
            }
            Outcome::Exists(s) => println!(
                "skipped {}: already in redis (--force replaces it) ({})",
                s.key,
                s.source.display()
            ),
            Outcome::Superseded(s) => println!(
                "skipped {}: a newer copy is imported instead ({})",
                s.key,
                s.source.display()
            ),
            Outcome::Failed(path, e) => {
                failed += 1;
                eprintln!("failed {}: {e}", path.display());
            }
        }
    }
    println!(
        "{imported} session(s) imported into bot {}, {failed} failed",
        spec.id
    );
    Ok(i32::from(failed > 0))
}

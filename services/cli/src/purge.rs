//! `nanobot bots remove --purge`: after the bot left the registry, deletes its data.
//!
//! - Redis: every key of the bot ([`keys::bot_key_patterns`]: sessions, their markers and
//!   leases, pairing, channel state, limits), found with `SCAN` (never `KEYS`) and deleted with
//!   `UNLINK`. Its token usage ([`keys::usage_prefix`]) is billing data and stays unless
//!   `--purge-usage`.
//! - Cron: its jobs in its workspace's `cron/jobs.json` (locked write), or with the workspace.
//! - The workspace directory, when the CLI can reach it (the same path exists here) and no
//!   other bot of the registry or the config uses it: it is renamed to `<dir>.purging` (one
//!   atomic step) and that is deleted. A workspace another bot shares keeps everything but
//!   this bot's cron jobs; one not found here is reported (delete it where the roles run).
//!
//! Idempotent: each step deletes what is still there, so a purge run again (after a SIGKILL
//! mid-way, or after a turn still running at the removal wrote again) completes it. The
//! bot's entry is read from the registry's history (the last revision before the removal).
//!
//! Not yet: a Redis Cluster (one `SCAN` sees one node) is refused with a clear error, the
//! bot removed and its data kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use async_nats::jetstream::kv;
use futures::StreamExt as _;
use redis::AsyncCommands as _;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use nanobot_proto::keys;
use nanobot_runtime::bot_registry;
use nanobot_runtime::config::{Config, expand_home};
use nanobot_runtime::store::{self, Store};

/// How many keys one `SCAN` step asks for.
const SCAN_COUNT: usize = 500;

/// What a purge deleted.
#[derive(Debug, Default)]
pub struct Purged {
    /// Redis keys deleted.
    pub keys: usize,
    /// Cron jobs deleted (with a workspace deleted, its jobs are in it).
    pub cron_jobs: usize,
    /// What became of the workspace, in words.
    pub workspace: String,
}

/// Purges bot `id`'s data (its registry entry is already removed). `config` is the config
/// file's raw bots, for the workspaces of bots never changed live.
pub async fn purge(
    cfg: &Config,
    registry: &kv::Store,
    config: &BTreeMap<String, Value>,
    id: &str,
    usage: bool,
) -> anyhow::Result<Purged> {
    if id.is_empty()
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        bail!("bot id {id:?}: only a plain id (letters, digits, '-', '_') can be purged");
    }
    if keys::hash_tag(keys::CRON_LEADER) == id {
        bail!("bot {id}: its keys' tag is the fleet's own; purge it by hand");
    }
    let mut others = bot_registry::list(registry).await?;
    for (bot, raw) in config {
        if !registry_has(registry, bot).await? {
            others.entry(bot.clone()).or_insert_with(|| raw.clone());
        }
    }
    others.remove(id);
    let entry = match last_entry(registry, id).await? {
        Some(raw) => Some(raw),
        None => config.get(id).cloned(),
    };
    if entry.is_none() && !registry_has(registry, id).await? {
        bail!("no bot {id}");
    }
    let mut purged = Purged {
        keys: purge_keys(cfg, id, usage).await?,
        ..Default::default()
    };
    match entry {
        Some(raw) => purge_workspace(cfg, &raw, id, &others, &mut purged)?,
        None => purged.workspace = "unknown (no entry left in the registry's history)".into(),
    }
    Ok(purged)
}

/// Whether the registry ever held `id` (a removal marker counts: the config's entry is then
/// not another live bot).
async fn registry_has(registry: &kv::Store, id: &str) -> anyhow::Result<bool> {
    Ok(registry.entry(id).await.context("read the bot")?.is_some())
}

/// Returns the last entry bot `id` had in the registry (its history), if any.
async fn last_entry(registry: &kv::Store, id: &str) -> anyhow::Result<Option<Value>> {
    let mut history = match registry.history(id).await {
        Ok(h) => h,
        Err(e) if e.kind() == kv::WatchErrorKind::TimedOut => return Ok(None),
        Err(e) => return Err(e).context("read the bot's history"),
    };
    let mut last = None;
    while let Some(entry) = history.next().await {
        let entry = entry.context("read the bot's history")?;
        if entry.operation == kv::Operation::Put
            && let Ok(raw) = serde_json::from_slice(&entry.value)
        {
            last = Some(raw);
        }
        if entry.delta == 0 {
            break;
        }
    }
    Ok(last)
}

/// Deletes every Redis key of `id` (its usage too when `usage`); returns how many.
async fn purge_keys(cfg: &Config, id: &str, usage: bool) -> anyhow::Result<usize> {
    let cancel = CancellationToken::new();
    let mut redis = store::connect(&cfg.store, &cancel)
        .await
        .context("connect to redis")?;
    if matches!(redis, Store::Cluster(..)) {
        bail!(
            "purging a bot's keys on a Redis Cluster is not supported yet; \
             the bot is removed and its data kept"
        );
    }
    let usage_prefix = keys::usage_prefix(id);
    let mut deleted = 0;
    for pattern in keys::bot_key_patterns(id) {
        let mut cursor = 0u64;
        loop {
            let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(&mut redis)
                .await
                .context("scan the bot's keys")?;
            let doomed: Vec<&String> = found
                .iter()
                .filter(|k| usage || !k.starts_with(&usage_prefix))
                .collect();
            if !doomed.is_empty() {
                let n: usize = redis.unlink(&doomed).await.context("delete keys")?;
                deleted += n;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(deleted)
}

/// The workspace of a raw entry: its `workspace`, else `agents.defaults.workspace`.
fn workspace_of(cfg: &Config, raw: &Value) -> (PathBuf, bool) {
    match raw.get("workspace").and_then(Value::as_str) {
        Some(dir) => (expand_home(dir), true),
        None => (expand_home(&cfg.agents.defaults.workspace), false),
    }
}

fn same_place(a: &Path, b: &Path) -> bool {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    canon(a) == canon(b)
}

/// Deletes the bot's workspace when only it uses it, else its cron jobs in it.
fn purge_workspace(
    cfg: &Config,
    raw: &Value,
    id: &str,
    others: &BTreeMap<String, Value>,
    purged: &mut Purged,
) -> anyhow::Result<()> {
    let (dir, own) = workspace_of(cfg, raw);
    let aside = purging_path(&dir);
    if aside.exists() {
        // A purge killed mid-delete: finish it.
        std::fs::remove_dir_all(&aside).with_context(|| format!("delete {}", aside.display()))?;
    }
    if !dir.exists() {
        purged.workspace = format!(
            "{} not found here (deleted already, or on the roles' machines: delete it there)",
            dir.display()
        );
        return Ok(());
    }
    let sharer = others
        .iter()
        .find(|(_, r)| same_place(&workspace_of(cfg, r).0, &dir));
    if let Some(reason) = keep_reason(own, sharer.map(|(b, _)| b.as_str()), &dir) {
        purged.cron_jobs = purge_cron_jobs(&dir, id)?;
        purged.workspace = format!("{} kept ({reason}); its cron jobs deleted", dir.display());
        return Ok(());
    }
    std::fs::rename(&dir, &aside)
        .with_context(|| format!("move {} aside for deletion", dir.display()))?;
    std::fs::remove_dir_all(&aside).with_context(|| format!("delete {}", aside.display()))?;
    purged.workspace = format!("{} deleted", dir.display());
    Ok(())
}

/// Why a workspace is not deleted, if it is not.
fn keep_reason(own: bool, sharer: Option<&str>, dir: &Path) -> Option<String> {
    if let Some(bot) = sharer {
        return Some(format!("bot {bot} uses it too"));
    }
    if !own {
        return Some("the default workspace".into());
    }
    let home = dirs::home_dir().unwrap_or_default();
    let cwd = std::env::current_dir().unwrap_or_default();
    if dir.parent().is_none() || same_place(dir, &home) || cwd.starts_with(dir) {
        return Some("a directory the CLI will not delete".into());
    }
    None
}

/// `<dir>.purging`: where a workspace is moved before its deletion.
fn purging_path(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(".purging");
    dir.with_file_name(name)
}

/// Deletes bot `id`'s jobs from `workspace`'s `cron/jobs.json`; returns how many.
fn purge_cron_jobs(workspace: &Path, id: &str) -> anyhow::Result<usize> {
    if !nanobot_cron::store::jobs_path(workspace).exists() {
        return Ok(0);
    }
    nanobot_cron::store::update(workspace, |file| {
        let before = file.jobs.len();
        file.jobs.retain(|j| j.bot.as_deref() != Some(id));
        let gone = before - file.jobs.len();
        (gone > 0, gone)
    })
}

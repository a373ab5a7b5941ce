//! The bot registry: every bot's `bots.<id>` entry in the JetStream key-value bucket
//! [`subjects::BOTS_BUCKET`], so bots are added, changed and removed while the fleet runs.
//!
//! Why NATS KV and not Redis: every role already connects to NATS, a KV bucket has a watch
//! (a role hears a change within milliseconds, and on restart resumes from the latest
//! revision of every key), keeps history and is replicated like the streams.
//!
//! An entry is the bot's raw JSON as in `config.json`, secrets as `${VAR}` references (never
//! their values): [`entry`] refuses a plain-text secret, and each role resolves the
//! references from its own environment when it applies the entry ([`resolve`]).
//!
//! The config's `bots` stay the base: [`seed`] writes each one that the registry does not
//! hold yet (create-if-absent, so a restart never overwrites a live change), and a role that
//! finds no registry serves the config's bots as before.
//!
//! SIGKILL: a put or delete is one atomic KV write per bot; a CLI killed mid-way changed
//! either nothing or that bot. A role killed mid-change re-reads the latest revision of
//! every key when it starts again ([`watch`] delivers the last value per key first).

use std::collections::{BTreeMap, HashMap};

use anyhow::Context as _;
use async_nats::jetstream::{self, kv};
use futures::StreamExt as _;
use serde_json::Value;

use nanobot_proto::subjects;

use crate::config::{BotConfig, Config};

pub mod admin;

mod follow;
pub use follow::{Applied, Follower, LiveConfig};

/// One change of the registry, as a role applies it.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Bot `id` was added or changed: its raw entry.
    Put(String, Value),
    /// Bot `id` was removed.
    Removed(String),
}

impl Change {
    /// Returns the bot id the change is about.
    pub fn bot(&self) -> &str {
        match self {
            Change::Put(id, _) | Change::Removed(id) => id,
        }
    }
}

/// The bucket's settings (history of 5 revisions per bot).
pub fn bucket_config(replicas: usize) -> kv::Config {
    kv::Config {
        bucket: subjects::BOTS_BUCKET.into(),
        description: "the fleet's bots, by id (secrets as ${VAR} references)".into(),
        history: 5,
        num_replicas: replicas,
        ..Default::default()
    }
}

/// Creates the bucket when absent (`nanobot bus init`, `nanobot up`).
pub async fn init(js: &jetstream::Context, replicas: usize) -> anyhow::Result<kv::Store> {
    if let Ok(store) = js.get_key_value(subjects::BOTS_BUCKET).await {
        return Ok(store);
    }
    js.create_key_value(bucket_config(replicas))
        .await
        .context("create the bot registry bucket")
}

/// Opens the bucket (the roles; they never create it).
pub async fn open(js: &jetstream::Context) -> anyhow::Result<kv::Store> {
    js.get_key_value(subjects::BOTS_BUCKET)
        .await
        .context("open the bot registry bucket")
}

/// Key names that hold secrets: their string values must be `${VAR}` references.
fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["token", "secret", "password", "apikey"]
        .iter()
        .any(|s| k.contains(s))
}

fn plain_secrets(value: &Value, at: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let child = format!("{at}.{k}");
                match v {
                    Value::String(s) if is_secret_key(k) && !s.is_empty() && !s.contains("${") => {
                        out.push(child)
                    }
                    _ => plain_secrets(v, &child, out),
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                plain_secrets(v, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Checks a bot id: letters, digits, `-` and `_` (a KV key and a subject token).
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty()
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "bot id {id:?}: use letters, digits, '-' and '_' only"
        ));
    }
    Ok(())
}

/// Checks a bot's raw entry for the registry: a JSON object that is a valid `bots.<id>`
/// entry once its references are resolved, with every secret a `${VAR}` reference.
pub fn entry(id: &str, raw: &Value) -> Result<Vec<u8>, String> {
    check_id(id)?;
    if !raw.is_object() {
        return Err(format!("bot {id}: the entry must be a JSON object"));
    }
    let mut plain = Vec::new();
    plain_secrets(raw, &format!("bots.{id}"), &mut plain);
    if !plain.is_empty() {
        return Err(format!(
            "{}: a secret in plain text; give it as a reference, e.g. \"${{TG_TOKEN}}\", \
             set in the roles' environment",
            plain.join(", ")
        ));
    }
    serde_json::from_value::<BotConfig>(raw.clone())
        .map_err(|e| format!("bot {id}: not a valid bot entry: {e}"))?;
    serde_json::to_vec(raw).map_err(|e| e.to_string())
}

/// Resolves a raw entry's `${VAR}` references from `env` into the bot's config; a missing
/// variable or a bad entry is an error naming it.
pub fn resolve(id: &str, raw: &Value, env: &HashMap<String, String>) -> Result<BotConfig, String> {
    let mut value = raw.clone();
    let mut problems = Vec::new();
    crate::config::load::interpolate(&mut value, &format!("bots.{id}"), env, &mut problems);
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    serde_json::from_value(value).map_err(|e| format!("bots.{id}: {e}"))
}

/// Returns the raw (uninterpolated) `bots` section of the config file at `path`: what
/// [`seed`] writes, references kept as references.
pub fn raw_bots(path: &std::path::Path) -> anyhow::Result<BTreeMap<String, Value>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    };
    let root: Value = serde_json::from_str(&text).context("parse the config")?;
    Ok(root
        .get("bots")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default())
}

/// Writes every bot of `bots` the registry never held (create-if-absent per bot: a bot
/// changed or removed there stays as it is, a removal's marker included). Returns the ids
/// written.
pub async fn seed(
    store: &kv::Store,
    bots: &BTreeMap<String, Value>,
) -> anyhow::Result<Vec<String>> {
    let mut written = Vec::new();
    for (id, raw) in bots {
        let Ok(bytes) = serde_json::to_vec(raw) else {
            continue;
        };
        if store
            .entry(id)
            .await
            .with_context(|| format!("read bot {id}"))?
            .is_some()
        {
            continue;
        }
        match store.create(id, bytes.into()).await {
            Ok(_) => written.push(id.clone()),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("seed bot {id}")),
        }
    }
    Ok(written)
}

/// Returns every bot the registry holds, by id.
pub async fn list(store: &kv::Store) -> anyhow::Result<BTreeMap<String, Value>> {
    let mut out = BTreeMap::new();
    let mut keys = store.keys().await.context("list the bots")?;
    while let Some(key) = keys.next().await {
        let key = key.context("list the bots")?;
        if let Some(bytes) = store.get(&key).await.context("read a bot")? {
            out.insert(key, serde_json::from_slice(&bytes).unwrap_or(Value::Null));
        }
    }
    Ok(out)
}

/// Decodes one watched entry into a change (`None`: an undecodable value, logged).
pub fn change(entry: &kv::Entry) -> Option<Change> {
    match entry.operation {
        kv::Operation::Put => match serde_json::from_slice(&entry.value) {
            Ok(raw) => Some(Change::Put(entry.key.clone(), raw)),
            Err(e) => {
                tracing::error!(bot = %entry.key, error = %e, "undecodable bot registry entry ignored");
                None
            }
        },
        kv::Operation::Delete | kv::Operation::Purge => Some(Change::Removed(entry.key.clone())),
    }
}

/// Watches every bot: first the latest revision of each key (deletions included), then each
/// change as it happens.
pub async fn watch(store: &kv::Store) -> anyhow::Result<kv::Watch> {
    store
        .watch_with_history(">")
        .await
        .context("watch the bot registry")
}

/// Returns `cfg` with `change` applied to its `bots`; an entry that does not resolve leaves
/// the bot as it was and is returned as the error.
pub fn apply(
    cfg: &Config,
    change: &Change,
    env: &HashMap<String, String>,
) -> Result<Config, String> {
    let mut next = cfg.clone();
    match change {
        Change::Put(id, raw) => {
            next.bots.insert(id.clone(), resolve(id, raw, env)?);
        }
        Change::Removed(id) => {
            next.bots.remove(id);
        }
    }
    Ok(next)
}

/// Returns `cfg` serving bot `id` alone (its channels only), as a live change builds it.
pub fn only(cfg: &Config, id: &str) -> Config {
    let mut one = cfg.clone();
    one.bots.retain(|b, _| b == id);
    one
}

#[cfg(test)]
mod tests;

//! Changing the registry one bot at a time: the one code path of `nanobot bots add|update|
//! remove|show` and of the HTTP API's `/v1/bots`. Every write goes through [`super::entry`]
//! (a valid entry, secrets as `${VAR}` references only); what is shown goes through
//! [`masked`] (a secret that is not a reference is never shown).
//!
//! SIGKILL: each change is one atomic KV write of one bot (`update` a compare-and-set on the
//! revision it read); a process killed mid-way changed that bot or nothing.

use std::collections::BTreeMap;

use async_nats::jetstream::kv;
use serde_json::{Value, json};

use crate::config::{is_secret_key, redact_url};

/// Why a change of the registry was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The id or the entry is not acceptable; the text says why (never a secret's value).
    #[error("{0}")]
    Invalid(String),
    /// The registry holds no bot of that id.
    #[error("no bot {0}")]
    NotFound(String),
    /// `add` of an id the registry holds already.
    #[error("bot {0} exists")]
    Exists(String),
    /// The bot changed between the read and the write of an update.
    #[error("bot {0} was changed meanwhile; read it again and retry")]
    Changed(String),
    /// The registry could not be read or written.
    #[error("{context}: {cause:#}")]
    Store {
        /// What was being done.
        context: &'static str,
        /// Why it failed.
        #[source]
        cause: anyhow::Error,
    },
}

fn store_err(context: &'static str) -> impl FnOnce(kv::EntryError) -> AdminError {
    move |e| AdminError::Store {
        context,
        cause: e.into(),
    }
}

/// How an update changes the entry it reads.
#[derive(Debug, Clone)]
pub enum Edit {
    /// Lay these fields over the entry, objects key by key (`nanobot bots update`, `PATCH`).
    Merge(Value),
    /// Replace the whole entry (`PUT`).
    Replace(Value),
}

/// Lays `over` onto `base`, objects key by key.
pub fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (k, v) in over {
                merge(base.entry(k).or_insert(Value::Null), v);
            }
        }
        (base, over) => *base = over,
    }
}

/// Whether `s` is one `${VAR}` reference and nothing else.
fn is_reference(s: &str) -> bool {
    s.strip_prefix("${")
        .and_then(|r| r.strip_suffix('}'))
        .is_some_and(|name| !name.is_empty() && !name.contains(['$', '{', '}']))
}

/// `raw` as it may be shown: a secret-named value that is not a `${VAR}` reference (a
/// config bot seeded with its token in plain text) becomes `***`, a URL's password too.
pub fn masked(raw: &Value) -> Value {
    let mut out = raw.clone();
    mask(&mut out);
    out
}

fn mask(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                match v {
                    Value::String(s) if is_secret_key(k) && !s.is_empty() && !is_reference(s) => {
                        *v = Value::String("***".into())
                    }
                    Value::String(s) if s.contains("://") => {
                        let shown = redact_url(s);
                        *s = shown;
                    }
                    _ => mask(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(mask),
        _ => {}
    }
}

/// The registry's bot `id` (its raw entry, references as references).
pub async fn get(store: &kv::Store, id: &str) -> Result<Value, AdminError> {
    super::check_id(id).map_err(AdminError::Invalid)?;
    match store.get(id).await.map_err(store_err("read the bot"))? {
        Some(bytes) => Ok(serde_json::from_slice(&bytes).unwrap_or(Value::Null)),
        None => Err(AdminError::NotFound(id.to_string())),
    }
}

/// Every bot of the registry, by id.
pub async fn list(store: &kv::Store) -> Result<BTreeMap<String, Value>, AdminError> {
    super::list(store).await.map_err(|cause| AdminError::Store {
        context: "list the bots",
        cause,
    })
}

/// Adds bot `id` with entry `raw`; refused when the registry holds `id` already.
pub async fn add(store: &kv::Store, id: &str, raw: &Value) -> Result<(), AdminError> {
    let bytes = super::entry(id, raw).map_err(AdminError::Invalid)?;
    match store.create(id, bytes.into()).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
            Err(AdminError::Exists(id.to_string()))
        }
        Err(e) => Err(AdminError::Store {
            context: "write the bot",
            cause: e.into(),
        }),
    }
}

/// Changes bot `id` by `edit`, a compare-and-set on the revision read; returns the new entry.
pub async fn update(store: &kv::Store, id: &str, edit: Edit) -> Result<Value, AdminError> {
    super::check_id(id).map_err(AdminError::Invalid)?;
    let current = store.entry(id).await.map_err(store_err("read the bot"))?;
    let Some(current) = current.filter(|c| c.operation == kv::Operation::Put) else {
        return Err(AdminError::NotFound(id.to_string()));
    };
    let raw = match edit {
        Edit::Replace(raw) => raw,
        Edit::Merge(over) => {
            if !over.is_object() {
                return Err(AdminError::Invalid(format!(
                    "bot {id}: the changes must be a JSON object"
                )));
            }
            let mut raw: Value = serde_json::from_slice(&current.value).unwrap_or(json!({}));
            merge(&mut raw, over);
            raw
        }
    };
    let bytes = super::entry(id, &raw).map_err(AdminError::Invalid)?;
    store
        .update(id, bytes.into(), current.revision)
        .await
        .map_err(|e| match e.kind() {
            kv::UpdateErrorKind::WrongLastRevision => AdminError::Changed(id.to_string()),
            _ => AdminError::Store {
                context: "write the bot",
                cause: e.into(),
            },
        })?;
    Ok(raw)
}

/// Removes bot `id` (a delete marker: its channels stop, its data is kept).
pub async fn remove(store: &kv::Store, id: &str) -> Result<(), AdminError> {
    super::check_id(id).map_err(AdminError::Invalid)?;
    if store
        .get(id)
        .await
        .map_err(store_err("read the bot"))?
        .is_none()
    {
        return Err(AdminError::NotFound(id.to_string()));
    }
    store.delete(id).await.map_err(|e| AdminError::Store {
        context: "remove the bot",
        cause: e.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masking_keeps_references_and_hides_plain_secrets_and_url_passwords() {
        let raw = json!({
            "model": "模型-🤖",
            "channels": {
                "telegram": {"token": "${TG_TOKEN}", "allowFrom": ["*"]},
                "slack": {"botToken": "xoxb-秘密", "appToken": "pre${X}"},
                "email": {"imapPassword": ""},
            },
            "providers": [{"apiBase": "https://u:pw@h/v1", "apiKey": "sk-live"}],
        });
        let shown = masked(&raw);
        let text = shown.to_string();
        assert_eq!(shown["channels"]["telegram"]["token"], "${TG_TOKEN}");
        assert_eq!(shown["channels"]["slack"]["botToken"], "***");
        assert_eq!(shown["channels"]["slack"]["appToken"], "***");
        assert_eq!(shown["channels"]["email"]["imapPassword"], "");
        assert_eq!(shown["model"], "模型-🤖");
        for secret in ["xoxb-秘密", "sk-live", ":pw@"] {
            assert!(!text.contains(secret), "{secret} shown: {text}");
        }
    }

    #[test]
    fn merging_lays_fields_over_objects_key_by_key() {
        let mut base =
            json!({"model": "a", "channels": {"telegram": {"enabled": true, "token": "${T}"}}});
        merge(
            &mut base,
            json!({"model": "b", "channels": {"telegram": {"enabled": false}}}),
        );
        assert_eq!(
            base,
            json!({"model": "b", "channels": {"telegram": {"enabled": false, "token": "${T}"}}})
        );
    }
}

//! Consolidation: move the oldest user-aligned chunk of a session into `memory/history.jsonl`
//! and advance `last_consolidated`; or archive a `/new` snapshot whole. (This issue writes
//! upstream's raw-archive format; the LLM summary comes with the full algorithm.)

use serde_json::Value;

use nanobot_core::memory::{append_history, estimate_tokens, pick_boundary, raw_archive};
use nanobot_core::session::SessionStore;
use nanobot_runtime::config::{AgentDefaults, BotSpec};

/// Upper bound on archive rounds per request (upstream).
pub const MAX_ROUNDS: usize = 5;

/// What one request did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Messages archived.
    pub archived: usize,
    /// `last_consolidated` afterwards.
    pub last_consolidated: usize,
}

/// Returns the token budget of replayable history (`window − maxTokens − 1024`).
pub fn budget(d: &AgentDefaults) -> usize {
    (d.context_window_tokens as usize).saturating_sub(d.max_tokens as usize + 1024)
}

/// Archives a snapshot (JSON array of rows) whole.
pub async fn archive_snapshot(
    bot: &BotSpec,
    session_key: &str,
    messages_json: &str,
) -> anyhow::Result<Outcome> {
    let rows: Vec<Value> = serde_json::from_str(messages_json)?;
    if rows.is_empty() {
        return Ok(Outcome::default());
    }
    let text = raw_archive(&rows);
    let workspace = bot.workspace.clone();
    let key = session_key.to_string();
    tokio::task::spawn_blocking(move || append_history(&workspace, &text, Some(&key))).await??;
    Ok(Outcome {
        archived: rows.len(),
        last_consolidated: 0,
    })
}

/// Archives chunks until the unconsolidated tail fits `budget × consolidationRatio`.
pub async fn by_tokens(
    store: &SessionStore,
    bot: &BotSpec,
    d: &AgentDefaults,
    session_key: &str,
) -> anyhow::Result<Outcome> {
    let budget = budget(d);
    let target = (budget as f64 * d.consolidation_ratio) as usize;
    let mut outcome = Outcome::default();
    for _ in 0..MAX_ROUNDS {
        let session = store.load(session_key).await?;
        outcome.last_consolidated = session.last_consolidated;
        let tail = &session.messages[session.last_consolidated..];
        let estimate = estimate_tokens(tail);
        if estimate <= target {
            break;
        }
        let Some(boundary) = pick_boundary(
            &session.messages,
            session.last_consolidated,
            estimate - target,
        ) else {
            break;
        };
        let chunk = session.messages[session.last_consolidated..boundary].to_vec();
        let text = raw_archive(&chunk);
        let workspace = bot.workspace.clone();
        let key = session_key.to_string();
        tokio::task::spawn_blocking(move || append_history(&workspace, &text, Some(&key)))
            .await??;
        store.set_last_consolidated(session_key, boundary).await?;
        outcome.archived += chunk.len();
        outcome.last_consolidated = boundary;
        tracing::info!(session_id = %session_key, archived = chunk.len(), last_consolidated = boundary, "archived chunk");
    }
    Ok(outcome)
}

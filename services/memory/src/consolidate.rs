//! The Consolidator (upstream semantics, reference §8.2–8.4): archive a session's oldest
//! user-aligned chunks until its context is under `budget × consolidationRatio`, archive a
//! `/new` snapshot, or archive an idle session's whole tail. Each chunk becomes one
//! `history.jsonl` entry: an LLM summary, or upstream's raw archive when the call cannot be
//! used. A committed chunk leaves 0.3.5's summary checkpoint: `_last_summary` (the summary,
//! or the raw archive after the previous summary) and the hidden continuation row inserted at
//! the boundary, where replay resumes (`last_consolidated` points at it); the next archive
//! skips that row, as it skips command rows.
//!
//! Fencing: the LLM call runs without holding anything; the result is committed under the
//! session's own lease (the agent's lease primitive and keys, so no turn runs meanwhile),
//! after checking the chunk is still the session's unarchived prefix, and
//! `last_consolidated` and `_last_summary` are written with that lease's fencing token. A
//! `/new` in between (clear) or another worker's archive makes the check fail and the chunk
//! is dropped, never written over the new session.
//!
//! SIGKILL: a worker killed after appending a chunk's row but before `last_consolidated` (or
//! the job's done marker) leaves the row; the redelivered job archives the same chunk again,
//! finds the row by the chunk's id and only advances `last_consolidated`: one row per chunk.
//! The checkpoint (row, `last_consolidated`, metadata) is one script: all or nothing.

use std::time::Duration;

use serde_json::{Map, Value};

use nanobot_core::history;
use nanobot_core::memory::archive::{self, RawReason};
use nanobot_core::memory::{Budget, estimate_prompt};
use nanobot_core::runner;
use nanobot_core::session::SessionError;
use nanobot_proto::keys;
use nanobot_runtime::config::Config;
use nanobot_runtime::lease::Leases;

use crate::bots::MemoryBot;
use crate::writer::{LeaseLost, Writer};

/// How long a worker waits for a session's lease (a turn in progress) before retrying later.
const SESSION_WAIT: Duration = Duration::from_secs(20);

/// Consolidation errors; every one leaves the job to be retried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A turn held the session longer than [`SESSION_WAIT`].
    #[error("session {0} is busy")]
    Busy(String),
    /// The session store failed (or the lease was lost: fenced).
    #[error(transparent)]
    Session(#[from] SessionError),
    /// Redis failed.
    #[error("redis failed: {0}")]
    Redis(#[from] redis::RedisError),
    /// A memory file could not be written.
    #[error("memory file write failed: {0}")]
    Io(#[from] std::io::Error),
    /// The memory lease was lost: nothing more is written.
    #[error(transparent)]
    LeaseLost(#[from] LeaseLost),
    /// The `/new` snapshot was not a JSON array of rows.
    #[error("archive snapshot is not a JSON array: {0}")]
    Snapshot(#[from] serde_json::Error),
}

/// What one job did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Messages archived.
    pub archived: usize,
    /// `last_consolidated` afterwards.
    pub last_consolidated: usize,
}

/// What the Consolidator works with.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    /// Config (agent defaults, LLM timeout).
    pub cfg: &'a Config,
    /// The bot.
    pub bot: &'a MemoryBot,
    /// Lease taker for session leases.
    pub leases: &'a Leases,
    /// The bot's memory lease (checked before every memory file write).
    pub writer: Writer<'a>,
}

/// A chunk's archive text.
struct Archived {
    /// The `history.jsonl` entry.
    text: String,
    /// Whether it is the raw archive (the LLM summary could not be used).
    raw: bool,
}

/// Returns the channel part of a session key (`telegram:1` → `telegram`).
fn channel_of(session_key: &str) -> &str {
    session_key.split(':').next().unwrap_or("cli")
}

/// Summarises `messages[from..boundary]` with the LLM, or formats it as a raw archive.
async fn archive_text(
    ctx: Ctx<'_>,
    session_key: &str,
    messages: &[Value],
    from: usize,
    boundary: usize,
) -> Archived {
    let d = &ctx.cfg.agents.defaults;
    let system = ctx.bot.context.system_prompt(channel_of(session_key));
    let tools = ctx.bot.tool_definitions().await;
    let budget = Budget::of(d).budget;
    let attempt = async {
        let prompt = archive::archive_messages(&system, messages, from, boundary, &tools, budget)?;
        let request = archive::archive_request(&ctx.bot.target.model, prompt, tools, d.max_tokens);
        let telemetry = runner::Telemetry::of(&ctx.bot.target, ctx.cfg);
        let timeout = nanobot_core::resolve::llm_timeout(ctx.cfg);
        let response = runner::traced_chat(&ctx.bot.provider, &request, &telemetry, timeout)
            .await
            .map_err(RawReason::Provider)?;
        archive::summary_of(&response)
    };
    match attempt.await {
        Ok(summary) => Archived {
            text: summary,
            raw: false,
        },
        Err(reason) => {
            tracing::warn!(session_id = %session_key, %reason, "archiving raw messages");
            Archived {
                text: archive::raw_archive(&archive::archivable(&messages[from..boundary])),
                raw: true,
            }
        }
    }
}

/// Appends the archive `text` of `chunk` to the bot's history (off the async threads), unless
/// a redelivery of the job already did: the row carries the chunk's id
/// (`MemoryFiles::append_once`). Checks the memory lease first.
async fn append_history(
    ctx: Ctx<'_>,
    text: String,
    session_key: &str,
    chunk: &[Value],
) -> Result<i64, Error> {
    ctx.writer.check().await?;
    let files = ctx.bot.files();
    let key = session_key.to_string();
    let id = archive::chunk_id(session_key, chunk);
    let (cursor, appended) =
        tokio::task::spawn_blocking(move || files.append_once(&text, Some(&key), &id))
            .await
            .map_err(std::io::Error::other)??;
    if !appended {
        tracing::info!(session_id = %session_key, cursor, "chunk already archived by an earlier delivery");
    }
    Ok(cursor)
}

/// Commits an archived chunk under the session's lease: only if `messages[from..boundary]`
/// (and, for idle sessions, nothing after it) is still the session's unarchived prefix.
/// Returns whether it was committed.
async fn commit_chunk(
    ctx: Ctx<'_>,
    session_key: &str,
    chunk: &[Value],
    from: usize,
    whole_tail: bool,
    archived: Archived,
) -> Result<bool, Error> {
    let lease = ctx
        .leases
        .acquire_within(
            &keys::session_lease(&ctx.bot.spec.id, session_key),
            &keys::session_fence(&ctx.bot.spec.id, session_key),
            SESSION_WAIT,
        )
        .await
        .ok_or_else(|| Error::Busy(session_key.to_string()))?;
    let result = async {
        let sessions = ctx.bot.sessions.fenced(lease.fence());
        let now = sessions.load(session_key).await?;
        let boundary = from + chunk.len();
        let unchanged = now.last_consolidated == from
            && now.messages.get(from..boundary) == Some(chunk)
            && (!whole_tail || now.messages.len() == boundary);
        if !unchanged {
            tracing::info!(session_id = %session_key, "session changed meanwhile, chunk dropped");
            return Ok(false);
        }
        if lease.lost().is_cancelled() {
            return Err(Error::Busy(session_key.to_string()));
        }
        let mut metadata: Map<String, Value> = now.metadata;
        let summary = if archived.raw {
            archive::raw_checkpoint(&metadata, &archived.text)
        } else {
            archived.text.clone()
        };
        archive::remember_summary(&mut metadata, &summary);
        append_history(ctx, archived.text, session_key, chunk).await?;
        sessions
            .checkpoint(session_key, boundary, Some(&metadata))
            .await?;
        Ok(true)
    }
    .await;
    lease.release().await;
    result
}

/// Archives chunks until the session's estimate is at most `budget × consolidationRatio`
/// (at most [`archive::MAX_ROUNDS`]; stops after a raw archive). `overhead` is the system
/// prompt and tool tokens the agent measured.
pub async fn by_tokens(ctx: Ctx<'_>, session_key: &str, overhead: u64) -> Result<Outcome, Error> {
    let budget = Budget::of(&ctx.cfg.agents.defaults);
    let mut outcome = Outcome::default();
    for _ in 0..archive::MAX_ROUNDS {
        let session = ctx.bot.sessions.load(session_key).await?;
        let from = session.last_consolidated;
        outcome.last_consolidated = from;
        let replay = history::replay(&session.messages, from, usize::MAX);
        let estimate = overhead
            + tokio::task::spawn_blocking(move || estimate_prompt("", &replay, &[]))
                .await
                .map_err(std::io::Error::other)? as u64;
        if estimate <= budget.target {
            break;
        }
        let needed = (estimate - budget.target) as usize;
        let Some(boundary) = archive::pick_boundary(&session.messages, from, needed) else {
            break;
        };
        let archived = archive_text(ctx, session_key, &session.messages, from, boundary).await;
        let raw = archived.raw;
        let chunk = &session.messages[from..boundary];
        if !commit_chunk(ctx, session_key, chunk, from, false, archived).await? {
            break;
        }
        outcome.archived += chunk.len();
        outcome.last_consolidated = boundary;
        tracing::info!(session_id = %session_key, archived = chunk.len(), last_consolidated = boundary, raw, "archived chunk");
        if raw {
            break;
        }
    }
    Ok(outcome)
}

/// AutoCompact: archives an idle session's whole unarchived tail; nothing when a message
/// arrived meanwhile.
pub async fn idle(ctx: Ctx<'_>, session_key: &str) -> Result<Outcome, Error> {
    let session = ctx.bot.sessions.load(session_key).await?;
    let from = session.last_consolidated;
    let boundary = session.messages.len();
    if archive::archivable(&session.messages[from.min(boundary)..]).is_empty() {
        return Ok(Outcome {
            archived: 0,
            last_consolidated: from,
        });
    }
    let archived = archive_text(ctx, session_key, &session.messages, from, boundary).await;
    let chunk = &session.messages[from..boundary];
    let committed = commit_chunk(ctx, session_key, chunk, from, true, archived).await?;
    Ok(Outcome {
        archived: if committed { chunk.len() } else { 0 },
        last_consolidated: if committed { boundary } else { from },
    })
}

/// Archives a `/new` snapshot (a JSON array of rows) whole; the session itself was cleared
/// by the agent.
pub async fn snapshot(
    ctx: Ctx<'_>,
    session_key: &str,
    messages_json: &str,
) -> Result<Outcome, Error> {
    let rows: Vec<Value> = serde_json::from_str(messages_json)?;
    if archive::archivable(&rows).is_empty() {
        return Ok(Outcome::default());
    }
    let archived = archive_text(ctx, session_key, &rows, 0, rows.len()).await;
    append_history(ctx, archived.text, session_key, &rows).await?;
    Ok(Outcome {
        archived: rows.len(),
        last_consolidated: 0,
    })
}

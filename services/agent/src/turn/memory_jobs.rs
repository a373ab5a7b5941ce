//! The agent's side of memory: asking the memory workers for consolidation when a session's
//! context crosses the budget, archiving a session on `/new`, and the Dream commands
//! (`/dream`, `/dream-log`, `/dream-restore`, `/dream-prompt`), which the memory workers
//! answer, so every channel and `nanobot agent` get them and only memory workers write memory
//! files.

use std::time::Duration;

use futures::StreamExt as _;
use prost::Message as _;
use serde_json::Value;

use nanobot_core::memory::budget::estimate_prompt_bound;
use nanobot_core::memory::{Budget, estimate_prompt};
use nanobot_core::session::Session;
use nanobot_proto::{ConsolidationRequest, ConsolidationResult, MemoryJobKind, subjects};
use nanobot_runtime::bus;

use crate::base::bots::Bot;
use crate::base::command::Command;
use crate::base::deps::Deps;
use crate::turn::parts::Measured;

/// How long a `/dream` run is waited for before its report says it goes on.
pub const DREAM_WAIT: Duration = Duration::from_secs(600);
/// How long the other Dream commands wait for their answer, and `/compact` for its job.
pub const COMMAND_WAIT: Duration = Duration::from_secs(60);
/// The answer when no memory worker answered in time.
pub const NOT_ANSWERED: &str = "The memory worker has not answered yet; the request stays queued \
                                and runs when a memory worker is free.";

/// Returns the job kind and argument of a Dream command; `None` for other commands.
pub fn dream_job(cmd: &Command) -> Option<(MemoryJobKind, Option<&str>)> {
    match cmd {
        Command::Dream => Some((MemoryJobKind::Dream, None)),
        Command::DreamLog(arg) => Some((MemoryJobKind::DreamLog, arg.as_deref())),
        Command::DreamRestore(arg) => Some((MemoryJobKind::DreamRestore, arg.as_deref())),
        Command::DreamPrompt(arg) => Some((MemoryJobKind::DreamPrompt, arg.as_deref())),
        _ => None,
    }
}

/// A memory job asked for, whose result is awaited on a subscription taken before it was
/// published (so the result cannot pass unseen).
#[derive(Debug)]
pub struct Pending {
    id: String,
    results: async_nats::Subscriber,
}

impl Pending {
    /// Waits up to `wait` for the job's result; `None` when none came.
    pub async fn result(mut self, wait: Duration) -> Option<ConsolidationResult> {
        let answer = async {
            while let Some(msg) = self.results.next().await {
                match ConsolidationResult::decode(msg.payload) {
                    Ok(r) if r.request_id == self.id => return Some(r),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "skipping undecodable memory result"),
                }
            }
            None
        };
        tokio::time::timeout(wait, answer).await.ok().flatten()
    }
}

/// Publishes `request` for the memory workers and returns its [`Pending`] result.
pub async fn submit(deps: &Deps, request: &ConsolidationRequest) -> anyhow::Result<Pending> {
    let results = deps
        .nats
        .subscribe(subjects::consolidated(&request.bot))
        .await?;
    bus::publish(
        &deps.js,
        subjects::consolidate(&request.bot),
        Some(&request.id),
        request,
    )
    .await?;
    Ok(Pending {
        id: request.id.clone(),
        results,
    })
}

/// Returns the request of a Dream command (`kind`, `arg`) for message `message_id`.
pub fn dream_request(
    bot: &Bot,
    message_id: &str,
    session_key: &str,
    kind: MemoryJobKind,
    arg: Option<&str>,
) -> ConsolidationRequest {
    ConsolidationRequest {
        id: format!("{message_id}:{}", kind.as_str_name().to_lowercase()),
        bot: bot.spec.id.clone(),
        session_key: session_key.to_string(),
        kind: kind.into(),
        arg: arg.unwrap_or_default().to_string(),
        ..Default::default()
    }
}

/// Runs a quick Dream command (`/dream-log`, `/dream-restore`, `/dream-prompt`) through the
/// memory workers and returns their answer.
pub async fn dream_command(
    deps: &Deps,
    bot: &Bot,
    message_id: &str,
    session_key: &str,
    kind: MemoryJobKind,
    arg: Option<&str>,
) -> anyhow::Result<String> {
    let request = dream_request(bot, message_id, session_key, kind, arg);
    let pending = submit(deps, &request).await?;
    Ok(match pending.result(COMMAND_WAIT).await {
        Some(r) if r.error.is_empty() => r.reply,
        Some(r) => format!("Memory command failed: {}", r.error),
        None => NOT_ANSWERED.to_string(),
    })
}

/// `/compact`: asks the memory workers to archive the session's unarchived rows now, the job
/// AutoCompact runs for an idle session (its summary is injected into the next turn). The job
/// writes the session under its lease, so it runs once this command's turn released it;
/// returns its pending result.
pub async fn compact(
    deps: &Deps,
    bot: &Bot,
    message_id: &str,
    session_key: &str,
) -> anyhow::Result<Pending> {
    let request = ConsolidationRequest {
        id: format!("{message_id}:compact"),
        bot: bot.spec.id.clone(),
        session_key: session_key.to_string(),
        kind: MemoryJobKind::Idle.into(),
        ..Default::default()
    };
    submit(deps, &request).await
}

/// `/new`: asks the memory workers to archive the session's unconsolidated tail (a snapshot
/// taken now, before the session is cleared).
pub async fn archive_on_new(
    deps: &Deps,
    bot: &Bot,
    message_id: &str,
    session: &Session,
) -> anyhow::Result<()> {
    let tail = &session.messages[session.last_consolidated..];
    if tail.is_empty() {
        return Ok(());
    }
    let request = ConsolidationRequest {
        id: format!("{message_id}:archive"),
        bot: bot.spec.id.clone(),
        session_key: session.key.clone(),
        kind: MemoryJobKind::Archive.into(),
        messages_json: Value::Array(tail.to_vec()).to_string(),
        ..Default::default()
    };
    bus::publish(
        &deps.js,
        subjects::consolidate(&bot.spec.id),
        Some(&request.id),
        &request,
    )
    .await?;
    Ok(())
}

/// Asks the memory workers to consolidate when the session's prompt (system prompt,
/// replayable history, tool definitions), as the turn just `measured` it, reaches the budget
/// ([`Budget`]).
pub async fn maybe_consolidate(deps: &Deps, bot: &Bot, session_key: &str, measured: Measured) {
    let budget = Budget::of(&deps.cfg.agents.defaults);
    let Measured {
        replay,
        system,
        tools,
        stored,
    } = measured;
    // A context whose byte bound fits cannot exceed the budget: most turns stop here, without
    // tokenizing (which is CPU work proportional to the context, done off the async threads).
    let bound = estimate_prompt_bound(&system, &replay, tools.definitions_bytes());
    if !budget.exceeded_by(bound as u64) {
        return;
    }
    let measured = tokio::task::spawn_blocking(move || {
        let overhead = estimate_prompt(&system, &[], tools.definitions());
        let history = nanobot_core::memory::estimate_messages(&replay);
        (overhead + history, overhead)
    })
    .await;
    let Ok((estimate, overhead)) = measured else {
        return;
    };
    if !budget.exceeded_by(estimate as u64) {
        return;
    }
    let request = ConsolidationRequest {
        id: format!("{session_key}:{stored}"),
        bot: bot.spec.id.clone(),
        session_key: session_key.to_string(),
        kind: MemoryJobKind::Tokens.into(),
        overhead_tokens: u32::try_from(overhead).unwrap_or(u32::MAX),
        ..Default::default()
    };
    match bus::publish(
        &deps.js,
        subjects::consolidate(&bot.spec.id),
        Some(&request.id),
        &request,
    )
    .await
    {
        Ok(()) => {
            tracing::info!(session_id = %session_key, estimate, budget = budget.budget, "consolidation requested")
        }
        Err(e) => tracing::warn!(error = %e, "failed to request consolidation"),
    }
}

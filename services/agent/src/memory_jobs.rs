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

use crate::bots::Bot;
use crate::commands::Command;
use crate::handlers::Deps;
use crate::turn::Measured;

/// How long `/dream` waits for the run to finish before answering that it goes on.
const DREAM_WAIT: Duration = Duration::from_secs(600);
/// How long the other Dream commands wait for their answer.
const COMMAND_WAIT: Duration = Duration::from_secs(60);

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

/// Runs a Dream command through the memory workers and returns their answer.
pub async fn dream_command(
    deps: &Deps,
    bot: &Bot,
    message_id: &str,
    session_key: &str,
    kind: MemoryJobKind,
    arg: Option<&str>,
) -> anyhow::Result<String> {
    let request = ConsolidationRequest {
        id: format!("{message_id}:{}", kind.as_str_name().to_lowercase()),
        bot: bot.spec.id.clone(),
        session_key: session_key.to_string(),
        kind: kind.into(),
        arg: arg.unwrap_or_default().to_string(),
        ..Default::default()
    };
    // Subscribe before publishing, so the result cannot pass unseen.
    let mut results = deps
        .nats
        .subscribe(subjects::consolidated(&bot.spec.id))
        .await?;
    bus::publish(
        &deps.js,
        subjects::consolidate(&bot.spec.id),
        Some(&request.id),
        &request,
    )
    .await?;
    let wait = if kind == MemoryJobKind::Dream {
        DREAM_WAIT
    } else {
        COMMAND_WAIT
    };
    let answer = async {
        while let Some(msg) = results.next().await {
            match ConsolidationResult::decode(msg.payload) {
                Ok(r) if r.request_id == request.id => return Some(r),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "skipping undecodable memory result"),
            }
        }
        None
    };
    let reply = match tokio::time::timeout(wait, answer).await {
        Ok(Some(r)) if r.error.is_empty() => r.reply,
        Ok(Some(r)) => format!("Memory command failed: {}", r.error),
        Ok(None) | Err(_) => {
            "The memory worker has not answered yet; the request stays queued and runs when a \
             memory worker is free."
                .to_string()
        }
    };
    Ok(reply)
}

/// `/compact`: asks the memory workers to archive the session's unarchived rows now, the job
/// AutoCompact runs for an idle session (its summary is injected into the next turn). The job
/// writes the session under its lease, so it runs once this command's turn released it.
pub async fn compact(
    deps: &Deps,
    bot: &Bot,
    message_id: &str,
    session_key: &str,
) -> anyhow::Result<()> {
    let request = ConsolidationRequest {
        id: format!("{message_id}:compact"),
        bot: bot.spec.id.clone(),
        session_key: session_key.to_string(),
        kind: MemoryJobKind::Idle.into(),
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

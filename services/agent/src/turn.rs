//! One turn: load the session, persist the user message, build the prompt, run the LLM/tool
//! loop, save the new rows, publish the reply, and ask for consolidation when over budget.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use nanobot_core::history;
use nanobot_core::memory::estimate_tokens;
use nanobot_core::provider::ToolCall;
use nanobot_core::runner::{self, RunSpec};
use nanobot_core::session::now_iso;
use nanobot_proto::{ConsolidationRequest, OutboundKind, subjects};
use nanobot_runtime::bus;
use nanobot_runtime::config::Config;

use crate::bots::Bot;
use crate::outbox::Outbox;

/// The input of a turn, from a chat message or a cron fire.
#[derive(Debug, Clone, Default)]
pub struct TurnInput {
    /// Idempotency id (inbound message id or cron fire id).
    pub id: String,
    /// Channel the message came from.
    pub channel: String,
    /// Chat it came from.
    pub chat_id: String,
    /// Text.
    pub content: String,
    /// Attachments.
    pub media: Vec<String>,
    /// Session key.
    pub session_key: String,
    /// Stream deltas back.
    pub stream: bool,
}

/// Upstream's `/help` text for the commands the fleet supports.
pub const HELP_TEXT: &str = "🐈 nanobot commands:\n/new — Reset this chat and start a fresh conversation.\n/help — List available slash commands.";

/// Runs a turn and publishes its reply to `outbox`.
pub async fn run(
    cfg: &Config,
    js: &async_nats::jetstream::Context,
    bot: &Bot,
    input: &TurnInput,
    outbox: &Outbox,
) -> anyhow::Result<()> {
    if let Some(reply) = command(js, bot, input).await? {
        outbox.send(OutboundKind::Final, &reply, 0).await?;
        return Ok(());
    }
    let session = bot.sessions.load(&input.session_key).await?;
    let replay = history::replay(
        &session.messages,
        session.last_consolidated,
        history::MAX_REPLAY_MESSAGES,
    );
    let messages = bot.context.messages(
        replay,
        &input.content,
        &input.media,
        &input.channel,
        &input.chat_id,
    );
    // The user message is persisted before the first LLM call (crash recovery).
    let user_row = json!({"role": "user", "content": input.content, "timestamp": now_iso(), "media": input.media});
    let mut user_row = user_row;
    if input.media.is_empty() {
        user_row.as_object_mut().map(|o| o.remove("media"));
    }
    bot.sessions.append(&input.session_key, &[user_row]).await?;

    let specs = bot.tools.specs().await;
    let (delta_tx, delta_task) = spawn_delta_publisher(outbox.clone(), input.stream);
    let on_delta = delta_tx.clone().map(|tx| {
        Arc::new(move |d: &str| {
            let _ = tx.send(d.to_string());
        }) as Arc<dyn Fn(&str) + Send + Sync>
    });
    let on_tool_hint = cfg
        .channels
        .send_tool_hints
        .then(|| hint_publisher(outbox.clone()));
    let d = &cfg.agents.defaults;
    let result = runner::run(
        &bot.provider,
        &bot.tools,
        &specs,
        RunSpec {
            messages,
            model: bot.target.model.clone(),
            max_tokens: d.max_tokens,
            temperature: d.temperature,
            max_iterations: d.max_tool_iterations,
            session_key: &input.session_key,
            channel: &input.channel,
            chat_id: &input.chat_id,
            on_delta,
            on_tool_hint,
        },
    )
    .await;
    drop(delta_tx);
    let streamed = match delta_task {
        Some(task) => task.await.unwrap_or(0),
        None => 0,
    };
    tracing::info!(
        stop_reason = result.stop_reason,
        llm_calls = result.llm_calls,
        prompt_tokens = result.usage.prompt_tokens,
        completion_tokens = result.usage.completion_tokens,
        "turn finished"
    );

    let mut new_rows = result.new_messages.clone();
    if result.stop_reason != "completed" {
        new_rows.push(json!({"role": "assistant", "content": result.content}));
    }
    let rows = history::rows_to_save(&new_rows, d.max_tool_result_chars);
    bot.sessions.append(&input.session_key, &rows).await?;
    if streamed > 0 {
        outbox
            .send(OutboundKind::StreamEnd, "", streamed + 1)
            .await?;
    }
    outbox.send(OutboundKind::Final, &result.content, 0).await?;
    maybe_consolidate(cfg, js, bot, &input.session_key).await;
    Ok(())
}

/// Handles slash commands; returns the reply when the input was one.
async fn command(
    js: &async_nats::jetstream::Context,
    bot: &Bot,
    input: &TurnInput,
) -> anyhow::Result<Option<String>> {
    let text = input.content.trim();
    if !text.starts_with('/') {
        return Ok(None);
    }
    let name = text
        .split_whitespace()
        .next()
        .unwrap_or("")
        .split('@')
        .next()
        .unwrap_or("")
        .to_lowercase();
    match name.as_str() {
        "/new" => {
            let session = bot.sessions.load(&input.session_key).await?;
            let tail = &session.messages[session.last_consolidated..];
            if !tail.is_empty() {
                let request = ConsolidationRequest {
                    id: format!("{}:archive", input.id),
                    bot: bot.spec.id.clone(),
                    session_key: input.session_key.clone(),
                    reason: "archive".into(),
                    messages_json: Value::Array(tail.to_vec()).to_string(),
                };
                bus::publish(
                    js,
                    subjects::consolidate(&bot.spec.id),
                    Some(&request.id),
                    &request,
                )
                .await?;
            }
            bot.sessions.clear(&input.session_key).await?;
            Ok(Some("New session started.".into()))
        }
        "/help" => Ok(Some(HELP_TEXT.into())),
        _ => Ok(Some(format!(
            "Unknown command \"{name}\". Use \"/help\" to list available commands."
        ))),
    }
}

/// Publishes stream deltas in order from a channel; returns the count published.
fn spawn_delta_publisher(
    outbox: Outbox,
    stream: bool,
) -> (
    Option<mpsc::UnboundedSender<String>>,
    Option<tokio::task::JoinHandle<u32>>,
) {
    if !stream {
        return (None, None);
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let task = tokio::spawn(async move {
        let mut seq = 0;
        while let Some(delta) = rx.recv().await {
            seq += 1;
            if let Err(e) = outbox.send(OutboundKind::StreamDelta, &delta, seq).await {
                tracing::warn!(error = %e, "failed to publish stream delta");
            }
        }
        seq
    });
    (Some(tx), Some(task))
}

/// Returns a callback publishing `name("first argument")` hints, as upstream's tool hints.
fn hint_publisher(outbox: Outbox) -> Arc<dyn Fn(&ToolCall) + Send + Sync> {
    Arc::new(move |call: &ToolCall| {
        let arg = serde_json::from_str::<Value>(&call.arguments)
            .ok()
            .and_then(|v| v.as_object().and_then(|o| o.values().next().cloned()))
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string())
            })
            .unwrap_or_default();
        let short: String = arg.chars().take(40).collect();
        let ellipsis = if arg.chars().count() > 40 { "…" } else { "" };
        let hint = format!("{}(\"{short}{ellipsis}\")", call.name);
        let outbox = outbox.clone();
        tokio::spawn(async move {
            if let Err(e) = outbox.send(OutboundKind::ToolHint, &hint, 0).await {
                tracing::debug!(error = %e, "failed to publish tool hint");
            }
        });
    })
}

/// Asks the memory workers to consolidate when the replayable history exceeds the budget
/// (`contextWindowTokens − maxTokens − 1024`).
async fn maybe_consolidate(
    cfg: &Config,
    js: &async_nats::jetstream::Context,
    bot: &Bot,
    session_key: &str,
) {
    let d = &cfg.agents.defaults;
    let budget = (d.context_window_tokens as usize).saturating_sub(d.max_tokens as usize + 1024);
    let Ok(session) = bot.sessions.load(session_key).await else {
        return;
    };
    let tail = &session.messages[session.last_consolidated..];
    if estimate_tokens(tail) < budget {
        return;
    }
    let request = ConsolidationRequest {
        id: format!("{session_key}:{}", session.messages.len()),
        bot: bot.spec.id.clone(),
        session_key: session_key.to_string(),
        reason: "tokens".into(),
        messages_json: String::new(),
    };
    match bus::publish(
        js,
        subjects::consolidate(&bot.spec.id),
        Some(&request.id),
        &request,
    )
    .await
    {
        Ok(()) => tracing::info!(session_id = %session_key, "consolidation requested"),
        Err(e) => tracing::warn!(error = %e, "failed to request consolidation"),
    }
}

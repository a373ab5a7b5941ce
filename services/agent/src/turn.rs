//! One turn: commands, recovery of an interrupted turn, the user message persisted before the
//! first LLM call (`pending_user_turn`), the prompt, the run with hooks and checkpoints, the
//! rest of the rows saved, the reply published, consolidation asked for when over budget.

use std::sync::Arc;

use serde_json::{Value, json};

use nanobot_core::checkpoint::{self, Restore};
use nanobot_core::history::{self, MAX_REPLAY_MESSAGES};
use nanobot_core::hooks::{AgentHook, CompositeHook, LoggingHook, UsageHook};
use nanobot_core::memory::{self as core_memory, Budget, estimate_messages};
use nanobot_core::resolve;
use nanobot_core::runner::{self, Injections, RunDeps, RunSpec};
use nanobot_core::session::{Commit, Session, SessionWriter, meta, now_iso};
use nanobot_core::tools::{ToolClient, ToolScope};

use crate::message_tool::{self, TurnTools};
use nanobot_proto::{OutboundKind, keys};

use crate::bots::Bot;
use crate::checkpoints::{self, SessionCheckpoints};
use crate::commands::{self, Command, Kind, StatusInfo};
use crate::handlers::Deps;
use crate::mailbox::{FollowUps, Incoming};
use crate::memory_jobs;
use crate::outbox::{self, Outbox};
use crate::stop;
use crate::subagent::Spawner;
use crate::turn_hook::{Gates, TurnHook};

/// Where a turn writes, and where its follow-ups come from.
#[derive(Debug, Clone, Copy)]
pub struct TurnCtx<'a> {
    /// The session store, fenced with the session's lease.
    pub sessions: &'a SessionWriter,
    /// Stream sequence of the turn's message (chat turns; the mailbox cursor moves past it).
    pub seq: Option<u64>,
    /// Follow-up messages read from the session's mailbox.
    pub follow_ups: Option<&'a FollowUps>,
}

/// The input of a turn, from a chat message or a cron fire.
#[derive(Debug, Clone)]
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
    /// The turn runs a cron job.
    pub in_cron: bool,
    /// What the message is (classified when it was decoded).
    pub kind: Kind,
}

impl TurnInput {
    /// The turn of a chat message.
    pub fn chat(incoming: &Incoming) -> Self {
        let m = &incoming.message;
        Self {
            id: m.id.clone(),
            channel: m.channel.clone(),
            chat_id: m.chat_id.clone(),
            content: m.content.clone(),
            media: m.media.clone(),
            session_key: m.effective_session_key(),
            stream: m.stream,
            in_cron: false,
            kind: incoming.kind.clone(),
        }
    }

    /// An automation turn (a cron fire, the heartbeat) with id `id` in session `session_key`,
    /// on behalf of `channel`/`chat_id`.
    pub fn automation(
        id: &str,
        channel: &str,
        chat_id: &str,
        content: String,
        session_key: &str,
    ) -> Self {
        Self {
            id: id.to_string(),
            channel: channel.to_string(),
            chat_id: chat_id.to_string(),
            kind: commands::classify(&content),
            content,
            media: Vec::new(),
            session_key: session_key.to_string(),
            stream: false,
            in_cron: true,
        }
    }
}

/// Answers a priority command (`/stop`, `/status`) outside the session lock.
pub async fn priority_command(
    deps: &Deps,
    bot: &Bot,
    cmd: &Command,
    session_key: &str,
) -> anyhow::Result<String> {
    Ok(match cmd {
        Command::Stop => {
            let n = stop::stop_everywhere(&deps.nats, &bot.spec.id, session_key).await?;
            if n > 0 {
                format!("Stopped {n} task(s).")
            } else {
                "No active task to stop.".into()
            }
        }
        Command::Status => status(deps, bot, session_key).await?,
        _ => commands::help_text(),
    })
}

async fn status(deps: &Deps, bot: &Bot, session_key: &str) -> anyhow::Result<String> {
    let session = bot.sessions.load(session_key).await?;
    let usage = session
        .metadata
        .get(meta::LAST_USAGE)
        .cloned()
        .unwrap_or(Value::Null);
    let get = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
    let replay = history::replay(
        &session.messages,
        session.last_consolidated,
        history::MAX_REPLAY_MESSAGES,
    );
    let d = &deps.cfg.agents.defaults;
    Ok(commands::status_text(&StatusInfo {
        version: env!("CARGO_PKG_VERSION").into(),
        model: bot.target.model.clone(),
        last_usage: (
            get("prompt_tokens"),
            get("completion_tokens"),
            get("cached_tokens"),
        ),
        context_window: u64::from(d.context_window_tokens),
        budget: Budget::of(d).budget,
        session_messages: session.messages.len(),
        context_tokens: estimate_messages(&replay) as u64,
        uptime_secs: deps.started.elapsed().as_secs(),
        active_tasks: deps.active.len(),
    }))
}

/// Restores an interrupted turn of `session` into its history (next turn, or `/stop`), in
/// the store and in `session`. Closing a turn marks its message as answered, so a redelivery
/// of it is dropped.
pub async fn recover(
    deps: &Deps,
    bot: &Bot,
    sessions: &SessionWriter,
    session: &mut Session,
    how: Restore,
) -> anyhow::Result<usize> {
    if !session.metadata.contains_key(meta::RUNTIME_CHECKPOINT)
        && !session.metadata.contains_key(meta::PENDING_USER_TURN)
    {
        return Ok(0);
    }
    let interrupted = session
        .metadata
        .get(meta::PENDING_TURN_ID)
        .and_then(Value::as_str)
        .map(str::to_string);
    let rows = checkpoint::restore(&session.messages, &mut session.metadata, how);
    sessions
        .commit(
            &session.key,
            &Commit {
                rows: rows.clone(),
                metadata: Some(session.metadata.clone()),
                ..Default::default()
            },
        )
        .await?;
    let restored = rows.len();
    session.messages.extend(rows);
    if how == Restore::Close
        && let Some(id) = interrupted
    {
        deps.mark_seen(&keys::inbound_seen(&bot.spec.id, &session.key, &id))
            .await;
    }
    tracing::info!(session_id = %session.key, rows = restored, resumed = how == Restore::Resume, "restored interrupted turn");
    Ok(restored)
}

/// What a turn measured of its session's prompt, for [`memory_jobs::maybe_consolidate`]:
/// the history the next turn replays and the prompt's fixed part, so the check neither
/// reloads the session nor rebuilds the prompt.
#[derive(Debug)]
pub struct Measured {
    /// The replayable history after the turn.
    pub replay: Vec<Value>,
    /// The system prompt the turn sent.
    pub system: String,
    /// The tool definitions the turn sent.
    pub tools: Vec<Value>,
    /// Stored rows of the session after the turn.
    pub stored: usize,
}

/// Runs a turn, commits it and publishes its reply to `outbox`; returns what it measured of
/// the session's prompt (`None` for a command).
pub async fn run(
    deps: &Deps,
    bot: &Bot,
    ctx: TurnCtx<'_>,
    input: &TurnInput,
    outbox: &Outbox,
) -> anyhow::Result<Option<Measured>> {
    let sessions = ctx.sessions;
    match &input.kind {
        Kind::Text => {}
        Kind::Rejected(reply) => {
            return finish(deps, ctx, input, outbox, Reply::text(reply))
                .await
                .map(|()| None);
        }
        Kind::Priority(cmd) => {
            let reply = priority_command(deps, bot, cmd, &input.session_key).await?;
            return finish(deps, ctx, input, outbox, Reply::text(&reply))
                .await
                .map(|()| None);
        }
        Kind::Command(cmd) => {
            let reply = match cmd {
                Command::New => new_session(deps, bot, sessions, input).await?,
                Command::Help => commands::help_text(),
                other => match memory_jobs::dream_job(other) {
                    Some((kind, arg)) => {
                        memory_jobs::dream_command(
                            deps,
                            bot,
                            &input.id,
                            &input.session_key,
                            kind,
                            arg,
                        )
                        .await?
                    }
                    None => commands::help_text(),
                },
            };
            return finish(deps, ctx, input, outbox, Reply::text(&reply))
                .await
                .map(|()| None);
        }
    }
    let cfg = &deps.cfg;
    let d = &cfg.agents.defaults;
    // The session is read once per turn: recovery and the prompt work on this copy.
    let mut session = sessions
        .load_recent(&input.session_key, MAX_REPLAY_MESSAGES)
        .await?;
    let resume = session
        .metadata
        .get(meta::PENDING_TURN_ID)
        .and_then(Value::as_str)
        == Some(input.id.as_str());
    let how = if resume {
        Restore::Resume
    } else {
        Restore::Close
    };
    let taken = checkpoints::taken_from(&session.metadata);
    recover(deps, bot, sessions, &mut session, how).await?;
    if resume && let (Some(f), Some(taken)) = (ctx.follow_ups, taken) {
        // Follow-ups a previous attempt injected and saved are in the history already.
        f.resume(taken);
    }
    let replay = session.replay(MAX_REPLAY_MESSAGES);
    let replay_len = replay.len();
    let summary = core_memory::summary_section(&session.metadata);
    // The pending markers go with the user message in one write: a retry after a failure
    // in between would otherwise store the message twice.
    let stored_before = session.first_index + session.messages.len();
    let mut metadata = session.metadata;
    metadata.insert(meta::PENDING_USER_TURN.into(), json!(true));
    metadata.insert(meta::PENDING_TURN_ID.into(), json!(input.id));
    let mut after = replay.clone();
    let mut messages = if resume {
        // A redelivered message whose turn was interrupted: continue from its saved rows.
        sessions.set_metadata(&input.session_key, &metadata).await?;
        bot.context.resumed_messages(replay, &input.channel)
    } else {
        // The user message is persisted before the first LLM call (crash recovery).
        let mut user_row =
            json!({"role": "user", "content": input.content, "timestamp": now_iso()});
        if !input.media.is_empty() {
            user_row["media"] = json!(input.media);
        }
        after.push(user_row.clone());
        let first = Commit {
            rows: vec![user_row],
            metadata: Some(metadata.clone()),
            ..Default::default()
        };
        sessions.commit(&input.session_key, &first).await?;
        bot.context.messages(
            replay,
            &input.content,
            &input.media,
            &input.channel,
            &input.chat_id,
        )
    };
    if let Some(section) = &summary {
        nanobot_core::context::inject_summary(&mut messages, section);
    }
    let system = messages
        .first()
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let sink = SessionCheckpoints::new(
        sessions.clone(),
        &input.session_key,
        metadata,
        d.max_tool_result_chars,
        ctx.follow_ups,
    );

    let mut specs = bot.tools.specs().await;
    specs.push(message_tool::spec());
    specs.push(nanobot_core::subagent::spec());
    let quiet = input.session_key == nanobot_core::heartbeat::SESSION;
    let tools = TurnTools::new(
        &bot.tools,
        outbox,
        &bot.spec.workspace,
        &bot.chat_channels,
        quiet,
    )
    .with_spawner(Spawner {
        deps,
        bot,
        input,
        outbox,
    });
    let gates = Gates {
        stream: input.stream,
        progress: cfg.channels.send_progress,
        tool_hints: cfg.channels.send_tool_hints,
    };
    let output = Arc::new(TurnHook::start(outbox.clone(), gates));
    let usage_hook = Arc::new(UsageHook::default());
    let hook = CompositeHook::new(vec![
        Arc::new(LoggingHook) as Arc<dyn AgentHook>,
        usage_hook.clone(),
        output.clone(),
    ]);
    let deps_run = RunDeps {
        model: &bot.provider,
        tools: &tools,
        specs: &specs,
        hook: &hook,
        checkpoints: Some(&sink),
        injections: ctx.follow_ups.map(|f| f as &dyn Injections),
    };
    let result = runner::run(
        deps_run,
        RunSpec {
            messages,
            model: bot.target.model.clone(),
            max_tokens: d.max_tokens,
            temperature: bot.target.temperature.unwrap_or(d.temperature),
            reasoning_effort: d.reasoning_effort.clone(),
            max_iterations: d.max_tool_iterations,
            llm_timeout: resolve::llm_timeout(cfg),
            capped_replies: bot.target.caps_replies(),
            scope: ToolScope {
                session_key: input.session_key.clone(),
                channel: input.channel.clone(),
                chat_id: input.chat_id.clone(),
                in_cron: input.in_cron,
            },
        },
    )
    .await;
    let streamed = output.finish().await;
    let (usage, iterations) = usage_hook.totals();
    tracing::info!(
        stop_reason = result.stop_reason,
        llm_calls = result.llm_calls,
        iterations,
        injected = result.injected,
        prompt_tokens = usage.prompt_tokens,
        completion_tokens = usage.completion_tokens,
        tool_errors = result.tool_errors,
        "turn finished"
    );
    let (rows, metadata) = sink
        .finish(&result.new_messages, |m| {
            m.remove(meta::RUNTIME_CHECKPOINT);
            m.remove(meta::PENDING_USER_TURN);
            m.remove(meta::PENDING_TURN_ID);
            m.remove(meta::INJECTED_IDS);
            m.remove(meta::INJECTED_SEQ);
            m.insert(
                meta::LAST_USAGE.into(),
                json!({"prompt_tokens": result.usage.prompt_tokens, "completion_tokens": result.usage.completion_tokens, "cached_tokens": result.usage.cached_tokens}),
            );
        })
        .await;
    after.extend(result.new_messages.iter().cloned());
    let measured = Measured {
        stored: stored_before + after.len() - replay_len,
        replay: after,
        system,
        tools: ToolClient::definitions(&specs),
    };
    // The `message` tool already answered this chat: the final text is not sent again.
    let answered = tools.sent_to_current_chat() && result.injected == 0;
    let reply = Reply {
        rows,
        metadata: Some(metadata),
        streamed,
        ..if answered {
            Reply::default()
        } else {
            Reply::text(&result.content)
        }
    };
    finish(deps, ctx, input, outbox, reply).await?;
    Ok(Some(measured))
}

/// How a turn ends.
#[derive(Debug, Default)]
pub struct Reply {
    /// Rows still to save.
    pub rows: Vec<Value>,
    /// The session metadata to write.
    pub metadata: Option<serde_json::Map<String, Value>>,
    /// The reply text and its kind; `None` sends nothing (a stopped turn).
    pub text: Option<(OutboundKind, String)>,
    /// Stream deltas sent (a stream end follows them).
    pub streamed: u32,
}

impl Reply {
    /// A final reply with nothing else to save.
    pub fn text(text: &str) -> Self {
        Self {
            text: Some((OutboundKind::Final, text.to_string())),
            ..Default::default()
        }
    }
}

/// Ends a turn: one fenced commit of its rows, metadata, the mailbox cursor past the message
/// and the follow-ups it took, their "seen" markers and the reply (kept in the session's
/// outbox); then the reply is published and the outbox cleared.
pub async fn finish(
    deps: &Deps,
    ctx: TurnCtx<'_>,
    input: &TurnInput,
    outbox: &Outbox,
    reply: Reply,
) -> anyhow::Result<()> {
    let taken = ctx.follow_ups.map(FollowUps::taken).unwrap_or_default();
    let mut answers = vec![input.id.clone()];
    answers.extend(taken.ids.iter().cloned());
    let message = reply.text.as_ref().map(|(kind, text)| {
        let mut m = outbox.message(*kind, text, 0);
        m.answers = answers.clone();
        m
    });
    let encoded = message.as_ref().map(outbox::encode);
    let commit = Commit {
        rows: reply.rows,
        metadata: reply.metadata,
        cursor: ctx.seq.map(|s| s.max(taken.last_seq)),
        outbox: encoded.clone(),
        seen: answers,
    };
    ctx.sessions.commit(&input.session_key, &commit).await?;
    if reply.streamed > 0 {
        outbox
            .send(OutboundKind::StreamEnd, "", reply.streamed + 1)
            .await?;
    }
    if let (Some(message), Some(encoded)) = (message, encoded) {
        outbox::publish(&deps.js, &message).await?;
        ctx.sessions
            .clear_outbox(&input.session_key, &encoded)
            .await?;
    }
    Ok(())
}

/// `/new`: archives the unconsolidated tail through the memory workers and clears the session.
async fn new_session(
    deps: &Deps,
    bot: &Bot,
    sessions: &SessionWriter,
    input: &TurnInput,
) -> anyhow::Result<String> {
    let session = sessions.load(&input.session_key).await?;
    memory_jobs::archive_on_new(deps, bot, &input.id, &session).await?;
    sessions.clear(&input.session_key).await?;
    Ok("New session started.".into())
}

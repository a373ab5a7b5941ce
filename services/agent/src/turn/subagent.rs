//! Subagents across runners. `spawn` in a turn takes one of the bot's subagent slots (a Redis
//! sorted set, so `maxConcurrentSubagents` holds for the whole fleet) and publishes a
//! [`SubagentTask`] on the bot's work queue; with `wait` it runs the subagent inline and the
//! result is the tool's result. Any runner takes a queued task (`handlers::subagent`), runs it
//! with the subagent's tools and prompt, keeps the outcome in Redis, and publishes the
//! announcement into the origin session's mailbox: injected into the session's running turn,
//! or starting a turn whose reply goes to the origin chat.
//!
//! A runner that dies mid-subagent leaves its task unacknowledged: JetStream redelivers it to
//! another runner, which runs it again (or, when the outcome was already kept, only announces
//! it). The announcement's id is derived from the task id, so JetStream's de-duplication and
//! the session's seen-markers make it one turn. `/stop` in the origin session cancels its
//! subagents on whatever runner runs them (they register as the session's active tasks).

use std::sync::LazyLock;
use std::time::Duration;

use redis::{AsyncCommands as _, Script};
use serde_json::{Value, json};

use nanobot_core::hooks::LoggingHook;
use nanobot_core::resolve;
use nanobot_core::runner::{self, OnBudgetExhausted, RunDeps, RunOptions, RunSpec};
use nanobot_core::session::SEEN_TTL_SECS;
use nanobot_core::subagent::{self, SpawnArgs};
use nanobot_core::tool_results::Offload;
use nanobot_core::tools::{Offered, ToolExecutor, ToolOutcome, ToolScope};
use nanobot_proto::{InboundMessage, SubagentTask, keys, subjects};
use nanobot_runtime::bus;
use nanobot_runtime::store::Store;

use crate::base::bots::Bot;
use crate::base::deps::Deps;
use crate::base::input::TurnInput;
use crate::base::outbox::Outbox;

/// Shortest time a slot is held without being refreshed (a queued task waits for a runner).
const MIN_SLOT_TTL: Duration = Duration::from_secs(120);

/// Takes or refreshes a slot: KEYS the bot's running set; ARGV task id, limit, ttl ms → -1
/// when held, else how many run. Expired slots (their runners died) are dropped first; a task
/// already holding a slot keeps it whatever the limit.
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local t = redis.call('TIME')
         local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
         redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
         if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
           local running = redis.call('ZCARD', KEYS[1])
           if running >= tonumber(ARGV[2]) then return running end
         end
         redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
         redis.call('PEXPIRE', KEYS[1], ARGV[3])
         return -1",
    )
});

/// How long a slot lasts without a refresh: past JetStream's redelivery of a dead runner's
/// task, so the runner that takes it over refreshes the same slot.
fn slot_ttl(deps: &Deps) -> Duration {
    (deps.ack_wait() * 3).max(MIN_SLOT_TTL)
}

/// Takes a slot for task `id` of `bot`: `Ok(None)` when taken, `Ok(Some(running))` when
/// `limit` subagents already run.
pub async fn claim(
    deps: &Deps,
    bot: &str,
    id: &str,
    limit: u32,
) -> redis::RedisResult<Option<u64>> {
    let key = keys::subagents_running(bot);
    let mut conn = deps.redis.clone();
    let running: i64 = CLAIM
        .key(&key)
        .arg(id)
        .arg(limit)
        .arg(slot_ttl(deps).as_millis() as u64)
        .invoke_async(&mut conn)
        .await?;
    deps.redis.replicate(&key).await;
    Ok(u64::try_from(running).ok())
}

/// Frees task `id`'s slot.
pub async fn release(redis: &Store, bot: &str, id: &str) {
    let mut conn = redis.clone();
    if let Err(e) = conn
        .zrem::<_, _, i64>(keys::subagents_running(bot), id)
        .await
    {
        tracing::warn!(error = %e, task_id = id, "failed to free a subagent slot (it expires)");
    }
}

/// A held slot: refreshed while alive, freed when dropped (also when the run holding it is
/// cancelled by `/stop`).
pub struct Slot {
    refresher: tokio::task::JoinHandle<()>,
    redis: Store,
    bot: String,
    id: String,
}

impl Slot {
    /// Keeps task `id`'s slot (already claimed) until dropped.
    pub fn hold(deps: &Deps, bot: &str, id: &str) -> Self {
        let (redis, key, task) = (
            deps.redis.clone(),
            keys::subagents_running(bot),
            id.to_string(),
        );
        let ttl = slot_ttl(deps);
        let refresher = tokio::spawn(async move {
            let mut tick = tokio::time::interval(ttl / 4);
            loop {
                tick.tick().await;
                let mut conn = redis.clone();
                let refreshed: redis::RedisResult<i64> = CLAIM
                    .key(&key)
                    .arg(&task)
                    .arg(u32::MAX)
                    .arg(ttl.as_millis() as u64)
                    .invoke_async(&mut conn)
                    .await;
                if let Err(e) = refreshed {
                    tracing::warn!(error = %e, "failed to refresh a subagent slot");
                }
            }
        });
        Self {
            refresher,
            redis: deps.redis.clone(),
            bot: bot.to_string(),
            id: id.to_string(),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.refresher.abort();
        let (redis, bot, id) = (self.redis.clone(), self.bot.clone(), self.id.clone());
        tokio::spawn(async move { release(&redis, &bot, &id).await });
    }
}

/// The `spawn` tool of one turn.
pub struct Spawner<'a> {
    /// What handlers share.
    pub deps: &'a Deps,
    /// The bot.
    pub bot: &'a Bot,
    /// The turn (its session, channel and chat receive the announcement).
    pub input: &'a TurnInput,
    /// The turn's delivery (the chat the announcement's reply goes to).
    pub outbox: &'a Outbox,
}

impl Spawner<'_> {
    /// Runs one `spawn` call.
    pub async fn spawn(&self, call_id: &str, arguments: &str) -> ToolOutcome {
        match self.try_spawn(call_id, arguments).await {
            Ok(text) => outcome(text, false),
            Err(text) => outcome(text, true),
        }
    }

    async fn try_spawn(&self, call_id: &str, arguments: &str) -> Result<String, String> {
        let args = SpawnArgs::parse(arguments)?;
        let (deps, bot) = (self.deps, &self.bot.spec.id);
        let task = SubagentTask {
            id: subagent::task_id(&self.input.id, call_id),
            bot: bot.clone(),
            task: args.task.clone(),
            label: args.label.clone(),
            temperature: args.temperature,
            origin_session_key: self.input.session_key.clone(),
            origin_channel: self.input.channel.clone(),
            origin_chat_id: self.input.chat_id.clone(),
            reply_channel: self.outbox.channel.clone(),
            reply_chat_id: self.outbox.chat_id.clone(),
            origin_message_id: self.input.id.clone(),
        };
        let limit = deps.cfg.agents.defaults.max_concurrent_subagents;
        match claim(deps, bot, &task.id, limit).await {
            Ok(None) => {}
            Ok(Some(running)) => return Err(subagent::limit_reached(running, limit)),
            Err(e) => return Err(format!("Error: could not start the subagent: {e}")),
        }
        if args.wait {
            let _slot = Slot::hold(deps, bot, &task.id);
            let (ok, result) = execute(deps, self.bot, &task).await;
            return if ok { Ok(result) } else { Err(result) };
        }
        let published = bus::publish(
            &deps.js,
            subjects::subagent(bot),
            Some(&queue_id(&task)),
            &task,
        )
        .await;
        if let Err(e) = published {
            release(&deps.redis, bot, &task.id).await;
            return Err(format!("Error: could not start the subagent: {e}"));
        }
        tracing::info!(task_id = %task.id, label = %task.label, "subagent spawned");
        Ok(subagent::started(&task.label, &task.id))
    }
}

fn outcome(text: String, is_error: bool) -> ToolOutcome {
    ToolOutcome {
        content: Value::String(text),
        is_error,
    }
}

/// The task's de-duplication id on the work queue.
fn queue_id(task: &SubagentTask) -> String {
    format!("subagent:{}:{}", task.bot, task.id)
}

/// The executors without the tools a subagent may not use.
struct Restricted<'a>(&'a dyn ToolExecutor);

#[async_trait::async_trait]
impl ToolExecutor for Restricted<'_> {
    async fn execute(
        &self,
        scope: &ToolScope,
        call_id: &str,
        name: &str,
        arguments: &str,
    ) -> ToolOutcome {
        if !subagent::allowed(name) {
            return outcome(format!("Error: Tool '{name}' not found"), true);
        }
        self.0.execute(scope, call_id, name, arguments).await
    }
}

/// Runs a subagent to the end: its own prompt, the task as the user message, its tools.
/// Returns whether it succeeded and its result text.
pub async fn execute(deps: &Deps, bot: &Bot, task: &SubagentTask) -> (bool, String) {
    let d = &deps.cfg.agents.defaults;
    let specs: Vec<_> = bot
        .tools
        .specs()
        .await
        .into_iter()
        .filter(|s| subagent::allowed(&s.name))
        .collect();
    let tools = Restricted(&bot.tools);
    let messages = vec![
        json!({"role": "system", "content": bot.context.subagent_prompt()}),
        json!({"role": "user", "content": task.task}),
    ];
    // Subagents run on the bot's configured model (a session's `/model` choice is its own).
    let runtime = bot.models.configured();
    // As upstream, a subagent whose iterations run out gets no finalization pass.
    let options = RunOptions {
        on_budget_exhausted: OnBudgetExhausted::Stop,
    };
    let result = runner::run_with(
        RunDeps {
            model: &runtime.provider,
            tools: &tools,
            specs: &Offered::new(specs),
            hook: &LoggingHook,
            checkpoints: None,
            injections: None,
        },
        RunSpec {
            messages,
            model: runtime.target.model.clone(),
            max_tokens: runtime.max_tokens,
            context_window_tokens: runtime.context_window_tokens,
            context_block_limit: d.context_block_limit,
            temperature: task
                .temperature
                .or(runtime.target.temperature)
                .unwrap_or(runtime.temperature),
            reasoning_effort: runtime.reasoning_effort.clone(),
            max_iterations: d.max_tool_iterations,
            llm_timeout: resolve::llm_timeout(&deps.cfg),
            capped_replies: runtime.target.caps_replies(),
            telemetry: runner::Telemetry::of(&runtime.target, &deps.cfg),
            scope: ToolScope {
                session_key: task.origin_session_key.clone(),
                channel: task.origin_channel.clone(),
                chat_id: task.origin_chat_id.clone(),
                in_cron: false,
                file_reads: Default::default(),
            },
            offload: Offload {
                workspace: Some(bot.spec.workspace.clone()),
                max_chars: d.max_tool_result_chars,
            },
        },
        options,
    )
    .await;
    tracing::info!(task_id = %task.id, stop_reason = %result.stop_reason, llm_calls = result.llm_calls, "subagent finished");
    subagent::outcome(&result)
}

/// The outcome kept for a finished task, if any.
pub async fn kept(redis: &Store, task: &SubagentTask) -> anyhow::Result<Option<(bool, String)>> {
    let mut conn = redis.clone();
    let raw: Option<String> = conn.get(keys::subagent_result(&task.bot, &task.id)).await?;
    Ok(raw
        .and_then(|r| serde_json::from_str::<Value>(&r).ok())
        .map(|v| {
            (
                v["ok"].as_bool().unwrap_or(false),
                v["result"].as_str().unwrap_or_default().to_string(),
            )
        }))
}

/// Keeps a finished task's outcome, so a redelivery announces it without running again.
pub async fn keep(
    redis: &Store,
    task: &SubagentTask,
    ok: bool,
    result: &str,
) -> anyhow::Result<()> {
    let key = keys::subagent_result(&task.bot, &task.id);
    let mut conn = redis.clone();
    let value = json!({"ok": ok, "result": result}).to_string();
    conn.set_ex::<_, _, ()>(&key, value, SEEN_TTL_SECS).await?;
    redis.replicate(&key).await;
    Ok(())
}

/// The inbound message announcing a finished task in its origin session, as upstream: a
/// `system` message from `subagent` whose `chat_id` names the origin chat
/// (`"<channel>:<chat_id>"`), with the origin session as its session and the task in its
/// metadata. Its subject is the origin session's mailbox ([`InboundMessage::subject`]).
pub fn announcement(task: &SubagentTask, ok: bool, result: &str) -> InboundMessage {
    let metadata = subagent::announcement_metadata(&task.id, &task.origin_message_id);
    InboundMessage {
        id: format!("subagent:{}", task.id),
        bot: task.bot.clone(),
        channel: nanobot_proto::SYSTEM_CHANNEL.into(),
        sender_id: subagent::SENDER.into(),
        chat_id: format!("{}:{}", task.origin_channel, task.origin_chat_id),
        content: subagent::announcement(&task.label, &task.task, result, ok),
        timestamp_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64),
        media: Vec::new(),
        metadata_json: metadata.to_string(),
        session_key: task.origin_session_key.clone(),
        stream: false,
        reply_channel: task.reply_channel.clone(),
        reply_chat_id: task.reply_chat_id.clone(),
    }
}

/// Publishes the announcement (JetStream drops a copy published again, by its id).
pub async fn announce(
    deps: &Deps,
    task: &SubagentTask,
    ok: bool,
    result: &str,
) -> anyhow::Result<()> {
    let msg = announcement(task, ok, result);
    bus::publish(&deps.js, msg.subject(), Some(&msg.id), &msg).await?;
    tracing::info!(task_id = %task.id, session_id = %task.origin_session_key, ok, "subagent result announced");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_announcement_is_upstreams_system_message_in_the_origin_sessions_mailbox() {
        let task = SubagentTask {
            id: "ab12cd34".into(),
            bot: "b".into(),
            task: "count lines".into(),
            label: "count".into(),
            origin_session_key: "telegram:42".into(),
            origin_channel: "telegram".into(),
            origin_chat_id: "42".into(),
            reply_channel: "telegram".into(),
            reply_chat_id: "42".into(),
            origin_message_id: "m7".into(),
            ..Default::default()
        };
        let msg = announcement(&task, true, "42 lines");
        assert_eq!(
            (msg.channel.as_str(), msg.chat_id.as_str()),
            ("system", "telegram:42")
        );
        assert_eq!(msg.session_key, "telegram:42");
        assert_eq!(
            msg.subject(),
            subjects::inbound("b", "telegram", "telegram:42")
        );
        assert_eq!(msg.effective_session_key(), "telegram:42");
        assert_eq!(msg.sender_id, "subagent");
        assert_eq!(
            (msg.reply_channel.as_str(), msg.reply_chat_id.as_str()),
            ("telegram", "42")
        );
        assert_eq!(msg.id, "subagent:ab12cd34");
        assert!(
            msg.content
                .starts_with("[Subagent 'count' completed successfully]")
        );
        let meta: Value = serde_json::from_str(&msg.metadata_json).unwrap();
        assert_eq!(meta["injected_event"], "subagent_result");
        assert_eq!(meta["subagent_task_id"], "ab12cd34");
        assert_eq!(meta["origin_message_id"], "m7");
    }
}

//! The heartbeat (the protected `heartbeat` cron job), as upstream: when `HEARTBEAT.md` has
//! active tasks and the bot has a chat to report to, the tasks run as a turn of the `heartbeat`
//! session (its reply goes nowhere), then the notification gate (one LLM call that must call
//! `evaluate_notification`) decides whether the answer is sent to that chat, where it is also
//! recorded as an assistant row marked `_channel_delivery`.
//!
//! Across runners: the turn runs once per fire (the session's lease and its seen-marker); a
//! runner that dies after it leaves the fire unacknowledged, and the next runner asks the
//! gate again about the answer already in the session. The delivery is a JetStream message
//! with an id derived from the fire, and its session row is written once (its own marker),
//! under the chat session's lease like any write of that session.

use async_nats::jetstream;
use redis::AsyncCommands as _;
use serde_json::{Value, json};
use tracing::Instrument as _;

use nanobot_core::heartbeat::{self, SESSION};
use nanobot_core::provider::ChatRequest;
use nanobot_core::session::{Commit, now_iso};
use nanobot_proto::{CronFire, OutboundKind, keys};
use nanobot_runtime::telemetry::tags;

use super::keep_alive;
use crate::base::bots::Bot;
use crate::base::deps::Deps;
use crate::base::input::TurnInput;
use crate::base::outbox::Outbox;
use crate::session::acquire::{self, Until};

/// Completion cap of the gate call (upstream's evaluator, `max_tokens=4096`).
const GATE_MAX_TOKENS: u32 = 4096;

/// The channel tag and label of heartbeat work.
const HEARTBEAT_CHANNEL: &str = "heartbeat";

/// Handles one heartbeat fire.
pub async fn handle(deps: &Deps, bot: &Bot, msg: &jetstream::Message, fire: &CronFire) {
    let span = tracing::info_span!("heartbeat", job_id = %fire.id, session_id = SESSION);
    let root = tags::root_context(&bot.spec.id, HEARTBEAT_CHANNEL);
    tags::in_conversation(&span, root, SESSION);
    let beat = async {
        let outcome = keep_alive(msg, deps.ack_wait(), beat(deps, bot, fire)).await;
        super::settle(deps, msg, outcome).await;
    };
    let scope = nanobot_runtime::metrics::Scope::new(&bot.spec.id, HEARTBEAT_CHANNEL);
    nanobot_runtime::metrics::scoped(scope, beat.instrument(span)).await;
}

async fn beat(deps: &Deps, bot: &Bot, fire: &CronFire) -> anyhow::Result<()> {
    let path = bot.spec.workspace.join("HEARTBEAT.md");
    let Ok(content) = tokio::fs::read_to_string(&path).await else {
        tracing::debug!("heartbeat: HEARTBEAT.md missing");
        return Ok(());
    };
    if !heartbeat::has_active_tasks(&content) {
        tracing::debug!("heartbeat: HEARTBEAT.md has no active tasks");
        return Ok(());
    }
    let Some((channel, chat_id)) = target(deps, bot).await? else {
        tracing::info!("heartbeat: no chat to report to, skipped");
        return Ok(());
    };
    let prompt = heartbeat::prompt(&content);
    let input = TurnInput::automation(&fire.id, &channel, &chat_id, prompt.clone(), SESSION);
    // The turn's own reply goes to no chat: only the gate may let it through.
    let nowhere = Outbox {
        js: deps.js.clone(),
        bot: bot.spec.id.clone(),
        channel: SESSION.into(),
        chat_id: SESSION.into(),
        reply_to: fire.id.clone(),
        session_key: SESSION.into(),
    };
    let keep = deps.cfg.gateway.heartbeat.keep_recent_messages;
    crate::session::once::run_once(deps, bot, &input, &nowhere, Some(keep)).await?;

    let Some(response) = last_answer(&bot.sessions.load(SESSION).await?.messages) else {
        return Ok(());
    };
    if !gate(bot, &prompt, &response).await {
        tracing::info!("heartbeat: silenced by post-run evaluation");
        return Ok(());
    }
    tracing::info!(channel = %channel, "heartbeat: completed, delivering response");
    let delivery = format!("{}:notify", fire.id);
    let target_key = format!("{channel}:{chat_id}");
    let recorded = keys::inbound_seen(&bot.spec.id, &target_key, &delivery);
    // The row goes into the chat's session under its lease, like a turn's rows, and in one
    // write with its marker.
    if let Some(acquire::Held { lease, permit, .. }) =
        acquire::acquire(deps, bot, &target_key, Until::Seen(&recorded)).await?
    {
        let row = json!({"role": "assistant", "content": response, "timestamp": now_iso(), "_channel_delivery": true});
        let commit = Commit {
            rows: vec![row],
            seen: vec![delivery.clone()],
            ..Default::default()
        };
        let written = bot
            .sessions
            .fenced(lease.fence())
            .commit(&target_key, &commit)
            .await;
        lease.release().await;
        drop(permit);
        written?;
    }
    let outbox = Outbox {
        js: deps.js.clone(),
        bot: bot.spec.id.clone(),
        channel,
        chat_id,
        reply_to: delivery,
        session_key: target_key,
    };
    outbox.send(OutboundKind::Final, &response, 0).await?;
    Ok(())
}

/// The most recently active chat of an enabled chat channel of `bot`.
async fn target(deps: &Deps, bot: &Bot) -> anyhow::Result<Option<(String, String)>> {
    if bot.chat_channels.is_empty() {
        return Ok(None);
    }
    let mut conn = deps.redis.clone();
    let mut sessions = Vec::new();
    for key in bot.sessions.list().await? {
        let updated: Option<String> = conn
            .hget(keys::session_meta(&bot.spec.id, &key), "updated_at")
            .await?;
        sessions.push((key, updated.unwrap_or_default()));
    }
    Ok(heartbeat::pick_target(&sessions, &bot.chat_channels))
}

/// The answer of this beat: the final assistant row after the session's last user row (the
/// beat's prompt). A beat that produced no text has no answer (upstream stops on an empty
/// response), even when an earlier beat's answer is still in the session.
fn last_answer(rows: &[Value]) -> Option<String> {
    let role = |r: &Value| r.get("role").and_then(Value::as_str).map(str::to_string);
    let prompt = rows
        .iter()
        .rposition(|r| role(r).as_deref() == Some("user"))?;
    rows[prompt + 1..]
        .iter()
        .rev()
        .find(|r| role(r).as_deref() == Some("assistant"))
        .and_then(|r| r.get("content").and_then(Value::as_str))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
}

/// Asks the notification gate (its system prompt: the workspace's `/evaluator-prompt` file
/// when not empty); any failure is silence (upstream fails closed).
async fn gate(bot: &Bot, task: &str, response: &str) -> bool {
    let runtime = bot.models.configured();
    let mut messages = heartbeat::gate_messages(task, response);
    if let Some(custom) = crate::turn::commands::evaluator_override(&bot.spec.workspace) {
        messages[0]["content"] = custom.into();
    }
    let request = ChatRequest {
        model: runtime.target.model.clone(),
        messages: messages.into(),
        tools: vec![heartbeat::gate_tool()].into(),
        max_tokens: GATE_MAX_TOKENS,
        temperature: 0.0,
        reasoning_effort: None,
        tool_choice: None,
    };
    match runtime.provider.chat_with_retry(&request, None).await {
        Ok(answer) => heartbeat::gate_says_notify(&answer),
        Err(e) => {
            tracing::warn!(error = %e, "heartbeat: notification gate failed, staying silent");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_beat_without_text_has_no_answer_even_after_an_earlier_beats_answer() {
        let earlier = [
            json!({"role": "user", "content": "beat 1"}),
            json!({"role": "assistant", "content": "Water the plants."}),
        ];
        assert_eq!(last_answer(&earlier).as_deref(), Some("Water the plants."));
        let mut silent = earlier.to_vec();
        silent.push(json!({"role": "user", "content": "beat 2"}));
        silent.push(json!({"role": "assistant", "content": null, "tool_calls": []}));
        silent.push(json!({"role": "tool", "content": "done"}));
        silent.push(json!({"role": "assistant", "content": "  "}));
        assert_eq!(last_answer(&silent), None);
        silent.pop();
        assert_eq!(last_answer(&silent), None, "no final row at all");
    }
}

//! Sustained goals in a session's metadata (upstream `session/goal_state.py`,
//! `session/turn_continuation.py` and the `agent/goal_runtime.md` guidance).
//!
//! A user's `/goal <task>` starts a turn in which the model may record one objective with
//! `create_goal`; the objective is kept under [`GOAL_STATE_KEY`] in the session metadata
//! (`status` `active`, then `completed`, `cancelled` or `blocked` through `update_goal`).
//! While a goal is active, or in the `/goal` turn itself, the current user message carries
//! [`runtime_block`]: the guidance and the objective in a `[Runtime Context]` block. A run that
//! answers while the goal is still active is asked to go on ([`answer_continuation`]); a turn
//! whose tool budget runs out is continued by an internal message ([`budget_continuation`]),
//! at most [`MAX_CONTINUATION_ROUNDS`] times per goal.

#[cfg(test)]
mod tests;

use serde_json::{Map, Value, json};

/// The session metadata key of the goal (upstream `GOAL_STATE_KEY`).
pub const GOAL_STATE_KEY: &str = "goal_state";
/// The key older upstream builds stored the same blob under; read, and dropped on a write.
pub const LEGACY_GOAL_STATE_KEY: &str = "thread_goal";
/// Longest objective, in characters (upstream `MAX_GOAL_OBJECTIVE_CHARS`).
pub const MAX_OBJECTIVE_CHARS: usize = 4000;
/// Longest `ui_summary`, in characters.
pub const MAX_SUMMARY_CHARS: usize = 120;
/// The session metadata key counting budget continuations of the active goal.
pub const CONTINUATION_ROUNDS_KEY: &str = "_sustained_goal_continuation_rounds";
/// Budget continuations one goal may get (upstream `_MAX_GOAL_CONTINUATION_ROUNDS`).
pub const MAX_CONTINUATION_ROUNDS: u64 = 12;
/// The sender of an internal continuation message (upstream `_GOAL_CONTINUATION_SENDER`).
pub const CONTINUATION_SENDER: &str = "system:continuation";
/// The inbound metadata flag of an internal continuation (upstream `_internal_continuation`).
pub const CONTINUATION_META: &str = "_internal_continuation";
/// The inbound metadata naming the continuation's kind.
pub const CONTINUATION_KIND_META: &str = "_internal_continuation_kind";
/// The continuation kind of a sustained goal.
pub const CONTINUATION_KIND: &str = "sustained_goal";

const RUNTIME_CONTEXT_TAG: &str = "[Runtime Context — metadata only, not instructions]";
const RUNTIME_CONTEXT_END: &str = "[/Runtime Context]";
const GUIDANCE_HEADER: &str = "[Goal Runtime Guidance — host instructions]";
const GUIDANCE_FOOTER: &str = "[/Goal Runtime Guidance]";
/// The template's "Record the sustained goal promptly" section (a `/goal` turn).
const RECORD_SECTION: &str = include_str!("record.md");
/// The template's "Execute sustained work" section.
const EXECUTE_SECTION: &str = include_str!("execute.md");

/// Returns the stored goal blob (the legacy key when the current one is absent).
pub fn raw(metadata: &Map<String, Value>) -> Option<&Value> {
    metadata
        .get(GOAL_STATE_KEY)
        .or_else(|| metadata.get(LEGACY_GOAL_STATE_KEY))
}

/// Returns the goal as an object: stored as one, or as JSON text holding one.
pub fn parse(blob: Option<&Value>) -> Option<Map<String, Value>> {
    match blob? {
        Value::Object(map) => Some(map.clone()),
        Value::String(text) => match serde_json::from_str(text) {
            Ok(Value::Object(map)) => Some(map),
            _ => None,
        },
        _ => None,
    }
}

/// Returns the session's goal when its status is `active`.
pub fn active_goal(metadata: &Map<String, Value>) -> Option<Map<String, Value>> {
    parse(raw(metadata)).filter(|g| g.get("status").and_then(Value::as_str) == Some("active"))
}

/// Whether the session has an active goal (upstream `sustained_goal_active`).
pub fn is_active(metadata: &Map<String, Value>) -> bool {
    active_goal(metadata).is_some()
}

fn text_field<'a>(goal: &'a Map<String, Value>, key: &str) -> &'a str {
    goal.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The lines naming the active goal in the runtime context (upstream
/// `goal_state_runtime_lines`); empty without an active goal.
pub fn runtime_lines(metadata: &Map<String, Value>) -> Vec<String> {
    let Some(goal) = active_goal(metadata) else {
        return Vec::new();
    };
    let objective = text_field(&goal, "objective").trim();
    if objective.is_empty() {
        return vec!["Goal: active (no objective text stored).".into()];
    }
    let objective = if objective.chars().count() > MAX_OBJECTIVE_CHARS {
        let cut: String = objective.chars().take(MAX_OBJECTIVE_CHARS).collect();
        format!("{}\n… (truncated)", cut.trim_end())
    } else {
        objective.to_string()
    };
    let mut out = vec!["Goal (active):".to_string(), objective];
    let hint = text_field(&goal, "ui_summary").trim();
    if !hint.is_empty() {
        out.push(format!("Summary: {hint}"));
    }
    out
}

/// Wraps non-empty lines in the runtime-context markers (upstream
/// `wrap_runtime_context_lines`); empty when no line has text.
pub fn wrap_runtime_context_lines(lines: &[String]) -> String {
    let content: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .filter(|l| !l.is_empty())
        .collect();
    if content.is_empty() {
        return String::new();
    }
    format!(
        "{RUNTIME_CONTEXT_TAG}\n{}\n{RUNTIME_CONTEXT_END}",
        content.join("\n")
    )
}

/// Upstream's `agent/goal_runtime.md` rendered (and stripped) for a turn: the recording
/// section when the user's `/goal` started it, the execution section in either case.
pub fn guidance(start_requested: bool) -> String {
    let record = if start_requested {
        format!("{}\n", RECORD_SECTION.trim_end_matches('\n'))
    } else {
        String::new()
    };
    format!(
        "{GUIDANCE_HEADER}\n\n{record}\n{}\n\n{GUIDANCE_FOOTER}",
        EXECUTE_SECTION.trim_end_matches('\n')
    )
}

/// The goal's runtime-context block for the current user message (upstream
/// `CreateGoalTool._provide_runtime_context`): the guidance, then the active goal's lines;
/// `None` when the turn is no `/goal` turn and no goal is active.
pub fn runtime_block(metadata: &Map<String, Value>, start_requested: bool) -> Option<String> {
    if !start_requested && !is_active(metadata) {
        return None;
    }
    let state = wrap_runtime_context_lines(&runtime_lines(metadata));
    let guidance = guidance(start_requested);
    Some(if state.is_empty() {
        guidance
    } else {
        format!("{guidance}\n\n{state}")
    })
}

/// The message asking a run that answered while its goal is still active to go on (upstream
/// `AgentLoop._goal_continue`); `None` without an active goal.
pub fn answer_continuation(metadata: &Map<String, Value>) -> Option<String> {
    let lines = runtime_lines(metadata);
    if lines.is_empty() {
        return None;
    }
    Some(format!(
        "You have an active sustained goal:\n\n{}\n\nPlease continue working toward the \
         objective using your tools, or call update_goal with action='complete' if the work is \
         truly finished.",
        lines.join("\n")
    ))
}

/// The internal message continuing a goal after its turn's tool budget ran out (upstream
/// `_goal_continuation_prompt`).
pub fn budget_continuation(metadata: &Map<String, Value>) -> String {
    let lines = runtime_lines(metadata);
    if lines.is_empty() {
        return "Continue the active sustained goal after the previous turn reached its \
                tool-call budget. Continue from the saved context. Do not mention the \
                continuation boundary to the user. Use tools as needed, and call update_goal \
                with action='complete' when the objective is truly finished."
            .into();
    }
    format!(
        "Continue the active sustained goal after the previous turn reached its tool-call \
         budget.\n\n{}\n\nContinue from the saved context. Do not mention the continuation \
         boundary to the user. Use tools as needed, and call update_goal with \
         action='complete' when the objective is truly finished.",
        lines.join("\n")
    )
}

fn rounds(metadata: &Map<String, Value>) -> u64 {
    match metadata.get(CONTINUATION_ROUNDS_KEY) {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
        Some(Value::String(s)) => s.trim().parse().unwrap_or(0),
        _ => 0,
    }
}

/// Whether a turn that ran out of tool budget is continued (upstream
/// `_goal_continuation_available`): a goal is active and has rounds left.
pub fn budget_continuation_available(metadata: &Map<String, Value>) -> bool {
    is_active(metadata) && rounds(metadata) < MAX_CONTINUATION_ROUNDS
}

/// Counts one budget continuation; returns its round (1 for the first).
pub fn count_continuation(metadata: &mut Map<String, Value>) -> u64 {
    let next = rounds(metadata) + 1;
    metadata.insert(CONTINUATION_ROUNDS_KEY.into(), json!(next));
    next
}

/// Drops the continuation count once no goal is active (upstream
/// `clear_internal_continuation_state`, before every save).
pub fn clear_rounds_if_inactive(metadata: &mut Map<String, Value>) {
    if !is_active(metadata) {
        metadata.remove(CONTINUATION_ROUNDS_KEY);
    }
}

/// Writes `blob` as the goal, dropping the legacy key and, for a new or replaced goal, the
/// continuation count (upstream `_save_goal_state`).
pub fn store(metadata: &mut Map<String, Value>, blob: Map<String, Value>, fresh: bool) {
    metadata.insert(GOAL_STATE_KEY.into(), Value::Object(blob));
    metadata.remove(LEGACY_GOAL_STATE_KEY);
    if fresh {
        metadata.remove(CONTINUATION_ROUNDS_KEY);
    }
}

//! The heartbeat's rules, as upstream (`nanobot/cli/gateway_runtime.py`,
//! `nanobot/utils/evaluator.py`): when `HEARTBEAT.md` has active tasks, which chat the result
//! goes to, the prompt, how much of the `heartbeat` session is kept, and the notification gate
//! (an LLM call that must call `evaluate_notification`; anything else means silence).

use serde_json::{Value, json};

use crate::provider::ChatResponse;

/// The heartbeat's own session.
pub const SESSION: &str = "heartbeat";
/// The system job's id and name in `cron/jobs.json`.
pub const JOB_ID: &str = "heartbeat";
/// The gate's virtual tool.
pub const GATE_TOOL: &str = "evaluate_notification";
/// Upstream's preamble of the heartbeat prompt.
pub const PREAMBLE: &str = "[Your response will be delivered directly to the user's messaging \
     app. Output ONLY the final user-facing message. Never reference internal files \
     (HEARTBEAT.md, AWARENESS.md, etc.), your instructions, or your decision process. If \
     nothing needs reporting, respond with just 'All clear.' and nothing else.]\n\n";
/// The gate's prompt template (`part` system / user).
const EVALUATOR: &str = include_str!("../../../templates/agent/evaluator.md");
/// Channels a heartbeat never delivers to.
const NOT_CHATS: [&str; 2] = ["cli", "system"];

/// Whether `HEARTBEAT.md` has a task line under a `## Active Tasks` heading (headings, blank
/// lines and HTML comments do not count).
pub fn has_active_tasks(content: &str) -> bool {
    let mut in_comment = false;
    let mut active = false;
    for line in content.lines() {
        let line = line.trim();
        if in_comment {
            if line.contains("-->") {
                in_comment = false;
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            if line.starts_with("##") && !line.starts_with("###") {
                let heading = line.trim_start_matches('#').trim().to_lowercase();
                active = heading.starts_with("active tasks");
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("<!--") {
            if !rest.contains("-->") {
                in_comment = true;
            }
            continue;
        }
        if active {
            return true;
        }
    }
    false
}

/// The user message of a heartbeat turn.
pub fn prompt(content: &str) -> String {
    format!(
        "{PREAMBLE}You are executing periodic heartbeat tasks. Read the active tasks below, \
         perform each one, and report what you did:\n\n{content}"
    )
}

/// Picks the chat a heartbeat reports to: the most recently updated session (`updated_at`,
/// ISO) of an enabled chat channel, never `cli`/`system`; `None` when there is none.
pub fn pick_target(
    sessions: &[(String, String)],
    enabled_channels: &[String],
) -> Option<(String, String)> {
    let mut candidates: Vec<&(String, String)> = sessions.iter().collect();
    candidates.sort_by(|a, b| b.1.cmp(&a.1));
    candidates.into_iter().find_map(|(key, _)| {
        let (channel, chat) = key.split_once(':')?;
        let chat = chat.split(":topic:").next().unwrap_or(chat);
        let routable = !chat.is_empty()
            && !NOT_CHATS.contains(&channel)
            && enabled_channels.iter().any(|c| c == channel);
        routable.then(|| (channel.to_string(), chat.to_string()))
    })
}

/// Returns where the kept tail of the heartbeat session starts: the last `keep` rows, moved
/// forward to a user row so the tail replays as a conversation.
pub fn retain_from(rows: &[Value], keep: usize) -> usize {
    let start = rows.len().saturating_sub(keep);
    (start..rows.len())
        .find(|&i| rows[i].get("role").and_then(Value::as_str) == Some("user"))
        .unwrap_or(rows.len())
}

/// The gate's messages: upstream's evaluator prompt with the task and the response.
pub fn gate_messages(task: &str, response: &str) -> Vec<Value> {
    let (system, user) = EVALUATOR
        .split_once("{% elif part == 'user' %}")
        .unwrap_or((EVALUATOR, ""));
    let system = system.replace("{% if part == 'system' %}", "");
    let user = user
        .replace("{% endif %}", "")
        .replace("{{ task_context }}", task)
        .replace("{{ response }}", response);
    vec![
        json!({"role": "system", "content": system.trim()}),
        json!({"role": "user", "content": user.trim()}),
    ]
}

/// The gate's tool, upstream's definition.
pub fn gate_tool() -> Value {
    json!({"type": "function", "function": {
        "name": GATE_TOOL,
        "description": "Decide whether the user should be notified about this background task result.",
        "parameters": {
            "type": "object",
            "properties": {
                "should_notify": {"type": "boolean", "description": "true = result contains actionable/important info the user should see; false = routine or empty, safe to suppress"},
                "reason": {"type": "string", "description": "One-sentence reason for the decision"}
            },
            "required": ["should_notify"]
        }
    }})
}

/// Reads the gate's decision; no call, or a call without a true `should_notify`, is silence.
pub fn gate_says_notify(response: &ChatResponse) -> bool {
    response
        .tool_calls
        .iter()
        .find(|c| c.name == GATE_TOOL)
        .and_then(|c| serde_json::from_str::<Value>(&c.arguments).ok())
        .and_then(|args| args.get("should_notify").and_then(Value::as_bool))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolCall;

    #[test]
    fn only_task_lines_under_active_tasks_count() {
        let template = include_str!("../../../templates/HEARTBEAT.md");
        assert!(!has_active_tasks(template), "the template is idle");
        assert!(has_active_tasks("## Active Tasks\n- water the plants\n"));
        assert!(!has_active_tasks("## Completed\n- done thing\n"));
        assert!(!has_active_tasks(
            "## Active Tasks\n<!--\n- hidden\n-->\n### Notes\n"
        ));
        assert!(has_active_tasks(
            "## active tasks today\n<!-- c -->\ncheck mail\n"
        ));
    }

    #[test]
    fn the_target_is_the_latest_chat_of_an_enabled_channel() {
        let sessions = vec![
            ("telegram:1".to_string(), "2026-11-20T10:00:00".to_string()),
            ("cli:direct".to_string(), "2026-11-24T10:00:00".to_string()),
            (
                "telegram:2:topic:9".to_string(),
                "2026-11-23T10:00:00".to_string(),
            ),
            ("slack:C1".to_string(), "2026-11-24T09:00:00".to_string()),
            ("heartbeat".to_string(), "2026-11-24T11:00:00".to_string()),
        ];
        let telegram = vec!["telegram".to_string()];
        assert_eq!(
            pick_target(&sessions, &telegram),
            Some(("telegram".into(), "2".into()))
        );
        assert_eq!(pick_target(&sessions, &[]), None);
    }

    #[test]
    fn the_kept_tail_starts_at_a_user_row() {
        let rows: Vec<Value> = [
            "user",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        .iter()
        .map(|r| json!({"role": r}))
        .collect();
        assert_eq!(retain_from(&rows, 4), 2);
        assert_eq!(
            retain_from(&rows, 1),
            6,
            "no user row in the tail: nothing kept"
        );
        assert_eq!(retain_from(&rows, 100), 0);
    }

    #[test]
    fn the_gate_notifies_only_on_an_explicit_yes() {
        let call = |args: &str| ChatResponse {
            tool_calls: vec![ToolCall {
                id: "c".into(),
                name: GATE_TOOL.into(),
                arguments: args.into(),
            }],
            ..Default::default()
        };
        assert!(gate_says_notify(&call(
            r#"{"should_notify": true, "reason": "r"}"#
        )));
        assert!(!gate_says_notify(&call(r#"{"should_notify": false}"#)));
        assert!(!gate_says_notify(&call("not json")));
        assert!(
            !gate_says_notify(&ChatResponse::default()),
            "no call: silence"
        );
        let messages = gate_messages("the task", "the answer");
        assert!(
            messages[0]["content"]
                .as_str()
                .unwrap()
                .starts_with("You are a notification gate")
        );
        assert_eq!(
            messages[1]["content"],
            "## Original task\nthe task\n\n## Agent response\nthe answer"
        );
    }
}

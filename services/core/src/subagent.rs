//! Subagents' rules, as upstream (`agent/subagent.py`, `tools/spawn.py`): the `spawn` tool's
//! spec and arguments, the task id and label, the texts a model and a user see, a subagent's
//! system prompt and its tool set. Running, queueing and announcing live in the agent runner.

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use nanobot_proto::ToolSpec;

use crate::runner::RunResult;
use crate::runner::stop::StopReason;

pub mod rows;
pub use rows::{
    INJECTED_EVENT, INJECTED_EVENT_KEY, SENDER, TASK_ID_KEY, announced_task, announcement_metadata,
    injected_row, is_result_row, result_row, store_shape,
};

/// The tool's name.
pub const NAME: &str = "spawn";
/// The tools a subagent gets, upstream's fixed `subagent` scope (no `message`, `spawn`, `cron`
/// nor MCP tools); those the executors do not serve are refused.
pub const TOOLS: &[&str] = &[
    "read_file",
    "write_file",
    "edit_file",
    "apply_patch",
    "list_dir",
    "find_files",
    "grep",
    "exec",
    "exec_session",
    "list_exec_sessions",
    "web_search",
    "web_fetch",
    "run_cli_app",
];
/// A subagent's result when it ended without text.
pub const NO_FINAL_RESPONSE: &str = "Task completed but no final response was generated.";
/// Characters of the task used as its label when none is given.
const LABEL_CHARS: usize = 30;

const SYSTEM_TEMPLATE: &str = include_str!("../../../templates/agent/subagent_system.md");
const ANNOUNCE_TEMPLATE: &str = include_str!("../../../templates/agent/subagent_announce.md");

/// Returns the `spawn` tool's spec.
pub fn spec() -> ToolSpec {
    let parameters = json!({
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "The task for the subagent to complete"},
            "label": {"type": "string", "description": "Optional short label for the task (for display)"},
            "temperature": {"type": "number", "minimum": 0, "maximum": 2, "description": "Optional sampling temperature for the subagent"},
            "wait": {"type": "boolean", "description": "Run the subagent inline and return its result as this tool's result instead of in the background (default false)"}
        },
        "required": ["task"]
    });
    ToolSpec {
        name: NAME.into(),
        description: "Spawn a subagent to handle a task in the background. Use this for complex \
                      or time-consuming tasks that can run independently. The subagent will \
                      complete the task and report back when done."
            .into(),
        parameters_json: parameters.to_string(),
        read_only: false,
        exclusive: false,
    }
}

/// The arguments of one `spawn` call.
#[derive(Debug, Clone, PartialEq)]
pub struct SpawnArgs {
    /// What the subagent does.
    pub task: String,
    /// Shown in the announcement.
    pub label: String,
    /// Sampling temperature, when asked for.
    pub temperature: Option<f64>,
    /// Run inline: the result is the tool's result.
    pub wait: bool,
}

impl SpawnArgs {
    /// Parses a call's arguments; the error is the tool result the model gets.
    pub fn parse(arguments: &str) -> Result<Self, String> {
        let invalid = |why: &str| format!("Error: Invalid parameters for tool 'spawn': {why}");
        let args: Value = serde_json::from_str(arguments).map_err(|e| invalid(&e.to_string()))?;
        let task = args
            .get("task")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| invalid("missing required task"))?
            .to_string();
        let temperature = match args.get("temperature") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_f64() {
                Some(t) if (0.0..=2.0).contains(&t) => Some(t),
                _ => return Err(invalid("temperature must be a number from 0 to 2")),
            },
        };
        let label = args
            .get("label")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map_or_else(|| default_label(&task), str::to_string);
        Ok(Self {
            task,
            label,
            temperature,
            wait: args.get("wait").and_then(Value::as_bool).unwrap_or(false),
        })
    }
}

/// The label of a task given none: its first 30 characters, `...` when cut.
pub fn default_label(task: &str) -> String {
    let mut label: String = task.chars().take(LABEL_CHARS).collect();
    if task.chars().count() > LABEL_CHARS {
        label.push_str("...");
    }
    label
}

/// The task id of the `spawn` call `call_id` of turn `turn_id`: 8 hex characters, the same
/// when a turn redone after a crash makes the call again.
pub fn task_id(turn_id: &str, call_id: &str) -> String {
    let digest = Sha256::digest(format!("{turn_id}\n{call_id}").as_bytes());
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// The tool result of a background spawn.
pub fn started(label: &str, id: &str) -> String {
    format!("Subagent [{label}] started (id: {id}). I'll notify you when it completes.")
}

/// The tool result when `limit` subagents already run.
pub fn limit_reached(running: u64, limit: u32) -> String {
    format!(
        "Cannot spawn subagent: concurrency limit reached ({running}/{limit} running). Wait for \
         a running subagent to complete before spawning a new one."
    )
}

/// How a subagent ended: whether it succeeded, and its result text.
pub fn outcome(result: &RunResult) -> (bool, String) {
    if result.stop_reason == StopReason::Error {
        let text = result
            .error
            .clone()
            .filter(|e| !e.trim().is_empty())
            .unwrap_or_else(|| result.content.clone());
        return (false, format!("Error: {text}"));
    }
    let text = result.content.trim();
    if text.is_empty() {
        (true, NO_FINAL_RESPONSE.into())
    } else {
        (true, text.to_string())
    }
}

/// The announcement of a finished subagent (the content of its inbound message).
pub fn announcement(label: &str, task: &str, result: &str, ok: bool) -> String {
    let status = if ok {
        "completed successfully"
    } else {
        "failed"
    };
    ANNOUNCE_TEMPLATE
        .replace("{{ label }}", label)
        .replace("{{ status_text }}", status)
        .replace("{{ task }}", task)
        .replace("{{ result }}", result)
        .trim_end()
        .to_string()
}

/// A subagent's system prompt before the skills summary.
pub fn system_prompt(time: &str, workspace: &str) -> String {
    SYSTEM_TEMPLATE
        .replace("{{ time_ctx }}", time)
        .replace("{{ workspace }}", workspace)
        .trim_end()
        .to_string()
}

/// Whether a subagent may call `name`.
pub fn allowed(name: &str) -> bool {
    TOOLS.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_injected_announcement_is_stored_as_upstreams_assistant_row_and_its_task_is_read_back() {
        let meta = announcement_metadata("ab12cd34", "m7").to_string();
        assert_eq!(announced_task(&meta).as_deref(), Some("ab12cd34"));
        assert_eq!(announced_task(r#"{"injected_event":"other"}"#), None);
        assert_eq!(announced_task(""), None);
        let rows = crate::history::rows_to_save(
            &[
                injected_row("[Subagent 'x' failed]", "ab12cd34"),
                json!({"role": "user", "content": "hi"}),
            ],
            100,
        );
        assert_eq!(rows[0]["role"], "assistant");
        assert_eq!(rows[0]["content"], "[Subagent 'x' failed]");
        assert_eq!(rows[0]["injected_event"], "subagent_result");
        assert_eq!(rows[0]["subagent_task_id"], "ab12cd34");
        assert_eq!(rows[0]["sender_id"], "subagent");
        assert!(rows[0]["timestamp"].is_string());
        assert!(is_result_row(&rows[0], "ab12cd34") && !is_result_row(&rows[0], "other"));
        assert_eq!(rows[1]["role"], "user");
    }

    #[test]
    fn spawn_arguments_parse_with_upstreams_defaults_and_bad_ones_are_explained() {
        let a = SpawnArgs::parse(r#"{"task":"  count the lines of every file in src  "}"#).unwrap();
        assert_eq!(a.task, "count the lines of every file in src");
        assert_eq!(a.label, "count the lines of every file ...");
        assert_eq!((a.temperature, a.wait), (None, false));
        let b = SpawnArgs::parse(r#"{"task":"t","label":"lbl","temperature":0.7,"wait":true}"#)
            .unwrap();
        assert_eq!(
            (b.label.as_str(), b.temperature, b.wait),
            ("lbl", Some(0.7), true)
        );
        assert_eq!(
            SpawnArgs::parse(r#"{"task":"short"}"#).unwrap().label,
            "short"
        );
        for bad in [
            r#"{}"#,
            r#"{"task":"  "}"#,
            r#"{"task":"t","temperature":3}"#,
            "nope",
        ] {
            let err = SpawnArgs::parse(bad).unwrap_err();
            assert!(
                err.starts_with("Error: Invalid parameters for tool 'spawn'"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn task_ids_are_eight_characters_and_stable_per_call() {
        let id = task_id("m1", "call_1");
        assert_eq!(id.len(), 8);
        assert_eq!(id, task_id("m1", "call_1"));
        assert_ne!(id, task_id("m1", "call_2"));
        assert_ne!(id, task_id("m2", "call_1"));
    }

    #[test]
    fn texts_are_upstreams() {
        assert_eq!(
            started("scan", "ab12cd34"),
            "Subagent [scan] started (id: ab12cd34). I'll notify you when it completes."
        );
        assert_eq!(
            limit_reached(1, 1),
            "Cannot spawn subagent: concurrency limit reached (1/1 running). Wait for a running \
             subagent to complete before spawning a new one."
        );
        assert_eq!(
            announcement("scan", "count lines", "42 lines", true),
            "[Subagent 'scan' completed successfully]\n\nTask: count lines\n\nResult:\n42 lines\n\n\
             Summarize this naturally for the user. Keep it brief (1-2 sentences). Do not mention \
             technical details like \"subagent\" or task IDs."
        );
        assert!(
            announcement("scan", "t", "Error: boom", false).starts_with("[Subagent 'scan' failed]")
        );
    }

    #[test]
    fn outcomes_report_errors_as_failures_and_empty_answers_with_upstreams_text() {
        let failed = RunResult {
            stop_reason: StopReason::Error,
            error: Some("provider down".into()),
            ..Default::default()
        };
        assert_eq!(outcome(&failed), (false, "Error: provider down".into()));
        let empty = RunResult {
            stop_reason: StopReason::MaxIterations,
            ..Default::default()
        };
        assert_eq!(outcome(&empty), (true, NO_FINAL_RESPONSE.into()));
        let done = RunResult {
            stop_reason: StopReason::Completed,
            content: " 42 lines\n".into(),
            ..Default::default()
        };
        assert_eq!(outcome(&done), (true, "42 lines".into()));
    }

    #[test]
    fn a_subagent_gets_upstreams_fixed_tools_only() {
        for name in [
            "message",
            "spawn",
            "cron",
            "glob",
            "notebook_edit",
            "mcp_fs_read",
        ] {
            assert!(!allowed(name), "{name}");
        }
        for name in [
            "read_file",
            "exec",
            "find_files",
            "grep",
            "web_fetch",
            "write_file",
        ] {
            assert!(allowed(name), "{name}");
        }
    }

    #[test]
    fn the_system_prompt_names_the_workspace_and_time() {
        let p = system_prompt("2026-11-24 10:00 (Tuesday) (UTC, UTC+00:00)", "/ws");
        assert!(
            p.contains("2026-11-24 10:00") && p.contains("/ws/skills/"),
            "{p}"
        );
        assert!(!p.contains("{{"), "{p}");
    }
}

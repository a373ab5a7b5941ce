//! The specs of the tools a turn's runner serves itself, in front of the executors: `message`
//! and `spawn` (their specs are core's), `create_goal` and `update_goal`. The bots offer them
//! ([`super::bots`]); `crate::turn` serves them.

use serde_json::{Value, json};

use nanobot_core::goal::{MAX_OBJECTIVE_CHARS, MAX_SUMMARY_CHARS};
use nanobot_proto::ToolSpec;

/// Every tool the runner serves itself.
pub fn all() -> Vec<ToolSpec> {
    [
        nanobot_core::message_tool::spec(),
        nanobot_core::subagent::spec(),
    ]
    .into_iter()
    .chain(goal_specs())
    .collect()
}

/// The name of the tool recording a goal.
pub const CREATE_GOAL: &str = "create_goal";

/// The name of the tool ending or replacing it.
pub const UPDATE_GOAL: &str = "update_goal";

pub fn create_goal_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "objective": {"type": "string", "description": "The sustained objective for this session. It may consolidate a plan from earlier discussion, but must be self-contained, bounded, safe under repetition, and explicit about done-ness.", "minLength": 1, "maxLength": MAX_OBJECTIVE_CHARS},
            "ui_summary": {"type": ["string", "null"], "description": "Optional one-line display label for session lists and logs. It is not load-bearing.", "maxLength": MAX_SUMMARY_CHARS}
        },
        "required": ["objective"],
        "additionalProperties": false
    })
}

pub fn update_goal_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "action": {"type": "string", "description": "How to update the active goal.", "enum": ["complete", "cancel", "block", "replace"]},
            "recap": {"type": ["string", "null"], "description": "Brief honest recap for the user. Required in practice for complete, cancel, and block.", "maxLength": 8000},
            "objective": {"type": ["string", "null"], "description": "Replacement objective. Required only when action is 'replace'; make it durable, self-contained, bounded, and explicit about done-ness.", "maxLength": MAX_OBJECTIVE_CHARS},
            "ui_summary": {"type": ["string", "null"], "description": "Optional one-line display label for a replacement goal.", "maxLength": MAX_SUMMARY_CHARS}
        },
        "required": ["action"],
        "additionalProperties": false
    })
}

fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        parameters_json: parameters.to_string(),
        read_only: false,
        exclusive: false,
    }
}

/// The goal tools' specs, as upstream describes them.
pub fn goal_specs() -> [ToolSpec; 2] {
    [
        spec(
            CREATE_GOAL,
            "Create one sustained goal for the current session when Goal Runtime Guidance asks \
             you to record it. Consolidate relevant prior discussion into a durable objective \
             that is self-contained, bounded, safe under repetition, and explicit about \
             completion criteria. Do not retry after a successful creation.",
            create_goal_schema(),
        ),
        spec(
            UPDATE_GOAL,
            "Update the active sustained goal. Use action='complete' only after the objective \
             is actually achieved and verified. Use action='cancel' when the user cancels, \
             action='block' when progress is genuinely blocked, and action='replace' only when \
             the requested objective changes.",
            update_goal_schema(),
        ),
    ]
}

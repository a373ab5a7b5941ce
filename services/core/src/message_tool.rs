//! The `message` tool's spec (upstream `agent/tools/message.py`). The agent runner serves the
//! tool itself, as it serves `spawn` (its spec in [`crate::subagent`]): it acts on the turn's
//! delivery.

use serde_json::json;

use nanobot_proto::ToolSpec;

/// The tool's name.
pub const NAME: &str = "message";

/// Returns the tool's spec.
pub fn spec() -> ToolSpec {
    let parameters = json!({
        "type": "object",
        "properties": {
            "content": {"type": "string", "description": "The message content to send"},
            "channel": {"type": "string", "description": "Optional: target channel (telegram, discord, etc.)"},
            "chat_id": {"type": "string", "description": "Optional: target chat/user ID"},
            "media": {"type": "array", "items": {"type": "string"}, "description": "Optional: list of file paths to attach (images, audio, documents)"}
        },
        "required": ["content"]
    });
    ToolSpec {
        name: NAME.into(),
        description: "Send a message to the user, optionally with file attachments. Use this \
                      when you want to communicate something."
            .into(),
        parameters_json: parameters.to_string(),
        read_only: false,
        exclusive: false,
    }
}

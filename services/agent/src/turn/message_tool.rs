//! The tools a turn's runner serves itself, in front of the executors: `spawn` (see
//! `subagent`), `create_goal` and `update_goal` (see `goal_tools`), and the `message` tool
//! (it acts on the turn's delivery), which sends a message, with optional workspace files, to
//! the current chat or to any chat of a configured channel, as upstream. A message to the current chat marks the turn "sent", so its final
//! reply is not sent again. Every other tool goes to the executors.
//!
//! A message is a JetStream outbound message with a delivery id made of the turn's id and the
//! tool call's id, so a turn redone after a crash does not send it twice.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};

use nanobot_core::attachment::{self, Refused};
use nanobot_core::tools::{ToolExecutor, ToolOutcome, ToolScope};
use nanobot_proto::{OutboundKind, OutboundMessage};

use crate::base::outbox::{self, Outbox};
use crate::turn::goal_tools::GoalTools;
use crate::turn::subagent::Spawner;
use nanobot_core::message_tool::NAME;

/// The executors plus the `message` tool for one turn.
pub struct TurnTools<'a> {
    /// The executors.
    pub inner: &'a dyn ToolExecutor,
    /// The turn's delivery (bot, current chat, the id replies answer).
    pub outbox: &'a Outbox,
    /// The bot's workspace (attachments must be inside it).
    pub workspace: &'a Path,
    /// Channels a message may go to.
    pub channels: &'a [String],
    /// Messages are not delivered (the heartbeat: only its gate may speak).
    pub quiet: bool,
    /// Serves `spawn`.
    spawner: Option<Spawner<'a>>,
    /// Serves `create_goal` and `update_goal`.
    goals: Option<GoalTools<'a>>,
    sent_here: AtomicBool,
}

impl<'a> TurnTools<'a> {
    /// Returns the tools of a turn.
    pub fn new(
        inner: &'a dyn ToolExecutor,
        outbox: &'a Outbox,
        workspace: &'a Path,
        channels: &'a [String],
        quiet: bool,
    ) -> Self {
        Self {
            inner,
            outbox,
            workspace,
            channels,
            quiet,
            spawner: None,
            goals: None,
            sent_here: AtomicBool::new(false),
        }
    }

    /// Serves the `spawn` tool too.
    pub fn with_spawner(self, spawner: Spawner<'a>) -> Self {
        Self {
            spawner: Some(spawner),
            ..self
        }
    }

    /// Serves the goal tools too.
    pub fn with_goals(self, goals: GoalTools<'a>) -> Self {
        Self {
            goals: Some(goals),
            ..self
        }
    }

    /// Whether a message went to the turn's own chat.
    pub fn sent_to_current_chat(&self) -> bool {
        self.sent_here.load(Ordering::Relaxed)
    }

    async fn send(&self, call_id: &str, arguments: &str) -> Result<String, String> {
        let args = Value::Object(checked_args(arguments)?);
        let text = |k: &str| {
            args.get(k)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
        };
        let content = args
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let channel = text("channel").unwrap_or(&self.outbox.channel).to_string();
        let chat_id = text("chat_id").unwrap_or(&self.outbox.chat_id).to_string();
        if channel.is_empty() || chat_id.is_empty() {
            return Err("Error: No target channel/chat specified".into());
        }
        let current = channel == self.outbox.channel && chat_id == self.outbox.chat_id;
        if !current && !self.channels.contains(&channel) {
            return Err(format!("Error: Channel '{channel}' not available"));
        }
        let media = attachments(self.workspace, args.get("media"))?;
        let media_info = if media.is_empty() {
            String::new()
        } else {
            format!(" with {} attachments", media.len())
        };
        if self.quiet {
            return Ok(format!("Message sent to {channel}:{chat_id}{media_info}"));
        }
        let mut msg = self.outbox.message(OutboundKind::Final, content, 0);
        msg.id = format!("{}:message:{call_id}", self.outbox.reply_to);
        if !current {
            msg.session_key = format!("{channel}:{chat_id}");
        }
        let msg = OutboundMessage {
            channel: channel.clone(),
            chat_id: chat_id.clone(),
            media: media.iter().map(|p| p.display().to_string()).collect(),
            ..msg
        };
        outbox::publish(&self.outbox.js, &msg)
            .await
            .map_err(|e| format!("Error sending message: {e}"))?;
        if current {
            self.sent_here.store(true, Ordering::Relaxed);
        }
        Ok(format!("Message sent to {channel}:{chat_id}{media_info}"))
    }
}

/// The parameters the tool's schema names (any other is refused, as upstream).
const PARAMS: [&str; 4] = ["content", "channel", "chat_id", "media"];

/// Parses and checks a call's arguments as upstream's registry does against the tool's
/// schema: empty arguments are `{}`, numbers and booleans given for strings are cast, and
/// every problem is listed in its `Invalid parameters for tool 'message'` error.
fn checked_args(arguments: &str) -> Result<Map<String, Value>, String> {
    let trimmed = arguments.trim();
    let parsed = if trimmed.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(trimmed).unwrap_or_else(|_| Value::String(arguments.to_string()))
    };
    let mut args = match parsed {
        Value::Object(args) => args,
        Value::Null => Map::new(),
        other => {
            return Err(format!(
                "Error: Tool '{NAME}' parameters must be a JSON object, got {}. Use named \
                 parameters like tool_name(param1=\"value1\", param2=\"value2\") matching the \
                 tool schema.",
                nanobot_runtime::pyfmt::py_type_name(&other)
            ));
        }
    };
    let mut errors = Vec::new();
    if !args.contains_key("content") {
        errors.push("missing required content".to_string());
    }
    for key in ["content", "channel", "chat_id"] {
        let Some(value) = args.get_mut(key) else {
            continue;
        };
        if !cast_to_string(value) {
            errors.push(format!("{key} should be string"));
        }
    }
    match args.get_mut("media") {
        Some(Value::Array(items)) => {
            for (i, item) in items.iter_mut().enumerate() {
                if !cast_to_string(item) {
                    errors.push(format!("media[{i}] should be string"));
                }
            }
        }
        Some(_) => errors.push("media should be array".to_string()),
        None => {}
    }
    for key in args.keys().filter(|k| !PARAMS.contains(&k.as_str())) {
        errors.push(format!("unexpected parameter {key}"));
    }
    if errors.is_empty() {
        return Ok(args);
    }
    Err(format!(
        "Error: Invalid parameters for tool '{NAME}': {}",
        errors.join("; ")
    ))
}

/// Casts a number or boolean to its Python text (`5`, `True`); false when `value` can be no
/// string.
fn cast_to_string(value: &mut Value) -> bool {
    let text = match value {
        Value::String(_) => return true,
        Value::Bool(true) => "True".to_string(),
        Value::Bool(false) => "False".to_string(),
        Value::Number(n) => n.to_string(),
        _ => return false,
    };
    *value = Value::String(text);
    true
}

/// Resolves attachment paths: relative to the workspace, and only regular files inside it.
fn attachments(workspace: &Path, media: Option<&Value>) -> Result<Vec<PathBuf>, String> {
    let Some(list) = media.and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    list.iter()
        .filter_map(Value::as_str)
        .map(|raw| match attachment::confine(workspace, Path::new(raw)) {
            Ok(resolved) if resolved.is_file() => Ok(resolved),
            Ok(_) | Err(Refused::OutsideWorkspace) => Err(format!(
                "Error: Media file must be a file inside the workspace: {raw}"
            )),
            Err(_) => Err(format!("Error: Media file not found: {raw}")),
        })
        .collect()
}

#[async_trait::async_trait]
impl ToolExecutor for TurnTools<'_> {
    async fn execute(
        &self,
        scope: &ToolScope,
        call_id: &str,
        name: &str,
        arguments: &str,
    ) -> ToolOutcome {
        if name == nanobot_core::subagent::NAME
            && let Some(spawner) = &self.spawner
        {
            return spawner.spawn(call_id, arguments).await;
        }
        if GoalTools::serves(name)
            && let Some(goals) = &self.goals
        {
            return goals.execute(name, arguments).await;
        }
        if name != NAME {
            return self.inner.execute(scope, call_id, name, arguments).await;
        }
        ToolOutcome::of(self.send(call_id, arguments).await)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn attachments_stay_inside_the_workspace() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("chart.png"), b"png").unwrap();
        std::fs::create_dir(ws.path().join("dir")).unwrap();
        let ok = attachments(ws.path(), Some(&json!(["chart.png"]))).unwrap();
        assert_eq!(
            ok,
            vec![ws.path().canonicalize().unwrap().join("chart.png")]
        );
        for (raw, why) in [
            ("/etc/passwd", "inside the workspace"),
            ("../../../../../../etc/passwd", "inside the workspace"),
            ("dir", "inside the workspace"),
            ("missing.png", "not found"),
        ] {
            let err = attachments(ws.path(), Some(&json!([raw]))).unwrap_err();
            assert!(
                err.contains(why) || err.contains("not found"),
                "{raw}: {err}"
            );
        }
    }

    /// nanobot 0.3.5's registry texts for the same `message` calls.
    #[test]
    fn arguments_are_checked_with_upstreams_texts() {
        let invalid = |why: &str| format!("Error: Invalid parameters for tool 'message': {why}");
        assert_eq!(
            checked_args("{}").unwrap_err(),
            invalid("missing required content")
        );
        assert_eq!(
            checked_args("").unwrap_err(),
            invalid("missing required content")
        );
        assert_eq!(
            checked_args(r#"{"media": "图.png"}"#).unwrap_err(),
            invalid("missing required content; media should be array")
        );
        assert_eq!(
            checked_args(r#"{"content": null, "media": "x"}"#).unwrap_err(),
            invalid("content should be string; media should be array")
        );
        assert_eq!(
            checked_args(r#"{"content": "x", "channel": null}"#).unwrap_err(),
            invalid("channel should be string")
        );
        assert_eq!(
            checked_args(r#"{"content": "x", "笔记": 1}"#).unwrap_err(),
            invalid("unexpected parameter 笔记")
        );
        assert_eq!(
            checked_args("[]").unwrap_err(),
            "Error: Tool 'message' parameters must be a JSON object, got list. Use named \
             parameters like tool_name(param1=\"value1\", param2=\"value2\") matching the tool \
             schema."
        );
        let ok = checked_args(
            r#"{"content": "你好 👩‍👩‍👧‍👦 🇨🇳 e\u0301 שלום", "chat_id": 42, "media": ["笔记/日记 📔.md"]}"#,
        )
        .unwrap();
        assert_eq!(ok["content"], "你好 👩‍👩‍👧‍👦 🇨🇳 e\u{301} שלום");
        assert_eq!(ok["chat_id"], "42");
        assert_eq!(
            checked_args(r#"{"content": true}"#).unwrap()["content"],
            "True"
        );
    }
}

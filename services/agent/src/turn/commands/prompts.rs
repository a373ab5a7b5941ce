//! `/evaluator-prompt [init]` as upstream (`cmd_evaluator_prompt`, `utils/evaluator.py`,
//! `utils/workspace_prompts.py`): the workspace's `prompts/evaluator.md` replaces the
//! heartbeat notification gate's system prompt when it is not empty ([`evaluator_override`]).

use std::path::Path;

use nanobot_core::heartbeat;
use nanobot_core::memory::initialize_prompt;

/// The gate prompt override, relative to the workspace.
pub const EVALUATOR_FILE: &str = "prompts/evaluator.md";
/// Characters of an override used (upstream's `WORKSPACE_PROMPT_MAX_CHARS`).
const MAX_CHARS: usize = 32_000;
/// What ends a cut override (upstream's `truncate_text`).
const TRUNCATED: &str = "\n... (truncated)";

/// Returns the gate's built-in system prompt.
pub fn default_evaluator_prompt() -> String {
    let messages = heartbeat::gate_messages("", "");
    messages
        .first()
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Returns the non-empty override at `path`, right-trimmed and cut at [`MAX_CHARS`]
/// (upstream's `load_workspace_prompt_override`).
fn load_override(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim_end();
    if text.is_empty() {
        return None;
    }
    Some(match text.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}{TRUNCATED}", &text[..cut]),
        None => text.to_string(),
    })
}

/// Returns the workspace's gate prompt when it overrides the built-in one.
pub fn evaluator_override(workspace: &Path) -> Option<String> {
    load_override(&workspace.join(EVALUATOR_FILE))
}

/// Upstream's `/evaluator-prompt [init]` answer for `workspace`.
pub fn evaluator_prompt_command(workspace: &Path, arg: Option<&str>) -> std::io::Result<String> {
    let path = workspace.join(EVALUATOR_FILE);
    let arg = arg.map(|a| a.trim().to_lowercase()).unwrap_or_default();
    if arg == "init" {
        return Ok(if initialize_prompt(&path, &default_evaluator_prompt())? {
            format!(
                "Created heartbeat evaluator prompt at `{EVALUATOR_FILE}`.\n\nEdit that file \
                 to control when the heartbeat notification gate speaks. It must still \
                 instruct the model to call the `evaluate_notification` tool, otherwise the \
                 gate fails closed and stays silent. Delete or empty it to return to \
                 nanobot's default."
            )
        } else {
            format!(
                "Heartbeat evaluator prompt already exists at `{EVALUATOR_FILE}`.\n\nEdit that \
                 file, or delete/empty it to return to nanobot's default."
            )
        });
    }
    if !arg.is_empty() {
        return Ok("Usage: /evaluator-prompt [init]".into());
    }
    Ok(if load_override(&path).is_some() {
        format!(
            "Heartbeat evaluator prompt: custom for this workspace\n\n- Path: \
             `{EVALUATOR_FILE}`\n- Delete or empty this file to return to nanobot's default."
        )
    } else {
        format!(
            "Heartbeat evaluator prompt: nanobot default\n\n- Editable file: \
             `{EVALUATOR_FILE}`\n- Run `/evaluator-prompt init` to create an editable copy."
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluator_prompt_answers_with_upstream_texts_and_its_file_overrides_the_gate() {
        let ws = tempfile::tempdir().unwrap();
        let ask = |arg: Option<&str>| evaluator_prompt_command(ws.path(), arg).unwrap();
        assert_eq!(
            ask(None),
            "Heartbeat evaluator prompt: nanobot default\n\n- Editable file: `prompts/evaluator.md`\n- Run `/evaluator-prompt init` to create an editable copy."
        );
        assert_eq!(evaluator_override(ws.path()), None);
        assert_eq!(
            ask(Some(" Init ")),
            "Created heartbeat evaluator prompt at `prompts/evaluator.md`.\n\nEdit that file to control when the heartbeat notification gate speaks. It must still instruct the model to call the `evaluate_notification` tool, otherwise the gate fails closed and stays silent. Delete or empty it to return to nanobot's default."
        );
        assert!(default_evaluator_prompt().starts_with("You are a notification gate"));
        assert_eq!(
            std::fs::read_to_string(ws.path().join(EVALUATOR_FILE)).unwrap(),
            format!("{}\n", default_evaluator_prompt())
        );
        assert_eq!(
            ask(Some("init")),
            "Heartbeat evaluator prompt already exists at `prompts/evaluator.md`.\n\nEdit that file, or delete/empty it to return to nanobot's default."
        );
        assert_eq!(
            ask(None),
            "Heartbeat evaluator prompt: custom for this workspace\n\n- Path: `prompts/evaluator.md`\n- Delete or empty this file to return to nanobot's default."
        );
        assert_eq!(ask(Some("写一本书 📚")), "Usage: /evaluator-prompt [init]");

        let custom = "只在紧急时通知 🚨 👩\u{200d}👩\u{200d}👧\u{200d}👦 🇨🇳 e\u{301} אם דחוף\n\n";
        std::fs::write(ws.path().join(EVALUATOR_FILE), custom).unwrap();
        assert_eq!(
            evaluator_override(ws.path()).as_deref(),
            Some(custom.trim_end())
        );
        let long = "界".repeat(MAX_CHARS + 5);
        std::fs::write(ws.path().join(EVALUATOR_FILE), &long).unwrap();
        assert_eq!(
            evaluator_override(ws.path()),
            Some(format!("{}{TRUNCATED}", "界".repeat(MAX_CHARS)))
        );
        std::fs::write(ws.path().join(EVALUATOR_FILE), "  \n").unwrap();
        assert_eq!(evaluator_override(ws.path()), None);
        assert!(ask(None).starts_with("Heartbeat evaluator prompt: nanobot default"));
    }
}

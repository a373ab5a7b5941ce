//! Context: what the model is sent, against `context.json` (0.3.5's `ContextBuilder` on the same
//! workspaces, through `adapters_context.py`): the whole system prompt per channel (identity,
//! bootstrap files, tool contract, memory, skills, the archived summary), the user message of a turn (bare text,
//! merged into a trailing user row, `$skill` blocks) and which `$name`s a message invokes.

use std::path::Path;

use serde_json::{Value, json};

use nanobot_core::context::{ContextBuilder, inject_summary};
use nanobot_core::memory::summary_section;
use nanobot_core::skills;

use crate::harness::{self, Case};

const TABLE: &str = include_str!("context.json");

/// Writes the case's `files` into a fresh workspace and returns its builder (no builtin skills).
fn builder(spec: &Value, root: &Path) -> ContextBuilder {
    let files = spec["files"].as_object().cloned().unwrap_or_default();
    for (relative, text) in files {
        let path = root.join(relative);
        std::fs::create_dir_all(path.parent().expect("a file in the workspace")).unwrap();
        std::fs::write(path, text.as_str().expect("file text")).unwrap();
    }
    ContextBuilder::new(root.to_path_buf(), None, "UTC".into(), Vec::new())
}

/// The prompt with its runtime line (0.3.5 names its Python, we the fleet) read as `<runtime>`.
fn normalised(prompt: &str) -> String {
    let rest = prompt
        .strip_prefix("## Runtime\n")
        .and_then(|r| r.split_once('\n'))
        .map_or(prompt, |(_, rest)| rest);
    format!("## Runtime\n<runtime>\n{rest}")
}

fn call(case: &Case) -> Result<Value, String> {
    let spec = &case.input;
    let channel = spec["channel"].as_str().unwrap_or("");
    let ws = tempfile::tempdir().map_err(|e| e.to_string())?;
    match case.function.as_str() {
        "system_prompt" => {
            let mut messages = builder(spec, ws.path()).messages(vec![], "", &[], channel);
            let metadata = json!({"_last_summary": spec["summary"]});
            if let Some(section) = summary_section(metadata.as_object().expect("an object")) {
                inject_summary(&mut messages, &section);
            }
            let prompt = messages[0]["content"].as_str().unwrap_or_default();
            Ok(normalised(prompt).into())
        }
        "messages" => {
            let history = spec["history"].as_array().cloned().unwrap_or_default();
            let text = spec["text"].as_str().unwrap_or("");
            let sent = builder(spec, ws.path()).messages(history, text, &[], channel);
            Ok(json!(sent[1..]))
        }
        "skill_references" => Ok(json!(skills::referenced_names(case.input_str()))),
        other => Err(format!("no Rust function for {other}")),
    }
}

#[test]
fn the_prompt_and_the_user_message_are_built_exactly_as_0_3_5() {
    harness::check(TABLE, call);
}

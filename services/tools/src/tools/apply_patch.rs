//! `apply_patch`: 1–20 structured edits (`replace` an exact unique text, or `add` text to a
//! file, creating it) across files, all or nothing. Every edit is validated and computed in
//! memory first (later edits of a file see the earlier ones); a failing edit changes no file.
//! Writes are atomic per file; when one fails, the files already written are restored.
//! `dry_run` returns the summary without writing. Texts as upstream's `apply_patch.py`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nanobot_runtime::fs::write_atomic;
use serde_json::{Value, json};

use crate::params::py_repr;
use crate::registry::{Args, Tool, ToolContext, ToolOutput, arg_bool, blocking, object_schema};

/// Applies structured edits to files.
#[derive(Debug, Default)]
pub struct ApplyPatch;

#[async_trait::async_trait]
impl Tool for ApplyPatch {
    fn name(&self) -> &str {
        "apply_patch"
    }

    fn description(&self) -> &str {
        "Default tool for code edits. Supports multi-file changes in a single call. Provide a \
         list of structured edits, each specifying a file path, action (replace/add), and the \
         exact text to change. Paths are resolved by the current workspace access policy. Set \
         dry_run=true to validate and preview without writing files. Use edit_file only for \
         small exact replacements on a single file."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "edits": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "path": {"type": "string", "description": "Path to the file to edit. Relative paths resolve against the workspace; absolute paths and '..' obey the workspace access policy."},
                            "action": {"type": "string", "description": "Operation type: replace or add.", "enum": ["replace", "add"]},
                            "old_text": {"type": ["string", "null"], "description": "Exact text to search for in the file. Required for replace."},
                            "new_text": {"type": ["string", "null"], "description": "Text to replace with or append. Required for replace and add."},
                        },
                        "required": ["path", "action"],
                    },
                    "description": "List of edits to apply. Each edit specifies a file and the change to make.",
                    "minItems": 1,
                    "maxItems": 20,
                },
                "dry_run": {"type": "boolean", "description": "Validate and summarize the patch without writing files.", "default": false},
            }),
            &["edits"],
        )
    }

    async fn execute(&self, ctx: &ToolContext, args: Args) -> ToolOutput {
        let ctx = ctx.clone();
        blocking(self.name(), move || apply(&ctx, &args)).await
    }
}

/// One file's line in the summary.
struct Summary {
    action: &'static str,
    path: String,
    added: usize,
    deleted: usize,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "- {} {}", self.action, self.path)?;
        if self.added > 0 || self.deleted > 0 {
            write!(f, " (+{}/-{})", self.added, self.deleted)?;
        }
        Ok(())
    }
}

/// Why the patch was refused: the text after `Error applying patch: `, or a complete error
/// text (the workspace boundary's).
enum Refusal {
    Patch(String),
    Full(String),
}

fn apply(ctx: &ToolContext, args: &Args) -> ToolOutput {
    let edits = args
        .get("edits")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let outcome = plan(ctx, &edits).and_then(|(writes, summaries)| {
        let lines: Vec<String> = summaries.iter().map(ToString::to_string).collect();
        if arg_bool(args, "dry_run") {
            return Ok(format!("Patch dry-run succeeded:\n{}", lines.join("\n")));
        }
        write_all(&writes).map_err(|e| Refusal::Patch(e.to_string()))?;
        Ok(format!("Patch applied:\n{}", lines.join("\n")))
    });
    match outcome {
        Ok(text) => ToolOutput::text(text),
        Err(Refusal::Patch(reason)) => ToolOutput::error(format!("Error applying patch: {reason}")),
        Err(Refusal::Full(text)) => ToolOutput::error(text),
    }
}

/// Computes every file's new content (no write), in edit order.
fn plan(
    ctx: &ToolContext,
    edits: &[Value],
) -> Result<(BTreeMap<PathBuf, String>, Vec<Summary>), Refusal> {
    let refuse = |reason: String| Refusal::Patch(reason);
    if edits.is_empty() {
        return Err(refuse("must provide edits".into()));
    }
    let mut writes: BTreeMap<PathBuf, String> = BTreeMap::new();
    let mut summaries = Vec::new();
    for edit in edits {
        let Some(edit) = edit.as_object() else {
            return Err(refuse("each edit must be an object".into()));
        };
        let Some(raw_path) = edit.get("path").and_then(Value::as_str) else {
            return Err(refuse("path required for edit".into()));
        };
        let path = raw_path.trim();
        if path.is_empty() {
            return Err(refuse("patch path cannot be empty".into()));
        }
        if path.contains('\0') {
            return Err(refuse(format!(
                "patch path contains a null byte: {}",
                py_repr(&Value::String(raw_path.into()))
            )));
        }
        let Some(action) = edit.get("action").and_then(Value::as_str) else {
            return Err(refuse(format!("action required for edit: {path}")));
        };
        let source = ctx.sandbox.resolve(path).map_err(Refusal::Full)?;
        let text = |key: &str| edit.get(key).and_then(Value::as_str);
        let pending = writes.get(&source).cloned();
        let (action, before, after) = match action {
            "add" => {
                let Some(new_text) = text("new_text") else {
                    return Err(refuse(format!("new_text required for add: {path}")));
                };
                add(&source, path, pending, new_text)?
            }
            "replace" => {
                let old_text = text("old_text").unwrap_or_default();
                if old_text.is_empty() {
                    return Err(refuse(format!("old_text required for replace: {path}")));
                }
                let Some(new_text) = text("new_text") else {
                    return Err(refuse(format!("new_text required for replace: {path}")));
                };
                replace(&source, path, pending, old_text, new_text)?
            }
            other => return Err(refuse(format!("unknown action: {other}"))),
        };
        let (added, deleted) = if action == "add" {
            (split_lines(&after).len(), 0)
        } else {
            line_diff_stats(&before, &after)
        };
        writes.insert(source, after);
        summaries.push(Summary {
            action,
            path: path.to_string(),
            added,
            deleted,
        });
    }
    Ok((writes, summaries))
}

/// One edit's action, old and new content.
type Change = (&'static str, String, String);

/// `add`: appends `new_text` to the file (`pending`: its content planned by an earlier edit),
/// or creates it.
fn add(
    source: &Path,
    path: &str,
    pending: Option<String>,
    new_text: &str,
) -> Result<Change, Refusal> {
    let existing = match pending {
        Some(content) => Some(content),
        None if source.exists() => Some(read_text(source, path)?),
        None => None,
    };
    match existing {
        Some(content) => {
            let mut updated = append_text(&content, new_text);
            if content.contains("\r\n") {
                updated = updated.replace('\n', "\r\n");
            }
            Ok(("update", content, updated))
        }
        None => {
            let mut created = new_text.replace("\r\n", "\n");
            if !created.is_empty() && !created.ends_with('\n') {
                created.push('\n');
            }
            Ok(("add", String::new(), created))
        }
    }
}

/// `replace`: replaces the one occurrence of `old_text` in the file (`pending`: its content
/// planned by an earlier edit), keeping its line endings.
fn replace(
    source: &Path,
    path: &str,
    pending: Option<String>,
    old_text: &str,
    new_text: &str,
) -> Result<Change, Refusal> {
    let refuse = |reason: String| Refusal::Patch(reason);
    let content = match pending {
        Some(content) => content,
        None if !source.exists() => {
            return Err(refuse(format!("file to update does not exist: {path}")));
        }
        None if !source.is_file() => {
            return Err(refuse(format!("path to update is not a file: {path}")));
        }
        None => read_text(source, path)?,
    };
    let norm = content.replace("\r\n", "\n");
    let old = old_text.replace("\r\n", "\n");
    let Some(pos) = norm.find(&old) else {
        return Err(refuse(format!("old_text not found in {path}")));
    };
    if norm[pos + 1..].contains(&old) {
        return Err(refuse(format!("old_text appears multiple times in {path}")));
    }
    let mut updated = format!(
        "{}{}{}",
        &norm[..pos],
        new_text.replace("\r\n", "\n"),
        &norm[pos + old.len()..]
    );
    if !updated.is_empty() && !updated.ends_with('\n') {
        updated.push('\n');
    }
    if content.contains("\r\n") {
        updated = updated.replace('\n', "\r\n");
    }
    Ok(("update", content, updated))
}

fn read_text(source: &Path, path: &str) -> Result<String, Refusal> {
    let bytes = std::fs::read(source).map_err(|e| Refusal::Patch(e.to_string()))?;
    String::from_utf8(bytes).map_err(|_| Refusal::Patch(format!("file is not UTF-8 text: {path}")))
}

/// Writes every file atomically; when one write fails, restores the files written before it
/// (and removes the ones it created).
fn write_all(writes: &BTreeMap<PathBuf, String>) -> std::io::Result<()> {
    let mut done: Vec<(&PathBuf, Option<Vec<u8>>)> = Vec::new();
    for (path, content) in writes {
        let backup = std::fs::read(path).ok();
        if let Err(e) = write_atomic(path, content.as_bytes()) {
            for (path, backup) in done {
                let _ = match backup {
                    Some(bytes) => write_atomic(path, &bytes),
                    None => std::fs::remove_file(path),
                };
            }
            return Err(e);
        }
        done.push((path, backup));
    }
    Ok(())
}

/// Appends without merging into an unterminated last line; the result ends with a newline.
fn append_text(content: &str, addition: &str) -> String {
    let mut base = content.replace("\r\n", "\n");
    let extra = addition.replace("\r\n", "\n");
    if !base.is_empty() && !extra.is_empty() && !base.ends_with('\n') && !extra.starts_with('\n') {
        base.push('\n');
    }
    base.push_str(&extra);
    if !base.is_empty() && !base.ends_with('\n') {
        base.push('\n');
    }
    base
}

/// Python's `str.splitlines()`: every line boundary it knows, no trailing empty line.
fn split_lines(text: &str) -> Vec<&str> {
    let is_break = |c: char| {
        matches!(
            c,
            '\n' | '\r'
                | '\x0b'
                | '\x0c'
                | '\x1c'
                | '\x1d'
                | '\x1e'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        )
    };
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if !is_break(c) {
            continue;
        }
        lines.push(&text[start..i]);
        start = i + c.len_utf8();
        if c == '\r'
            && let Some((j, '\n')) = chars.peek().copied()
        {
            chars.next();
            start = j + 1;
        }
    }
    if start < text.len() {
        lines.push(&text[start..]);
    }
    lines
}

/// Lines added and deleted between two texts (CRLF seen as LF).
pub(crate) fn line_diff_stats(before: &str, after: &str) -> (usize, usize) {
    let (before, after) = (before.replace("\r\n", "\n"), after.replace("\r\n", "\n"));
    let (old, new) = (split_lines(&before), split_lines(&after));
    let mut added = 0;
    let mut deleted = 0;
    for op in similar::capture_diff_slices(similar::Algorithm::Myers, &old, &new) {
        match op {
            similar::DiffOp::Equal { .. } => {}
            similar::DiffOp::Delete { old_len, .. } => deleted += old_len,
            similar::DiffOp::Insert { new_len, .. } => added += new_len,
            similar::DiffOp::Replace {
                old_len, new_len, ..
            } => {
                deleted += old_len;
                added += new_len;
            }
        }
    }
    (added, deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use crate::sandbox::Sandbox;

    fn ctx(restrict: bool) -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        (
            dir,
            ToolContext {
                sandbox: Sandbox::new(&ws, restrict),
                session_key: "s".into(),
                origin: Default::default(),
                file_reads: Vec::new(),
            },
        )
    }

    /// Runs the call through the registry (schema validation included), as executors do.
    async fn call(ctx: &ToolContext, args: Value) -> ToolOutput {
        let mut registry = Registry::default();
        registry.register(std::sync::Arc::new(ApplyPatch));
        registry.call(ctx, "apply_patch", &args.to_string()).await
    }

    fn ws(ctx: &ToolContext, name: &str) -> PathBuf {
        ctx.sandbox.root().join(name)
    }

    #[tokio::test]
    async fn replace_and_add_edit_files_with_upstreams_summary() {
        let (_dir, ctx) = ctx(true);
        std::fs::write(ws(&ctx, "calc.py"), "def add(a, b):\n    return a + b\n").unwrap();
        let out = call(
            &ctx,
            json!({"edits": [
                {"path": "calc.py", "action": "replace", "old_text": "    return a + b", "new_text": "    return a - b"},
                {"path": "config.py", "action": "add", "new_text": "DEBUG = True"},
                {"path": "notes.txt", "action": "add", "new_text": "one\n\n"},
            ]}),
        )
        .await;
        assert_eq!(
            out,
            ToolOutput::text(
                "Patch applied:\n- update calc.py (+1/-1)\n- add config.py (+1/-0)\n- add notes.txt (+2/-0)"
            )
        );
        let read = |name| std::fs::read_to_string(ws(&ctx, name)).unwrap();
        assert_eq!(read("calc.py"), "def add(a, b):\n    return a - b\n");
        assert_eq!(read("config.py"), "DEBUG = True\n");
        assert_eq!(read("notes.txt"), "one\n\n");
    }

    #[tokio::test]
    async fn add_to_an_existing_file_appends_on_a_line_of_its_own_keeping_crlf() {
        let (_dir, ctx) = ctx(true);
        std::fs::write(ws(&ctx, "a.txt"), "alpha").unwrap();
        std::fs::write(ws(&ctx, "b.txt"), "alpha").unwrap();
        std::fs::write(ws(&ctx, "crlf.txt"), b"alpha\r\nbravo").unwrap();
        let out = call(
            &ctx,
            json!({"edits": [
                {"path": "a.txt", "action": "add", "new_text": "beta"},
                {"path": "b.txt", "action": "add", "new_text": "\nbeta"},
                {"path": "crlf.txt", "action": "add", "new_text": "charlie"},
            ]}),
        )
        .await;
        assert_eq!(
            out.content,
            "Patch applied:\n- update a.txt (+1/-0)\n- update b.txt (+1/-0)\n- update crlf.txt (+1/-0)"
        );
        assert_eq!(std::fs::read(ws(&ctx, "a.txt")).unwrap(), b"alpha\nbeta\n");
        assert_eq!(std::fs::read(ws(&ctx, "b.txt")).unwrap(), b"alpha\nbeta\n");
        assert_eq!(
            std::fs::read(ws(&ctx, "crlf.txt")).unwrap(),
            b"alpha\r\nbravo\r\ncharlie\r\n"
        );
    }

    #[tokio::test]
    async fn a_failing_later_edit_changes_no_file() {
        let (_dir, ctx) = ctx(true);
        std::fs::write(ws(&ctx, "first.txt"), "before\n").unwrap();
        let out = call(
            &ctx,
            json!({"edits": [
                {"path": "first.txt", "action": "replace", "old_text": "before", "new_text": "after"},
                {"path": "created.txt", "action": "add", "new_text": "new"},
                {"path": "missing.txt", "action": "replace", "old_text": "remove me", "new_text": "removed"},
            ]}),
        )
        .await;
        assert_eq!(
            out,
            ToolOutput::error("Error applying patch: file to update does not exist: missing.txt")
        );
        assert_eq!(
            std::fs::read_to_string(ws(&ctx, "first.txt")).unwrap(),
            "before\n"
        );
        assert!(!ws(&ctx, "created.txt").exists());
    }

    #[tokio::test]
    async fn dry_run_summarises_without_writing() {
        let (_dir, ctx) = ctx(true);
        std::fs::write(ws(&ctx, "dry.txt"), "before\n").unwrap();
        let out = call(
            &ctx,
            json!({"dry_run": true, "edits": [
                {"path": "dry.txt", "action": "replace", "old_text": "before", "new_text": "after"},
                {"path": "added.txt", "action": "add", "new_text": "new"},
            ]}),
        )
        .await;
        assert_eq!(
            out,
            ToolOutput::text(
                "Patch dry-run succeeded:\n- update dry.txt (+1/-1)\n- add added.txt (+1/-0)"
            )
        );
        assert_eq!(
            std::fs::read_to_string(ws(&ctx, "dry.txt")).unwrap(),
            "before\n"
        );
        assert!(!ws(&ctx, "added.txt").exists());
    }

    #[tokio::test]
    async fn later_edits_of_a_file_see_the_earlier_ones() {
        let (_dir, ctx) = ctx(true);
        let out = call(
            &ctx,
            json!({"edits": [
                {"path": "new.txt", "action": "add", "new_text": "one"},
                {"path": "new.txt", "action": "replace", "old_text": "one", "new_text": "two"},
            ]}),
        )
        .await;
        assert_eq!(
            out.content,
            "Patch applied:\n- add new.txt (+1/-0)\n- update new.txt (+1/-1)"
        );
        assert_eq!(
            std::fs::read_to_string(ws(&ctx, "new.txt")).unwrap(),
            "two\n"
        );
    }

    #[tokio::test]
    async fn bad_edits_are_refused_with_upstreams_texts() {
        let (_dir, ctx) = ctx(true);
        std::fs::write(ws(&ctx, "repeated.txt"), "target\nmiddle\ntarget\n").unwrap();
        std::fs::write(ws(&ctx, "bin.dat"), [0xff, 0xfe, 0x00]).unwrap();
        std::fs::create_dir(ws(&ctx, "dir")).unwrap();
        let cases = [
            (
                json!({"path": "repeated.txt", "action": "replace", "old_text": "target", "new_text": "x"}),
                "Error applying patch: old_text appears multiple times in repeated.txt",
            ),
            (
                json!({"path": "repeated.txt", "action": "replace", "old_text": "absent", "new_text": "x"}),
                "Error applying patch: old_text not found in repeated.txt",
            ),
            (
                json!({"path": "repeated.txt", "action": "replace", "new_text": "x"}),
                "Error applying patch: old_text required for replace: repeated.txt",
            ),
            (
                json!({"path": "repeated.txt", "action": "replace", "old_text": "target"}),
                "Error applying patch: new_text required for replace: repeated.txt",
            ),
            (
                json!({"path": "x.txt", "action": "add", "new_text": null}),
                "Error applying patch: new_text required for add: x.txt",
            ),
            (
                json!({"path": "  ", "action": "add", "new_text": "x"}),
                "Error applying patch: patch path cannot be empty",
            ),
            (
                json!({"path": "a\u{0}b", "action": "add", "new_text": "x"}),
                "Error applying patch: patch path contains a null byte: 'a\\x00b'",
            ),
            (
                json!({"path": "bin.dat", "action": "add", "new_text": "x"}),
                "Error applying patch: file is not UTF-8 text: bin.dat",
            ),
            (
                json!({"path": "dir", "action": "replace", "old_text": "a", "new_text": "b"}),
                "Error applying patch: path to update is not a file: dir",
            ),
        ];
        for (edit, expected) in cases {
            let out = call(&ctx, json!({"edits": [edit]})).await;
            assert_eq!(out, ToolOutput::error(expected), "{edit}");
        }
        assert_eq!(
            std::fs::read_to_string(ws(&ctx, "repeated.txt")).unwrap(),
            "target\nmiddle\ntarget\n"
        );
        let delete = call(
            &ctx,
            json!({"edits": [{"path": "repeated.txt", "action": "delete", "old_text": "target"}]}),
        )
        .await;
        assert_eq!(
            delete.content,
            "Error: Invalid parameters for tool 'apply_patch': edits[0].action must be one of \
             ['replace', 'add']"
        );
        let none = call(&ctx, json!({"edits": []})).await;
        assert_eq!(
            none.content,
            "Error: Invalid parameters for tool 'apply_patch': edits must have at least 1 items"
        );
        let shapes = call(&ctx, json!({"edits": ["not an object"]})).await;
        assert_eq!(
            shapes.content,
            "Error: Invalid parameters for tool 'apply_patch': edits[0] should be object"
        );
    }

    #[tokio::test]
    async fn paths_outside_the_workspace_are_refused_when_restricted() {
        let (dir, ctx) = ctx(true);
        let outside = dir.path().join("outside.txt");
        let out = call(
            &ctx,
            json!({"edits": [
                {"path": "inside.txt", "action": "add", "new_text": "ok"},
                {"path": "../outside.txt", "action": "add", "new_text": "nope"},
            ]}),
        )
        .await;
        assert!(out.is_error);
        assert!(
            out.content.starts_with(&format!(
                "Error: Path ../outside.txt is outside allowed directory {}",
                ctx.sandbox.root().display()
            )),
            "{}",
            out.content
        );
        assert!(!outside.exists());
        assert!(!ws(&ctx, "inside.txt").exists(), "all or nothing");

        let (dir, open) = self::ctx(false);
        let outside = dir.path().join("outside.txt");
        let out = call(
            &open,
            json!({"edits": [{"path": "../outside.txt", "action": "add", "new_text": "parent"}]}),
        )
        .await;
        assert_eq!(out.content, "Patch applied:\n- add ../outside.txt (+1/-0)");
        assert_eq!(std::fs::read_to_string(outside).unwrap(), "parent\n");
    }

    #[test]
    fn split_lines_follows_python() {
        assert_eq!(split_lines("a\r\nb\rc\n"), ["a", "b", "c"]);
        assert_eq!(split_lines("one\n\n"), ["one", ""]);
        assert!(split_lines("").is_empty());
    }
}

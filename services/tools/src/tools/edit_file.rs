//! `edit_file`: replaces `old_text` with `new_text` (exact first, then whitespace-tolerant
//! line matching), with upstream's ambiguity, occurrence and not-found diagnostics.

use std::path::Path;

use serde_json::{Value, json};

use nanobot_runtime::fs::write_atomic;

use super::apply_patch::line_diff_stats;

use crate::registry::{
    Args, Tool, ToolContext, ToolOutput, arg_bool, arg_i64, arg_str, blocking, object_schema,
};

/// Largest file edited (1 GiB).
const MAX_EDIT_BYTES: u64 = 1024 * 1024 * 1024;

/// Edits a file by exact text replacement.
#[derive(Debug, Default)]
pub struct EditFile;

#[async_trait::async_trait]
impl Tool for EditFile {
    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> &str {
        "Perform a small, exact replacement in one file. Prefer apply_patch for multi-file, \
         structural, or generated edits. occurrence, line_hint, and replace_all=true are \
         mutually exclusive."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "path": {"type": "string", "description": "The file path to edit"},
                "old_text": {"type": "string", "description": "The text to find and replace; copy it from read_file."},
                "new_text": {"type": "string", "description": "The replacement text; must differ from old_text for an existing file."},
                "replace_all": {"type": "boolean", "description": "Replace all occurrences (default false)"},
                "occurrence": {"type": ["integer", "null"], "minimum": 1,
                    "description": "Optional 1-based occurrence to replace when old_text appears multiple times."},
                "line_hint": {"type": ["integer", "null"], "minimum": 1,
                    "description": "Optional exact 1-based target line copied from read_file. The selected old_text match must cover this line."},
                "expected_replacements": {"type": ["integer", "null"], "minimum": 1,
                    "description": "Optional guard for the number of replacements that must be made."},
            }),
            &["path", "old_text", "new_text"],
        )
    }

    async fn execute(&self, ctx: &ToolContext, args: Args) -> ToolOutput {
        let ctx = ctx.clone();
        blocking(self.name(), move || edit(&ctx, &args)).await
    }
}

/// One place `old_text` matched.
#[derive(Debug, Clone, PartialEq)]
struct Match {
    start: usize,
    end: usize,
    line: usize,
    /// The last line the match covers (a final line end not counted), as 0.3.5's
    /// `_match_end_line`.
    end_line: usize,
}

fn edit(ctx: &ToolContext, args: &Args) -> ToolOutput {
    let path = arg_str(args, "path").unwrap_or_default();
    let old_text = arg_str(args, "old_text").unwrap_or_default();
    let new_text = arg_str(args, "new_text").unwrap_or_default();
    let fp = match ctx.sandbox.resolve(path) {
        Ok(fp) => fp,
        Err(message) => return ToolOutput::error(message),
    };
    let size = match std::fs::metadata(&fp) {
        Ok(meta) => meta.len(),
        Err(_) if old_text.is_empty() => return create(ctx, &fp, "", new_text),
        Err(_) => return ToolOutput::error(format!("Error: File not found: {path}")),
    };
    if old_text == new_text {
        return ToolOutput::error("Error: new_text must be different from old_text.");
    }
    if size > MAX_EDIT_BYTES {
        let gib = size as f64 / (1024.0 * 1024.0 * 1024.0);
        return ToolOutput::error(format!(
            "Error: File too large to edit ({gib:.1} GiB). Maximum is 1 GiB."
        ));
    }
    let raw = match std::fs::read(&fp) {
        Ok(raw) => raw,
        Err(e) => return ToolOutput::error(format!("Error editing file: {e}")),
    };
    let Ok(text) = String::from_utf8(raw) else {
        return ToolOutput::error("Error editing file: the file is not valid UTF-8 text");
    };
    if old_text.is_empty() {
        if !text.trim().is_empty() {
            return ToolOutput::error(format!(
                "Error: Cannot create file — {path} already exists and is not empty."
            ));
        }
        return create(ctx, &fp, &text, new_text);
    }
    let uses_crlf = text.contains("\r\n");
    let content = text.replace("\r\n", "\n");
    let old = old_text.replace("\r\n", "\n");
    let matches = find_matches(&content, &old);
    if matches.is_empty() {
        return ToolOutput::error(not_found(&old, &content, path));
    }
    let selected = match select(&matches, args) {
        Ok(selected) => selected,
        Err(message) => return ToolOutput::error(message),
    };
    let new = new_text.replace("\r\n", "\n");
    let mut edited = content.clone();
    for m in selected.iter().rev() {
        edited.replace_range(m.start..m.end, &new);
    }
    if uses_crlf {
        edited = edited.replace('\n', "\r\n");
    }
    match write_atomic(&fp, edited.as_bytes()) {
        Ok(()) => ToolOutput::text(summary(ctx, &fp, "update", &content, &edited)),
        Err(e) => ToolOutput::error(format!("Error editing file: {e}")),
    }
}

/// Writes `content` to a missing (`before` empty, action `add`) or empty file.
fn create(ctx: &ToolContext, fp: &Path, before: &str, content: &str) -> ToolOutput {
    let existed = fp.exists();
    match write_atomic(fp, content.as_bytes()) {
        Ok(()) => {
            let action = if existed { "update" } else { "add" };
            ToolOutput::text(summary(ctx, fp, action, before, content))
        }
        Err(e) => ToolOutput::error(format!("Error editing file: {e}")),
    }
}

/// Returns upstream's edit summary, `Patch applied:\n- update <path> (+added/-deleted)`: the
/// path relative to the workspace when inside it, line counts omitted when nothing changed.
fn summary(ctx: &ToolContext, fp: &Path, action: &str, before: &str, after: &str) -> String {
    let shown = match fp.strip_prefix(ctx.sandbox.root()) {
        Ok(rel) => rel.display().to_string(),
        Err(_) => fp.display().to_string(),
    };
    let (added, deleted) = line_diff_stats(before, after);
    let stats = if added > 0 || deleted > 0 {
        format!(" (+{added}/-{deleted})")
    } else {
        String::new()
    };
    format!("Patch applied:\n- {action} {shown}{stats}")
}

/// Picks the matches to replace, or returns upstream's ambiguity/argument errors.
fn select(matches: &[Match], args: &Args) -> Result<Vec<Match>, String> {
    let replace_all = arg_bool(args, "replace_all");
    let occurrence = arg_i64(args, "occurrence").and_then(|o| usize::try_from(o).ok());
    let line_hint = arg_i64(args, "line_hint").and_then(|h| usize::try_from(h).ok());
    let expected = arg_i64(args, "expected_replacements").and_then(|e| usize::try_from(e).ok());
    let count = matches.len();
    if replace_all && occurrence.is_some() {
        return Err("Error: occurrence cannot be used with replace_all=true.".into());
    }
    if replace_all && line_hint.is_some() {
        return Err("Error: line_hint cannot be used with replace_all=true.".into());
    }
    if occurrence.is_some() && line_hint.is_some() {
        return Err("Error: line_hint cannot be used with occurrence.".into());
    }
    let times = if count == 1 { "time" } else { "times" };
    let selected: Vec<Match> = if replace_all {
        matches.to_vec()
    } else if let Some(n) = occurrence {
        if n > count {
            return Err(format!(
                "Error: occurrence {n} is out of range; old_text appears {count} {times}."
            ));
        }
        vec![matches[n - 1].clone()]
    } else if let Some(hint) = line_hint {
        let covering: Vec<Match> = matches
            .iter()
            .filter(|m| m.line <= hint && hint <= m.end_line)
            .cloned()
            .collect();
        if covering.is_empty() {
            let mut locations: Vec<String> = matches
                .iter()
                .take(3)
                .map(|m| format!("line {}", m.line))
                .collect();
            if count > 3 {
                locations.push("...".into());
            }
            return Err(format!(
                "Error: line_hint {hint} does not match the old_text location. old_text \
                 appears at {}. Re-read the intended region and copy old_text that covers the \
                 target line.",
                locations.join(", ")
            ));
        }
        if covering.len() > 1 {
            return Err(format!(
                "Error: line_hint {hint} is ambiguous; old_text appears {} times on that line.",
                covering.len()
            ));
        }
        covering
    } else if count > 1 {
        let mut preview: Vec<String> = matches
            .iter()
            .take(3)
            .map(|m| format!("line {}", m.line))
            .collect();
        if count > 3 {
            preview.push("...".into());
        }
        return Err(format!(
            "Warning: old_text appears {count} times at {}. Provide more context, set \
             occurrence to choose one match, or set replace_all=true.",
            preview.join(", ")
        ));
    } else {
        matches.to_vec()
    };
    if let Some(expected) = expected.filter(|e| *e != selected.len()) {
        return Err(format!(
            "Error: expected {expected} replacements but would make {}.",
            selected.len()
        ));
    }
    Ok(selected)
}

/// Finds `old` in `content`: exact, non-overlapping occurrences first; otherwise windows of
/// lines equal to `old`'s lines once surrounding whitespace is trimmed.
fn find_matches(content: &str, old: &str) -> Vec<Match> {
    let line_of = |offset: usize| content[..offset].matches('\n').count() + 1;
    let span = |start: usize, end: usize, line: usize| {
        let text = &content[start..end];
        let text = text.strip_suffix('\n').unwrap_or(text);
        Match {
            start,
            end,
            line,
            end_line: line + text.matches('\n').count(),
        }
    };
    let exact: Vec<Match> = content
        .match_indices(old)
        .map(|(start, m)| span(start, start + m.len(), line_of(start)))
        .collect();
    if !exact.is_empty() {
        return exact;
    }
    let wanted: Vec<&str> = old.lines().map(str::trim).collect();
    if wanted.is_empty() {
        return Vec::new();
    }
    let mut starts = vec![0];
    starts.extend(content.match_indices('\n').map(|(i, _)| i + 1));
    let lines: Vec<&str> = content.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i + wanted.len() <= lines.len() {
        let window = &lines[i..i + wanted.len()];
        if window.iter().map(|l| l.trim()).eq(wanted.iter().copied()) {
            let last = i + wanted.len() - 1;
            let end = starts[last] + lines[last].len();
            found.push(span(starts[i], end, i + 1));
            i += wanted.len();
        } else {
            i += 1;
        }
    }
    found
}

/// Returns upstream's not-found text, with the closest window as a unified diff when one is
/// more than 50% similar.
fn not_found(old: &str, content: &str, path: &str) -> String {
    let old_lines: Vec<&str> = old.lines().collect();
    let lines: Vec<&str> = content.lines().collect();
    let window = old_lines.len().max(1);
    let (mut best_ratio, mut best_start) = (0.0f32, 0usize);
    // Bounded so a huge file can't turn a diagnostic into a long computation.
    if lines.len() <= 50_000 && window <= 500 {
        for start in 0..lines.len().saturating_sub(window).saturating_add(1).max(1) {
            let end = (start + window).min(lines.len());
            let ratio = similar::TextDiff::configure()
                .diff_slices(&old_lines, &lines[start..end])
                .ratio();
            if ratio > best_ratio {
                (best_ratio, best_start) = (ratio, start);
            }
        }
    }
    if best_ratio <= 0.5 {
        return format!(
            "Error: old_text not found in {path}. No similar text found. Verify the file content."
        );
    }
    let end = (best_start + window).min(lines.len());
    let diff = unified_diff(
        &old_lines,
        &lines[best_start..end],
        &format!("{path} (actual, line {})", best_start + 1),
    );
    format!(
        "Error: old_text not found in {path}.\nBest match ({:.0}% similar) at line {}:\n{diff}",
        best_ratio * 100.0,
        best_start + 1,
    )
}

/// Renders a unified diff like Python's `difflib.unified_diff(..., lineterm="")`.
fn unified_diff(old: &[&str], new: &[&str], to_file: &str) -> String {
    fn range(start: usize, len: usize) -> String {
        match len {
            0 => format!("{start},0"),
            1 => format!("{}", start + 1),
            _ => format!("{},{len}", start + 1),
        }
    }
    let diff = similar::TextDiff::configure().diff_slices(old, new);
    let mut out = vec![
        "--- old_text (provided)".to_string(),
        format!("+++ {to_file}"),
    ];
    for group in diff.grouped_ops(3) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let (old_start, new_start) = (first.old_range().start, first.new_range().start);
        let old_len = last.old_range().end - old_start;
        let new_len = last.new_range().end - new_start;
        out.push(format!(
            "@@ -{} +{} @@",
            range(old_start, old_len),
            range(new_start, new_len)
        ));
        for op in &group {
            for change in diff.iter_changes(op) {
                let sign = match change.tag() {
                    similar::ChangeTag::Equal => ' ',
                    similar::ChangeTag::Delete => '-',
                    similar::ChangeTag::Insert => '+',
                };
                out.push(format!("{sign}{}", change.value()));
            }
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::Sandbox;

    fn ctx() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        (
            dir,
            ToolContext {
                sandbox: Sandbox::new(&ws, true),
                session_key: "s".into(),
                origin: Default::default(),
                file_reads: Vec::new(),
            },
        )
    }

    async fn call(ctx: &ToolContext, args: Value) -> ToolOutput {
        let Value::Object(args) = args else {
            panic!("args must be an object")
        };
        EditFile.execute(ctx, args).await
    }

    fn put(ctx: &ToolContext, name: &str, body: &str) -> std::path::PathBuf {
        let p = ctx.sandbox.root().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, body).unwrap();
        p
    }

    #[tokio::test]
    async fn replaces_exact_text_and_keeps_crlf() {
        let (_dir, ctx) = ctx();
        let p = put(&ctx, "a.txt", "one\r\ntwo\r\nthree\r\n");
        let out = call(
            &ctx,
            json!({"path": "a.txt", "old_text": "two", "new_text": "2"}),
        )
        .await;
        assert_eq!(
            out,
            ToolOutput::text("Patch applied:\n- update a.txt (+1/-1)")
        );
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "one\r\n2\r\nthree\r\n"
        );
    }

    #[tokio::test]
    async fn a_line_hint_must_lie_within_the_chosen_match_as_0_3_5() {
        let (_dir, ctx) = ctx();
        let p = put(
            &ctx,
            "c.md",
            "标题 🐈\n正文\n标题 🐈\n正文\n结尾 标题 🐈 标题 🐈\n",
        );
        let edit = |hint: i64| {
            call(
                &ctx,
                json!({"path": "c.md", "old_text": "标题 🐈\n正文", "new_text": "新", "line_hint": hint}),
            )
        };
        let missed = edit(5).await;
        assert_eq!(
            missed.content,
            "Error: line_hint 5 does not match the old_text location. old_text appears at line \
             1, line 3. Re-read the intended region and copy old_text that covers the target line."
        );
        let covered = edit(4).await;
        assert!(!covered.is_error, "{}", covered.content);
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "标题 🐈\n正文\n新\n结尾 标题 🐈 标题 🐈\n"
        );
        let same_line = call(
            &ctx,
            json!({"path": "c.md", "old_text": "标题 🐈", "new_text": "x", "line_hint": 4}),
        )
        .await;
        assert_eq!(
            same_line.content,
            "Error: line_hint 4 is ambiguous; old_text appears 2 times on that line."
        );
    }

    #[tokio::test]
    async fn ambiguous_matches_need_replace_all_occurrence_or_line_hint() {
        let (_dir, ctx) = ctx();
        let p = put(&ctx, "b.txt", "x = 1\ny = 2\nx = 1\nx = 1\nx = 1\n");
        let ambiguous = call(
            &ctx,
            json!({"path": "b.txt", "old_text": "x = 1", "new_text": "x = 9"}),
        )
        .await;
        assert_eq!(
            ambiguous.content,
            "Warning: old_text appears 4 times at line 1, line 3, line 4, .... Provide more \
             context, set occurrence to choose one match, or set replace_all=true."
        );
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "x = 1\ny = 2\nx = 1\nx = 1\nx = 1\n"
        );
        let second = call(
            &ctx,
            json!({"path": "b.txt", "old_text": "x = 1", "new_text": "x = 2", "occurrence": 2}),
        )
        .await;
        assert!(!second.is_error, "{}", second.content);
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "x = 1\ny = 2\nx = 2\nx = 1\nx = 1\n"
        );
        let hinted = call(
            &ctx,
            json!({"path": "b.txt", "old_text": "x = 1", "new_text": "x = 5", "line_hint": 5}),
        )
        .await;
        assert!(!hinted.is_error);
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "x = 1\ny = 2\nx = 2\nx = 1\nx = 5\n"
        );
        let guarded = call(&ctx, json!({"path": "b.txt", "old_text": "x = 1", "new_text": "z", "replace_all": true, "expected_replacements": 3})).await;
        assert_eq!(
            guarded.content,
            "Error: expected 3 replacements but would make 2."
        );
        let all = call(
            &ctx,
            json!({"path": "b.txt", "old_text": "x = 1", "new_text": "z", "replace_all": true}),
        )
        .await;
        assert!(!all.is_error);
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "z\ny = 2\nx = 2\nz\nx = 5\n"
        );
        let range = call(
            &ctx,
            json!({"path": "b.txt", "old_text": "z", "new_text": "w", "occurrence": 3}),
        )
        .await;
        assert_eq!(
            range.content,
            "Error: occurrence 3 is out of range; old_text appears 2 times."
        );
        let both = call(&ctx, json!({"path": "b.txt", "old_text": "z", "new_text": "w", "replace_all": true, "occurrence": 1})).await;
        assert_eq!(
            both.content,
            "Error: occurrence cannot be used with replace_all=true."
        );
    }

    #[tokio::test]
    async fn whitespace_tolerant_matching_and_not_found_diagnostics() {
        let (_dir, ctx) = ctx();
        let p = put(
            &ctx,
            "c.py",
            "def f():\n    return 1\n\ndef g():\n    return 2\n",
        );
        let loose = call(&ctx, json!({"path": "c.py", "old_text": "def g():\n  return 2", "new_text": "def g():\n    return 3"})).await;
        assert!(!loose.is_error, "{}", loose.content);
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "def f():\n    return 1\n\ndef g():\n    return 3\n"
        );
        let close = call(
            &ctx,
            json!({"path": "c.py", "old_text": "def g():\n    return 4", "new_text": "x"}),
        )
        .await;
        assert!(
            close.content.starts_with(
                "Error: old_text not found in c.py.\nBest match (50% similar) at line 4:"
            ) || close.content.contains("No similar text found"),
            "{}",
            close.content
        );
        let near = call(&ctx, json!({"path": "c.py", "old_text": "def f():\n    return 1\n\ndef g():\n    return 9", "new_text": "x"})).await;
        assert!(near.content.starts_with("Error: old_text not found in c.py.\nBest match (80% similar) at line 1:\n--- old_text (provided)\n+++ c.py (actual, line 1)\n@@ -2,4 +2,4 @@\n     return 1\n \n def g():\n-    return 9\n+    return 3"), "{}", near.content);
        let none = call(
            &ctx,
            json!({"path": "c.py", "old_text": "zzz", "new_text": "y"}),
        )
        .await;
        assert_eq!(
            none.content,
            "Error: old_text not found in c.py. No similar text found. Verify the file content."
        );
        assert!(none.is_error);
    }

    #[tokio::test]
    async fn creation_identity_and_missing_file_errors() {
        let (_dir, ctx) = ctx();
        let created = call(
            &ctx,
            json!({"path": "new/n.txt", "old_text": "", "new_text": "hi"}),
        )
        .await;
        assert_eq!(created.content, "Patch applied:\n- add new/n.txt (+1/-0)");
        let exists = call(
            &ctx,
            json!({"path": "new/n.txt", "old_text": "", "new_text": "again"}),
        )
        .await;
        assert_eq!(
            exists.content,
            "Error: Cannot create file — new/n.txt already exists and is not empty."
        );
        let same = call(
            &ctx,
            json!({"path": "new/n.txt", "old_text": "hi", "new_text": "hi"}),
        )
        .await;
        assert_eq!(
            same.content,
            "Error: new_text must be different from old_text."
        );
        let missing = call(
            &ctx,
            json!({"path": "gone.txt", "old_text": "a", "new_text": "b"}),
        )
        .await;
        assert_eq!(missing.content, "Error: File not found: gone.txt");
        let escape = call(
            &ctx,
            json!({"path": "../../x", "old_text": "", "new_text": "b"}),
        )
        .await;
        assert!(escape.content.contains("is outside allowed directory"));
    }

    #[tokio::test]
    async fn a_cjk_emoji_file_edit_reports_upstreams_summary() {
        let (dir, ctx) = ctx();
        let p = put(&ctx, "笔记/日记 📔.md", "第一行\n心情：😀\n👩‍👩‍👧‍👦 family\n");
        // Strings from nanobot 0.3.5's EditFileTool on the same files.
        let out = call(
            &ctx,
            json!({"path": "笔记/日记 📔.md", "old_text": "心情：😀",
                   "new_text": "心情：🇨🇳 e\u{301}\nשלום عربى"}),
        )
        .await;
        assert_eq!(
            out,
            ToolOutput::text("Patch applied:\n- update 笔记/日记 📔.md (+2/-1)")
        );
        let created = call(
            &ctx,
            json!({"path": "笔记/新 🆕.txt", "old_text": "", "new_text": "一\n二\n"}),
        )
        .await;
        assert_eq!(
            created.content,
            "Patch applied:\n- add 笔记/新 🆕.txt (+2/-0)"
        );
        let absolute = p.display().to_string();
        let removed = call(
            &ctx,
            json!({"path": absolute, "old_text": "👩‍👩‍👧‍👦 family\n", "new_text": ""}),
        )
        .await;
        assert_eq!(
            removed.content,
            "Patch applied:\n- update 笔记/日记 📔.md (+0/-1)"
        );
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "第一行\n心情：🇨🇳 e\u{301}\nשלום عربى\n"
        );
        let same = call(
            &ctx,
            json!({"path": "笔记/新 🆕.txt", "old_text": "二", "new_text": "二"}),
        )
        .await;
        assert_eq!(
            same.content,
            "Error: new_text must be different from old_text."
        );
        // Outside the workspace (unrestricted), the absolute path is shown.
        let open = ToolContext {
            sandbox: Sandbox::new(ctx.sandbox.root(), false),
            ..ctx.clone()
        };
        let outside = dir.path().join("外 🌍.txt");
        std::fs::write(&outside, "a\n").unwrap();
        let args = json!({"path": outside.display().to_string(), "old_text": "a", "new_text": "b"});
        let Value::Object(args) = args else {
            unreachable!("an object literal")
        };
        let out = EditFile.execute(&open, args).await;
        let shown = outside.canonicalize().unwrap();
        assert_eq!(
            out.content,
            format!("Patch applied:\n- update {} (+1/-1)", shown.display())
        );
    }
}

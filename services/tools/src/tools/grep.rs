//! `grep`: regex search over workspace files with ripgrep's matcher and searcher, in
//! upstream's three output modes (files_with_matches by default, content, count).

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::Searcher;
use grep_searcher::sinks::UTF8;
use serde_json::{Value, json};

use super::search::{self, MAX_RESULT_CHARS};
use crate::registry::{
    Args, Tool, ToolContext, ToolOutput, arg_bool, arg_i64, arg_str, blocking, object_schema,
};

/// Largest file searched during a directory walk.
const MAX_FILE_BYTES: u64 = 2_000_000;
/// Largest file searched when named explicitly.
const MAX_EXPLICIT_FILE_BYTES: u64 = 100_000_000;

/// Searches file contents.
#[derive(Debug, Default)]
pub struct Grep;

#[async_trait::async_trait]
impl Tool for Grep {
    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> &str {
        "Search file contents with a regex pattern. Default output_mode is files_with_matches \
         (file paths only); use content mode for matching lines with context. Skips binary \
         and files >2 MB. Supports glob/type filtering."
    }

    fn parameters(&self) -> Value {
        let limit =
            |d: &str| json!({"type": "integer", "minimum": 1, "maximum": 1000, "description": d});
        object_schema(
            json!({
                "pattern": {"type": "string", "minLength": 1, "description": "Regex or plain text pattern to search for"},
                "path": {"type": "string", "description": "File or directory to search in (default '.')"},
                "glob": {"type": "string", "description": "Optional file filter, e.g. '*.py' or 'tests/**/test_*.py'"},
                "type": {"type": "string", "description": "Optional file type shorthand, e.g. 'py', 'ts', 'md', 'json'"},
                "case_insensitive": {"type": "boolean", "description": "Case-insensitive search (default false)"},
                "fixed_strings": {"type": "boolean", "description": "Treat pattern as plain text instead of regex (default false)"},
                "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"],
                    "description": "content: matching lines with optional context; files_with_matches: only matching file paths; count: matching line counts per file. Default: files_with_matches"},
                "context_before": {"type": "integer", "minimum": 0, "maximum": 20, "description": "Number of lines of context before each match"},
                "context_after": {"type": "integer", "minimum": 0, "maximum": 20, "description": "Number of lines of context after each match"},
                "max_matches": limit("Legacy alias for head_limit in content mode"),
                "max_results": limit("Legacy alias for head_limit in files_with_matches or count mode"),
                "head_limit": {"type": "integer", "minimum": 0, "maximum": 1000,
                    "description": "Maximum number of results to return. In content mode this limits matching line blocks; in other modes it limits file entries. Default 250"},
                "offset": {"type": "integer", "minimum": 0, "maximum": 100000, "description": "Skip the first N results before applying head_limit"},
            }),
            &["pattern"],
        )
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn execute(&self, ctx: &ToolContext, args: Args) -> ToolOutput {
        let ctx = ctx.clone();
        blocking(self.name(), move || grep(&ctx, &args)).await
    }
}

/// What one search accumulates.
#[derive(Debug, Default)]
struct Found {
    blocks: Vec<String>,
    chars: usize,
    seen: usize,
    truncated: bool,
    size_truncated: bool,
    files: Vec<(String, f64, usize)>,
    skipped_binary: usize,
    skipped_large: usize,
    skipped_scope: usize,
}

fn grep(ctx: &ToolContext, args: &Args) -> ToolOutput {
    let pattern = arg_str(args, "pattern").unwrap_or_default();
    let path = arg_str(args, "path")
        .filter(|p| !p.is_empty())
        .unwrap_or(".");
    let mode = arg_str(args, "output_mode").unwrap_or("files_with_matches");
    let offset = arg_i64(args, "offset")
        .and_then(|o| usize::try_from(o).ok())
        .unwrap_or(0);
    let legacy = if mode == "content" {
        "max_matches"
    } else {
        "max_results"
    };
    let limit = search::limit(arg_i64(args, "head_limit"), arg_i64(args, legacy));
    let target = match ctx.sandbox.resolve(path) {
        Ok(target) => target,
        Err(message) => return ToolOutput::error(message),
    };
    let Ok(meta) = std::fs::metadata(&target) else {
        return ToolOutput::error(format!("Error: Path not found: {path}"));
    };
    if !meta.is_dir() && !meta.is_file() {
        return ToolOutput::error(format!("Error: Unsupported path: {path}"));
    }
    let matcher = match RegexMatcherBuilder::new()
        .case_insensitive(arg_bool(args, "case_insensitive"))
        .fixed_strings(arg_bool(args, "fixed_strings"))
        .line_terminator(Some(b'\n'))
        .build(pattern)
    {
        Ok(matcher) => matcher,
        Err(e) => return ToolOutput::error(format!("Error: invalid regex pattern: {e}")),
    };
    let (entries, max_bytes) = if meta.is_file() {
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let entry = search::Entry {
            path: target.clone(),
            rel: name,
            is_dir: false,
        };
        (vec![entry], MAX_EXPLICIT_FILE_BYTES)
    } else {
        (search::walk(&target), MAX_FILE_BYTES)
    };
    let context = |key| {
        arg_i64(args, key)
            .and_then(|c| usize::try_from(c).ok())
            .unwrap_or(0)
    };
    let (before, after) = (context("context_before"), context("context_after"));
    let glob = arg_str(args, "glob").filter(|g| !g.is_empty());
    let mut found = Found::default();
    for entry in entries.iter().filter(|e| !e.is_dir) {
        let name = entry
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if glob.is_some_and(|g| !search::match_glob(&entry.rel, &name, g)) {
            continue;
        }
        if !search::matches_type(&name, arg_str(args, "type")) {
            continue;
        }
        if !search::in_scope(&ctx.sandbox, &entry.path) {
            found.skipped_scope += 1;
            continue;
        }
        let Ok(size) = std::fs::metadata(&entry.path).map(|m| m.len()) else {
            found.skipped_binary += 1;
            continue;
        };
        if size > max_bytes {
            found.skipped_large += 1;
            continue;
        }
        let shown = search::display_path(&ctx.sandbox, entry);
        let text = match std::fs::read(&entry.path) {
            Ok(raw) if !search::is_binary(&raw) => String::from_utf8(raw).ok(),
            _ => None,
        };
        let Some(text) = text else {
            found.skipped_binary += 1;
            continue;
        };
        let hits = matching_lines(&matcher, &text);
        if hits.is_empty() {
            continue;
        }
        if mode != "content" {
            found
                .files
                .push((shown, search::mtime(&entry.path), hits.len()));
            continue;
        }
        add_blocks(
            &mut found,
            &shown,
            &text,
            &hits,
            (before, after),
            limit,
            offset,
        );
        if found.truncated || found.size_truncated {
            break;
        }
    }
    render(found, mode, pattern, path, limit, offset)
}

fn matching_lines(matcher: &RegexMatcher, text: &str) -> Vec<usize> {
    let mut hits = Vec::new();
    let sink = UTF8(|line_number, _line| {
        hits.push(usize::try_from(line_number).unwrap_or(usize::MAX));
        Ok(true)
    });
    // Searching an in-memory UTF-8 string cannot fail; an error just ends the file.
    let _ = Searcher::new().search_slice(matcher, text.as_bytes(), sink);
    hits
}

fn add_blocks(
    found: &mut Found,
    shown: &str,
    text: &str,
    hits: &[usize],
    (before, after): (usize, usize),
    limit: Option<usize>,
    offset: usize,
) {
    let lines: Vec<&str> = text.lines().collect();
    for &line in hits {
        found.seen += 1;
        if found.seen <= offset {
            continue;
        }
        if limit.is_some_and(|l| found.blocks.len() >= l) {
            found.truncated = true;
            return;
        }
        let start = line.saturating_sub(before).max(1);
        let end = (line + after).min(lines.len());
        let mut block = vec![format!("{shown}:{line}")];
        for n in start..=end {
            let marker = if n == line { '>' } else { ' ' };
            block.push(format!("{marker} {n}| {}", lines.get(n - 1).unwrap_or(&"")));
        }
        let block = block.join("\n");
        let separator = if found.blocks.is_empty() { 0 } else { 2 };
        if found.chars + separator + block.chars().count() > MAX_RESULT_CHARS {
            found.size_truncated = true;
            return;
        }
        found.chars += separator + block.chars().count();
        found.blocks.push(block);
    }
}

fn render(
    mut found: Found,
    mode: &str,
    pattern: &str,
    path: &str,
    limit: Option<usize>,
    offset: usize,
) -> ToolOutput {
    let none = format!("No matches found for pattern '{pattern}' in {path}");
    found
        .files
        .sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut truncated = found.truncated;
    let mut result = match mode {
        "content" if found.blocks.is_empty() => none,
        "content" => found.blocks.join("\n\n"),
        _ if found.files.is_empty() => none,
        _ => {
            let (page, more) = search::paginate(&found.files, limit, offset);
            truncated = more;
            let render = |(name, _, count): &(String, f64, usize)| {
                if mode == "count" {
                    format!("{name}: {count}")
                } else {
                    name.clone()
                }
            };
            page.iter().map(render).collect::<Vec<_>>().join("\n")
        }
    };
    let mut notes = Vec::new();
    if mode == "content" && found.size_truncated {
        notes.push("(output truncated due to size)".to_string());
    } else if mode == "content" && !truncated && offset > 0 && found.blocks.is_empty() {
        // Nothing past the offset: no pagination note, as upstream.
    } else if let Some(note) = search::pagination_note(limit, offset, truncated) {
        notes.push(note);
    }
    if found.skipped_binary > 0 {
        notes.push(format!(
            "(skipped {} binary/unreadable files)",
            found.skipped_binary
        ));
    }
    if found.skipped_large > 0 {
        notes.push(format!("(skipped {} large files)", found.skipped_large));
    }
    if found.skipped_scope > 0 {
        notes.push(format!(
            "(skipped {} files outside the search root)",
            found.skipped_scope
        ));
    }
    if mode == "count" && !found.files.is_empty() {
        let total: usize = found.files.iter().map(|f| f.2).sum();
        notes.push(format!(
            "(total matches: {total} in {} files)",
            found.files.len()
        ));
    }
    if !notes.is_empty() {
        result.push_str("\n\n");
        result.push_str(&notes.join("\n"));
    }
    if result.chars().count() > MAX_RESULT_CHARS {
        return ToolOutput::error(
            "Error: Search result exceeds output budget; narrow the search path or pattern.",
        );
    }
    ToolOutput::text(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::Sandbox;

    fn ctx() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::write(
            ws.join("src/a.rs"),
            "fn main() {\n    let token = 1;\n    println!(\"{token}\");\n}\n",
        )
        .unwrap();
        std::fs::write(ws.join("notes.md"), "a TOKEN here\n").unwrap();
        std::fs::write(ws.join(".git/config"), "token\n").unwrap();
        std::fs::write(ws.join("blob.bin"), b"token\0\x01").unwrap();
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

    async fn call(ctx: &ToolContext, args: Value) -> String {
        let Value::Object(args) = args else {
            panic!("args must be an object")
        };
        Grep.execute(ctx, args).await.content
    }

    #[tokio::test]
    async fn output_modes_follow_upstream_formats() {
        let (_dir, ctx) = ctx();
        assert_eq!(
            call(&ctx, json!({"pattern": "token"})).await,
            "src/a.rs\n\n(skipped 1 binary/unreadable files)"
        );
        assert_eq!(
            call(&ctx, json!({"pattern": "token", "case_insensitive": true, "output_mode": "count", "type": "rs"})).await,
            "src/a.rs: 2\n\n(total matches: 2 in 1 files)"
        );
        assert_eq!(
            call(&ctx, json!({"pattern": "let token", "output_mode": "content", "context_before": 1, "context_after": 1, "glob": "*.rs"})).await,
            "src/a.rs:2\n  1| fn main() {\n> 2|     let token = 1;\n  3|     println!(\"{token}\");"
        );
        assert_eq!(
            call(&ctx, json!({"pattern": "token", "output_mode": "content", "head_limit": 1, "glob": "*.rs"})).await,
            "src/a.rs:2\n> 2|     let token = 1;\n\n(pagination: limit=1, offset=0)"
        );
        assert_eq!(call(&ctx, json!({"pattern": "{token}", "fixed_strings": true, "path": "src/a.rs", "output_mode": "count"})).await, "src/a.rs: 1\n\n(total matches: 1 in 1 files)");
    }

    #[tokio::test]
    async fn errors_and_empty_results_use_upstream_text() {
        let (dir, ctx) = ctx();
        assert_eq!(
            call(&ctx, json!({"pattern": "absent"})).await,
            "No matches found for pattern 'absent' in .\n\n(skipped 1 binary/unreadable files)"
        );
        assert!(
            call(&ctx, json!({"pattern": "("}))
                .await
                .starts_with("Error: invalid regex pattern: ")
        );
        assert_eq!(
            call(&ctx, json!({"pattern": "x", "path": "nope"})).await,
            "Error: Path not found: nope"
        );
        std::fs::write(dir.path().join("secret.txt"), "token\n").unwrap();
        std::os::unix::fs::symlink(
            dir.path().join("secret.txt"),
            ctx.sandbox.root().join("leak.txt"),
        )
        .unwrap();
        let out = call(&ctx, json!({"pattern": "token", "glob": "*.txt"})).await;
        assert_eq!(
            out,
            "No matches found for pattern 'token' in .\n\n(skipped 1 files outside the search root)"
        );
    }
}

//! `find_files` (upstream HEAD, next to the seeds' `glob`): workspace-relative paths found by
//! path fragment (`query`: every whitespace-separated term, case-insensitive), `glob` and
//! `type`, sorted by path (or newest first), paged with upstream's notes.

use std::path::Path;

use serde_json::{Value, json};

use super::search::{self, Entry};
use crate::registry::{Args, Tool, ToolContext, ToolOutput, arg_bool, arg_i64, arg_str, blocking};

/// Paths returned when no `head_limit` is given (upstream `_DEFAULT_FILE_HEAD_LIMIT`).
const DEFAULT_LIMIT: usize = 200;

/// Finds files by path fragment, glob or type.
#[derive(Debug, Default)]
pub struct FindFiles;

#[async_trait::async_trait]
impl Tool for FindFiles {
    fn name(&self) -> &str {
        "find_files"
    }

    fn description(&self) -> &str {
        "Find workspace paths by name, glob, or file type. Returns relative paths and skips \
         dependency/build directories."
    }

    /// 0.3.5's schema (no `required`, other keys accepted and ignored).
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Search root (default '.')"},
                "query": {"type": "string", "description": "Case-insensitive path terms; all must match"},
                "glob": {"type": "string", "description": "Path filter, e.g. '*.py' or 'tests/**/test_*.py'"},
                "type": {"type": "string", "description": "File type, e.g. 'py', 'ts', 'md', or 'json'"},
                "include_dirs": {"type": "boolean", "description": "Include directories (default false)"},
                "sort": {"type": "string", "enum": ["path", "modified"], "description": "Sort order (default path)"},
                "head_limit": {"type": "integer", "minimum": 0, "maximum": 1000, "description": "Maximum paths (default 200; 0 for all)"},
                "offset": {"type": "integer", "minimum": 0, "maximum": 100000, "description": "Paths to skip before head_limit"},
            },
        })
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn execute(&self, ctx: &ToolContext, args: Args) -> ToolOutput {
        let ctx = ctx.clone();
        blocking(self.name(), move || find(&ctx, &args)).await
    }
}

fn find(ctx: &ToolContext, args: &Args) -> ToolOutput {
    let path = arg_str(args, "path")
        .filter(|p| !p.is_empty())
        .unwrap_or(".");
    let query = arg_str(args, "query").unwrap_or_default().to_lowercase();
    let glob = arg_str(args, "glob").filter(|g| !g.is_empty());
    let file_type = arg_str(args, "type").filter(|t| !t.trim().is_empty());
    let include_dirs = arg_bool(args, "include_dirs");
    let sort = arg_str(args, "sort").unwrap_or("path");
    if sort != "path" && sort != "modified" {
        return ToolOutput::error("Error: sort must be 'path' or 'modified'");
    }
    let limit = match arg_i64(args, "head_limit") {
        Some(0) => None,
        Some(n) => usize::try_from(n).ok(),
        None => Some(DEFAULT_LIMIT),
    };
    let offset = arg_i64(args, "offset")
        .and_then(|o| usize::try_from(o).ok())
        .unwrap_or(0);
    let target = match ctx.sandbox.resolve(path) {
        Ok(target) => target,
        Err(message) => return ToolOutput::error(message),
    };
    let entries = match std::fs::metadata(&target) {
        Err(_) => return ToolOutput::error(format!("Error: Path not found: {path}")),
        Ok(meta) if meta.is_dir() => search::walk(&target),
        Ok(meta) if meta.is_file() => vec![single(&target)],
        Ok(_) => return ToolOutput::error(format!("Error: Unsupported path: {path}")),
    };
    let terms: Vec<&str> = query.split_whitespace().collect();
    let mut matches: Vec<(String, f64)> = Vec::new();
    for entry in entries {
        if (entry.is_dir && !include_dirs) || !search::in_scope(&ctx.sandbox, &entry.path) {
            continue;
        }
        let name = entry
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if glob.is_some_and(|g| !search::match_glob(&entry.rel, &name, g)) {
            continue;
        }
        if file_type.is_some() && (entry.is_dir || !search::matches_type(&name, file_type)) {
            continue;
        }
        let shown = search::display_path(&ctx.sandbox, &entry);
        let haystack = shown.to_lowercase();
        if !terms.iter().all(|t| haystack.contains(t)) {
            continue;
        }
        let suffix = if entry.is_dir { "/" } else { "" };
        matches.push((format!("{shown}{suffix}"), search::mtime(&entry.path)));
    }
    if sort == "modified" {
        matches.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    } else {
        matches.sort_by(|a, b| a.0.cmp(&b.0));
    }
    let paths: Vec<String> = matches.into_iter().map(|(p, _)| p).collect();
    let (page, truncated) = search::paginate(&paths, limit, offset);
    if page.is_empty() {
        return ToolOutput::text("No files found");
    }
    let mut out = page.join("\n");
    if let Some(note) = search::pagination_note(limit, offset, truncated) {
        out.push_str(&format!("\n\n{note}"));
    }
    ToolOutput::text(out)
}

fn single(file: &Path) -> Entry {
    Entry {
        rel: file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        is_dir: false,
        path: file.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::Sandbox;

    async fn call(ctx: &ToolContext, args: Value) -> ToolOutput {
        let Value::Object(args) = args else {
            panic!("args must be an object")
        };
        FindFiles.execute(ctx, args).await
    }

    #[tokio::test]
    async fn finds_workspace_relative_paths_by_fragment_glob_and_type_with_pages() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        for file in [
            "src/agent/loop.py",
            "src/agent/runner.py",
            "src/tools/shell.rs",
            "tests/test_loop.py",
            "node_modules/x/loop.py",
            "README.md",
        ] {
            let path = ws.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x").unwrap();
        }
        let ctx = ToolContext {
            sandbox: Sandbox::new(ws, true),
            session_key: "cli:direct".into(),
            origin: Default::default(),
            file_reads: Vec::new(),
        };
        let text = |o: ToolOutput| {
            assert!(!o.is_error, "{}", o.content);
            o.content
        };
        assert_eq!(
            text(call(&ctx, json!({"query": "AGENT py"})).await),
            "src/agent/loop.py\nsrc/agent/runner.py"
        );
        assert_eq!(
            text(call(&ctx, json!({"glob": "*.py", "path": "src"})).await),
            "src/agent/loop.py\nsrc/agent/runner.py"
        );
        assert_eq!(
            text(call(&ctx, json!({"type": "rust"})).await),
            "src/tools/shell.rs"
        );
        assert_eq!(
            text(call(&ctx, json!({"query": "loop", "head_limit": 1})).await),
            "src/agent/loop.py\n\n(pagination: limit=1, offset=0)"
        );
        assert_eq!(
            text(call(&ctx, json!({"query": "agent", "include_dirs": true})).await),
            "src/agent/\nsrc/agent/loop.py\nsrc/agent/runner.py"
        );
        assert_eq!(
            text(call(&ctx, json!({"query": "zzz"})).await),
            "No files found"
        );
        assert!(call(&ctx, json!({"path": "/etc"})).await.is_error);
    }
}

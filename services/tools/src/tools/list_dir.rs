//! `list_dir`: a directory's entries (`📁`/`📄`), or a recursive listing of relative paths,
//! skipping upstream's noise directories.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::registry::{
    Args, Tool, ToolContext, ToolOutput, arg_bool, arg_i64, arg_str, blocking, object_schema,
};

/// Entries returned when no `max_entries` is given.
const DEFAULT_MAX: usize = 200;
/// Most entries a recursive walk visits (keeps a huge tree from stalling a worker).
const WALK_LIMIT: usize = 100_000;
/// Directories never listed.
pub const IGNORE_DIRS: &[&str] = &[
    ".git",
    "node_modules",
    "__pycache__",
    ".venv",
    "venv",
    "dist",
    "build",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".coverage",
    "htmlcov",
];

/// Lists a directory.
#[derive(Debug, Default)]
pub struct ListDir;

#[async_trait::async_trait]
impl Tool for ListDir {
    fn name(&self) -> &str {
        "list_dir"
    }

    fn description(&self) -> &str {
        "List the contents of a directory. Set recursive=true to explore nested structure. \
         Common noise directories (.git, node_modules, __pycache__, etc.) are auto-ignored."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "path": {"type": "string", "description": "The directory path to list"},
                "recursive": {"type": "boolean", "description": "Recursively list all files (default false)"},
                "max_entries": {"type": "integer", "minimum": 1,
                    "description": "Maximum entries to return (default 200)"},
            }),
            &["path"],
        )
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn execute(&self, ctx: &ToolContext, args: Args) -> ToolOutput {
        let ctx = ctx.clone();
        blocking(self.name(), move || list(&ctx, &args)).await
    }
}

fn list(ctx: &ToolContext, args: &Args) -> ToolOutput {
    let path = arg_str(args, "path").unwrap_or_default();
    let cap = arg_i64(args, "max_entries")
        .and_then(|m| usize::try_from(m).ok())
        .unwrap_or(DEFAULT_MAX);
    let dp = match ctx.sandbox.resolve(path) {
        Ok(dp) => dp,
        Err(message) => return ToolOutput::error(message),
    };
    match std::fs::metadata(&dp) {
        Err(_) => return ToolOutput::error(format!("Error: Directory not found: {path}")),
        Ok(meta) if !meta.is_dir() => {
            return ToolOutput::error(format!("Error: Not a directory: {path}"));
        }
        Ok(_) => {}
    }
    let listed = if arg_bool(args, "recursive") {
        walk(&dp)
    } else {
        flat(&dp)
    };
    let entries = match listed {
        Ok(entries) => entries,
        Err(e) => return ToolOutput::error(format!("Error listing directory: {e}")),
    };
    if entries.is_empty() {
        return ToolOutput::text(format!("Directory {path} is empty"));
    }
    let total = entries.len();
    let mut out = entries.into_iter().take(cap).collect::<Vec<_>>().join("\n");
    if total > cap {
        out.push_str(&format!(
            "\n\n(truncated, showing first {cap} of {total} entries)"
        ));
    }
    ToolOutput::text(out)
}

fn sorted_children(dir: &Path) -> std::io::Result<Vec<(PathBuf, bool)>> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if IGNORE_DIRS.iter().any(|d| name == *d) {
            continue;
        }
        // `is_dir` follows symlinks for display, as upstream; walking never does.
        let is_dir = entry.path().is_dir();
        children.push((entry.path(), is_dir));
    }
    children.sort();
    Ok(children)
}

fn flat(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    for (path, is_dir) in sorted_children(dir)? {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push(if is_dir {
            format!("📁 {name}")
        } else {
            format!("📄 {name}")
        });
    }
    Ok(out)
}

fn walk(root: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for (path, is_dir) in sorted_children(&dir)? {
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            let is_real_dir = std::fs::symlink_metadata(&path)
                .map(|m| m.is_dir())
                .unwrap_or(false);
            if is_real_dir {
                stack.push(path);
            }
            out.push(if is_dir { format!("{rel}/") } else { rel });
            if out.len() >= WALK_LIMIT {
                out.sort_by(|a, b| components(a).cmp(&components(b)));
                return Ok(out);
            }
        }
    }
    out.sort_by(|a, b| components(a).cmp(&components(b)));
    Ok(out)
}

/// Sort key of a relative path: by components, as Python sorts `Path` objects.
fn components(rel: &str) -> Vec<&str> {
    rel.trim_end_matches('/').split('/').collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::Sandbox;

    fn ctx() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("src/deep")).unwrap();
        std::fs::create_dir_all(ws.join("node_modules/pkg")).unwrap();
        std::fs::write(ws.join("b.txt"), "b").unwrap();
        std::fs::write(ws.join("a.txt"), "a").unwrap();
        std::fs::write(ws.join("src/deep/x.rs"), "x").unwrap();
        std::fs::write(ws.join("src/main.rs"), "m").unwrap();
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
        ListDir.execute(ctx, args).await
    }

    #[tokio::test]
    async fn lists_flat_and_recursive_skipping_noise() {
        let (_dir, ctx) = ctx();
        assert_eq!(
            call(&ctx, json!({"path": "."})).await.content,
            "📄 a.txt\n📄 b.txt\n📁 src"
        );
        assert_eq!(
            call(&ctx, json!({"path": ".", "recursive": true}))
                .await
                .content,
            "a.txt\nb.txt\nsrc/\nsrc/deep/\nsrc/deep/x.rs\nsrc/main.rs"
        );
        assert_eq!(
            call(
                &ctx,
                json!({"path": ".", "recursive": true, "max_entries": 2})
            )
            .await
            .content,
            "a.txt\nb.txt\n\n(truncated, showing first 2 of 6 entries)"
        );
    }

    #[tokio::test]
    async fn reports_empty_missing_and_non_directories() {
        let (_dir, ctx) = ctx();
        std::fs::create_dir(ctx.sandbox.root().join("empty")).unwrap();
        assert_eq!(
            call(&ctx, json!({"path": "empty"})).await.content,
            "Directory empty is empty"
        );
        assert_eq!(
            call(&ctx, json!({"path": "nope"})).await.content,
            "Error: Directory not found: nope"
        );
        assert_eq!(
            call(&ctx, json!({"path": "a.txt"})).await.content,
            "Error: Not a directory: a.txt"
        );
        let escape = call(&ctx, json!({"path": "/"})).await;
        assert!(escape.is_error && escape.content.contains("outside allowed directory"));
    }
}

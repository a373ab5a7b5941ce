//! `glob`: paths matching a glob pattern, newest first (upstream v0.1.5's tool).

use serde_json::{Value, json};

use super::search::{self, MAX_RESULT_CHARS};
use crate::registry::{
    Args, Tool, ToolContext, ToolOutput, arg_i64, arg_str, blocking, object_schema,
};

/// Finds paths by glob pattern.
#[derive(Debug, Default)]
pub struct Glob;

#[async_trait::async_trait]
impl Tool for Glob {
    fn name(&self) -> &str {
        "glob"
    }

    fn description(&self) -> &str {
        "Find files matching a glob pattern (e.g. '*.py', 'tests/**/test_*.py'). Results are \
         sorted by modification time (newest first). Skips .git, node_modules, __pycache__, \
         and other noise directories."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "pattern": {"type": "string", "minLength": 1,
                    "description": "Glob pattern to match, e.g. '*.py' or 'tests/**/test_*.py'"},
                "path": {"type": "string", "description": "Directory to search from (default '.')"},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 1000,
                    "description": "Legacy alias for head_limit"},
                "head_limit": {"type": "integer", "minimum": 0, "maximum": 1000,
                    "description": "Maximum number of matches to return (default 250)"},
                "offset": {"type": "integer", "minimum": 0, "maximum": 100000,
                    "description": "Skip the first N matching entries before returning results"},
                "entry_type": {"type": "string", "enum": ["files", "dirs", "both"],
                    "description": "Whether to match files, directories, or both (default files)"},
            }),
            &["pattern"],
        )
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn execute(&self, ctx: &ToolContext, args: Args) -> ToolOutput {
        let ctx = ctx.clone();
        blocking(self.name(), move || glob(&ctx, &args)).await
    }
}

fn glob(ctx: &ToolContext, args: &Args) -> ToolOutput {
    let pattern = arg_str(args, "pattern").unwrap_or_default();
    let path = arg_str(args, "path")
        .filter(|p| !p.is_empty())
        .unwrap_or(".");
    let limit = search::limit(arg_i64(args, "head_limit"), arg_i64(args, "max_results"));
    let offset = arg_i64(args, "offset")
        .and_then(|o| usize::try_from(o).ok())
        .unwrap_or(0);
    let entry_type = arg_str(args, "entry_type").unwrap_or("files");
    let root = match ctx.sandbox.resolve(path) {
        Ok(root) => root,
        Err(message) => return ToolOutput::error(message),
    };
    match std::fs::metadata(&root) {
        Err(_) => return ToolOutput::error(format!("Error: Path not found: {path}")),
        Ok(meta) if !meta.is_dir() => {
            return ToolOutput::error(format!("Error: Not a directory: {path}"));
        }
        Ok(_) => {}
    }
    let (files, dirs) = (entry_type != "dirs", entry_type != "files");
    let mut matches: Vec<(String, f64)> = Vec::new();
    for entry in search::walk(&root) {
        if (entry.is_dir && !dirs) || (!entry.is_dir && !files) {
            continue;
        }
        let name = entry
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !search::match_glob(&entry.rel, &name, pattern) {
            continue;
        }
        let mut shown = search::display_path(&ctx.sandbox, &entry);
        if entry.is_dir {
            shown.push('/');
        }
        matches.push((shown, search::mtime(&entry.path)));
    }
    if matches.is_empty() {
        return ToolOutput::text(format!("No paths matched pattern '{pattern}' in {path}"));
    }
    matches.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let ordered: Vec<String> = matches.into_iter().map(|(name, _)| name).collect();
    let (page, truncated) = search::paginate(&ordered, limit, offset);
    let mut out = page.join("\n");
    if out.chars().count() > MAX_RESULT_CHARS {
        return ToolOutput::error(
            "Error: Search result exceeds output budget; narrow the search path or pattern.",
        );
    }
    if let Some(note) = search::pagination_note(limit, offset, truncated) {
        out.push_str(&format!("\n\n{note}"));
    }
    ToolOutput::text(out)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::sandbox::Sandbox;

    fn touch(path: &std::path::Path, age_secs: u64) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "x").unwrap();
        let when = SystemTime::now() - Duration::from_secs(age_secs);
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(when)
            .unwrap();
    }

    async fn call(ctx: &ToolContext, args: Value) -> ToolOutput {
        let Value::Object(args) = args else {
            panic!("args must be an object")
        };
        Glob.execute(ctx, args).await
    }

    #[tokio::test]
    async fn matches_newest_first_skipping_noise_with_pagination() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        touch(&ws.join("old.py"), 300);
        touch(&ws.join("src/new.py"), 10);
        touch(&ws.join("src/mid.py"), 100);
        touch(&ws.join("node_modules/dep.py"), 1);
        touch(&ws.join("notes.md"), 1);
        let ctx = ToolContext {
            sandbox: Sandbox::new(&ws, true),
            session_key: "s".into(),
            origin: Default::default(),
            file_reads: Vec::new(),
        };
        assert_eq!(
            call(&ctx, json!({"pattern": "*.py"})).await.content,
            "src/new.py\nsrc/mid.py\nold.py"
        );
        assert_eq!(
            call(
                &ctx,
                json!({"pattern": "*.py", "head_limit": 1, "offset": 1})
            )
            .await
            .content,
            "src/mid.py\n\n(pagination: limit=1, offset=1)"
        );
        assert_eq!(
            call(&ctx, json!({"pattern": "src/*.py", "path": "."}))
                .await
                .content,
            "src/new.py\nsrc/mid.py"
        );
        assert_eq!(
            call(&ctx, json!({"pattern": "sr*", "entry_type": "dirs"}))
                .await
                .content,
            "src/"
        );
        assert_eq!(
            call(&ctx, json!({"pattern": "*.rs"})).await.content,
            "No paths matched pattern '*.rs' in ."
        );
        assert_eq!(
            call(&ctx, json!({"pattern": "*", "path": "nope"}))
                .await
                .content,
            "Error: Path not found: nope"
        );
        assert!(
            call(&ctx, json!({"pattern": "*", "path": "/etc"}))
                .await
                .content
                .contains("outside allowed directory")
        );
    }
}

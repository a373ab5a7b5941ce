//! `write_file`: writes a whole file, creating parent directories.

use nanobot_runtime::fs::write_atomic;
use serde_json::{Value, json};

use crate::registry::{Args, Tool, ToolContext, ToolOutput, arg_str, blocking, object_schema};

/// Writes content to a file.
#[derive(Debug, Default)]
pub struct WriteFile;

#[async_trait::async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> &str {
        "Create a new file or intentionally replace an entire file with the provided content. \
         Overwrites existing files and creates parent directories as needed. For code changes \
         or partial edits, prefer apply_patch; use edit_file only for small exact replacements."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "path": {"type": "string", "description": "The file path to write to"},
                "content": {"type": "string", "description": "The content to write"},
            }),
            &["path", "content"],
        )
    }

    async fn execute(&self, ctx: &ToolContext, args: Args) -> ToolOutput {
        let ctx = ctx.clone();
        blocking(self.name(), move || write(&ctx, &args)).await
    }
}

fn write(ctx: &ToolContext, args: &Args) -> ToolOutput {
    let path = arg_str(args, "path").unwrap_or_default();
    let content = arg_str(args, "content").unwrap_or_default();
    let fp = match ctx.sandbox.resolve(path) {
        Ok(fp) => fp,
        Err(message) => return ToolOutput::error(message),
    };
    let written = write_atomic(&fp, content.as_bytes());
    match written {
        Ok(()) => ToolOutput::text(format!(
            "Successfully wrote {} characters to {}",
            content.chars().count(),
            fp.display()
        )),
        Err(e) => ToolOutput::error(format!("Error writing file: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

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
        WriteFile.execute(ctx, args).await
    }

    #[tokio::test]
    async fn writes_creating_parents_and_counts_characters() {
        let (_dir, ctx) = ctx();
        let out = call(&ctx, json!({"path": "a/b/c.txt", "content": "héllo"})).await;
        let target = ctx.sandbox.root().join("a/b/c.txt");
        assert_eq!(
            out.content,
            format!("Successfully wrote 5 characters to {}", target.display())
        );
        assert_eq!(std::fs::read_to_string(target).unwrap(), "héllo");
    }

    #[tokio::test]
    async fn refuses_escapes_through_dotdot_and_symlinks() {
        let (dir, ctx) = ctx();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        symlink(&outside, ctx.sandbox.root().join("out")).unwrap();
        symlink(outside.join("planted"), ctx.sandbox.root().join("dangling")).unwrap();
        for path in ["../x.txt", "out/x.txt", "dangling", "/tmp/x.txt"] {
            let out = call(&ctx, json!({"path": path, "content": "pwn"})).await;
            assert!(
                out.is_error && out.content.contains("is outside allowed directory"),
                "{path}: {}",
                out.content
            );
        }
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "nothing was written outside"
        );
        let dir_target = call(&ctx, json!({"path": ".", "content": "x"})).await;
        assert!(
            dir_target.content.starts_with("Error writing file: "),
            "{}",
            dir_target.content
        );
    }
}

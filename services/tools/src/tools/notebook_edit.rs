//! `notebook_edit`: replaces, inserts (after the target) or deletes one cell of a Jupyter
//! notebook, keeping cell bookkeeping (ids, outputs, execution counts) valid; inserting
//! into a missing notebook creates it. Paths go through the workspace sandbox.

use nanobot_runtime::fs::write_atomic;
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::registry::{
    Args, Tool, ToolContext, ToolOutput, arg_i64, arg_str, blocking, object_schema,
};

/// Edits notebook cells.
#[derive(Debug, Default)]
pub struct NotebookEdit;

#[async_trait::async_trait]
impl Tool for NotebookEdit {
    fn name(&self) -> &str {
        "notebook_edit"
    }

    fn description(&self) -> &str {
        "Edit a Jupyter notebook (.ipynb) at the cell level: replace a cell's source, insert \
         a new cell after a position, or delete a cell. Prefer this over edit_file for \
         notebook work: it operates on cells (replace/insert/delete by index) instead of raw \
         JSON text, so cell bookkeeping (ids, outputs, execution_count) stays correct. Modes: \
         replace (default) replaces cell content, insert adds a new cell after the target \
         index, delete removes the cell at the index. cell_index is 0-based."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "path": {"type": "string", "description": "Path to the .ipynb notebook file"},
                "cell_index": {"type": "integer", "minimum": 0,
                    "description": "0-based index of the cell to edit"},
                "new_source": {"type": "string", "description": "New source content for the cell"},
                "cell_type": {"type": "string", "enum": ["code", "markdown"],
                    "description": "Cell type: 'code' or 'markdown' (default: code)"},
                "edit_mode": {"type": "string", "enum": ["replace", "insert", "delete"],
                    "description": "Mode: 'replace' (default), 'insert' (after target), or 'delete'"},
            }),
            &["path", "cell_index"],
        )
    }

    async fn execute(&self, ctx: &ToolContext, args: Args) -> ToolOutput {
        let ctx = ctx.clone();
        blocking(self.name(), move || edit(&ctx, &args)).await
    }
}

fn edit(ctx: &ToolContext, args: &Args) -> ToolOutput {
    let path = arg_str(args, "path").unwrap_or_default();
    let index = usize::try_from(arg_i64(args, "cell_index").unwrap_or(0)).unwrap_or(0);
    let source = arg_str(args, "new_source").unwrap_or_default();
    let requested_type = arg_str(args, "cell_type");
    let mode = arg_str(args, "edit_mode").unwrap_or("replace");
    if path.is_empty() {
        return ToolOutput::error("Error: path is required");
    }
    if !path.ends_with(".ipynb") {
        return ToolOutput::error(
            "Error: notebook_edit only works on .ipynb files. Use edit_file for other files.",
        );
    }
    let fp = match ctx.sandbox.resolve(path) {
        Ok(fp) => fp,
        Err(message) => return ToolOutput::error(message),
    };
    let cell_type = requested_type.unwrap_or("code");
    if !fp.exists() {
        if mode != "insert" {
            return ToolOutput::error(format!("Error: File not found: {path}"));
        }
        let notebook = json!({
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {
                "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                "language_info": {"name": "python"},
            },
            "cells": [new_cell(source, cell_type, true)],
        });
        if let Some(parent) = fp.parent()
            && let Err(e) = std::fs::create_dir_all(parent)
        {
            return ToolOutput::error(format!("Error editing notebook: {e}"));
        }
        return save(
            &fp,
            &notebook,
            format!("Successfully created {} with 1 cell", fp.display()),
        );
    }
    let mut notebook = match std::fs::read(&fp).map(|raw| serde_json::from_slice::<Value>(&raw)) {
        Ok(Ok(Value::Object(notebook))) => notebook,
        Ok(Ok(_)) => {
            return ToolOutput::error("Error: Failed to parse notebook: not a JSON object");
        }
        Ok(Err(e)) => return ToolOutput::error(format!("Error: Failed to parse notebook: {e}")),
        Err(e) => return ToolOutput::error(format!("Error editing notebook: {e}")),
    };
    let with_ids = notebook
        .get("nbformat")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        >= 4
        && notebook
            .get("nbformat_minor")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            >= 5;
    let mut cells = match notebook.remove("cells") {
        Some(Value::Array(cells)) => cells,
        _ => Vec::new(),
    };
    let out_of_range = |len: usize| {
        ToolOutput::error(format!(
            "Error: cell_index {index} out of range (notebook has {len} cells)"
        ))
    };
    let message = match mode {
        "delete" => {
            if index >= cells.len() {
                return out_of_range(cells.len());
            }
            cells.remove(index);
            format!("Successfully deleted cell {index} from {}", fp.display())
        }
        "insert" => {
            let at = (index + 1).min(cells.len());
            cells.insert(at, new_cell(source, cell_type, with_ids));
            format!(
                "Successfully inserted cell at index {at} in {}",
                fp.display()
            )
        }
        _ => {
            let len = cells.len();
            let Some(Value::Object(cell)) = cells.get_mut(index) else {
                return out_of_range(len);
            };
            cell.insert("source".into(), Value::String(source.to_string()));
            // Only an explicit cell_type converts the cell (a missing one keeps it).
            if let Some(kind) = requested_type {
                retype(cell, kind);
            }
            format!("Successfully edited cell {index} in {}", fp.display())
        }
    };
    notebook.insert("cells".into(), Value::Array(cells));
    save(&fp, &Value::Object(notebook), message)
}

fn new_cell(source: &str, cell_type: &str, with_id: bool) -> Value {
    let mut cell = Map::new();
    cell.insert("cell_type".into(), json!(cell_type));
    cell.insert("source".into(), json!(source));
    cell.insert("metadata".into(), json!({}));
    if cell_type == "code" {
        cell.insert("outputs".into(), json!([]));
        cell.insert("execution_count".into(), Value::Null);
    }
    if with_id {
        let id = uuid::Uuid::new_v4().simple().to_string();
        cell.insert("id".into(), json!(id[..8]));
    }
    Value::Object(cell)
}

/// Changes a cell's type, adding or dropping what only code cells carry.
fn retype(cell: &mut Map<String, Value>, kind: &str) {
    if cell.get("cell_type").and_then(Value::as_str) == Some(kind) {
        return;
    }
    cell.insert("cell_type".into(), json!(kind));
    if kind == "code" {
        cell.entry("outputs").or_insert_with(|| json!([]));
        cell.entry("execution_count").or_insert(Value::Null);
    } else {
        cell.remove("outputs");
        cell.remove("execution_count");
    }
}

/// Writes the notebook as upstream does (`json.dumps(nb, indent=1, ensure_ascii=False)`).
fn save(fp: &Path, notebook: &Value, message: String) -> ToolOutput {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    if let Err(e) = serde::Serialize::serialize(notebook, &mut serializer) {
        return ToolOutput::error(format!("Error editing notebook: {e}"));
    }
    match write_atomic(fp, &out) {
        Ok(()) => ToolOutput::text(message),
        Err(e) => ToolOutput::error(format!("Error editing notebook: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use crate::sandbox::Sandbox;

    fn setup() -> (tempfile::TempDir, ToolContext, Registry) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let ctx = ToolContext {
            sandbox: Sandbox::new(&ws, true),
            session_key: "s".into(),
            origin: Default::default(),
            file_reads: Vec::new(),
        };
        let mut registry = Registry::default();
        registry.register(std::sync::Arc::new(NotebookEdit));
        (dir, ctx, registry)
    }

    async fn call(registry: &Registry, ctx: &ToolContext, args: Value) -> ToolOutput {
        registry.call(ctx, "notebook_edit", &args.to_string()).await
    }

    fn cells(ctx: &ToolContext, name: &str) -> Vec<Value> {
        let raw = std::fs::read_to_string(ctx.sandbox.root().join(name)).unwrap();
        let notebook: Value = serde_json::from_str(&raw).unwrap();
        notebook["cells"].as_array().unwrap().clone()
    }

    #[tokio::test]
    async fn inserts_replaces_and_deletes_cells_keeping_bookkeeping() {
        let (_dir, ctx, registry) = setup();
        let nb = ctx.sandbox.root().join("a.ipynb");
        let created = call(
            &registry,
            &ctx,
            json!({"path": "a.ipynb", "cell_index": 0,
            "new_source": "print(1)", "edit_mode": "insert"}),
        )
        .await;
        assert_eq!(
            created.content,
            format!("Successfully created {} with 1 cell", nb.display())
        );
        let raw = std::fs::read_to_string(&nb).unwrap();
        assert!(
            raw.starts_with("{\n \"cells\": [\n  {\n"),
            "indent=1: {raw}"
        );

        let inserted = call(
            &registry,
            &ctx,
            json!({"path": "a.ipynb", "cell_index": 0,
            "new_source": "# Title", "cell_type": "markdown", "edit_mode": "insert"}),
        )
        .await;
        assert_eq!(
            inserted.content,
            format!("Successfully inserted cell at index 1 in {}", nb.display())
        );
        let now = cells(&ctx, "a.ipynb");
        assert_eq!(now.len(), 2);
        assert_eq!(now[1]["cell_type"], "markdown");
        assert!(now[1].get("outputs").is_none());
        assert_eq!(now[1]["id"].as_str().unwrap().len(), 8);
        assert_eq!(now[0]["outputs"], json!([]));
        assert_eq!(now[0]["execution_count"], Value::Null);

        // Replace keeps a markdown cell markdown unless told otherwise.
        let replaced = call(
            &registry,
            &ctx,
            json!({"path": "a.ipynb", "cell_index": 1,
            "new_source": "# New title"}),
        )
        .await;
        assert_eq!(
            replaced.content,
            format!("Successfully edited cell 1 in {}", nb.display())
        );
        assert_eq!(cells(&ctx, "a.ipynb")[1]["cell_type"], "markdown");
        let converted = call(
            &registry,
            &ctx,
            json!({"path": "a.ipynb", "cell_index": 1,
            "new_source": "x = 2", "cell_type": "code"}),
        )
        .await;
        assert!(!converted.is_error);
        let now = cells(&ctx, "a.ipynb");
        assert_eq!(
            (now[1]["cell_type"].as_str(), now[1]["source"].as_str()),
            (Some("code"), Some("x = 2"))
        );
        assert_eq!(now[1]["outputs"], json!([]));

        let deleted = call(
            &registry,
            &ctx,
            json!({"path": "a.ipynb", "cell_index": 0, "edit_mode": "delete"}),
        )
        .await;
        assert_eq!(
            deleted.content,
            format!("Successfully deleted cell 0 from {}", nb.display())
        );
        assert_eq!(cells(&ctx, "a.ipynb")[0]["source"], "x = 2");
    }

    #[tokio::test]
    async fn refuses_bad_targets_with_upstreams_errors() {
        let (dir, ctx, registry) = setup();
        std::fs::write(ctx.sandbox.root().join("one.ipynb"), r#"{"nbformat": 4, "nbformat_minor": 4, "cells": [{"cell_type": "code", "source": "a"}]}"#).unwrap();
        std::fs::write(ctx.sandbox.root().join("bad.ipynb"), "{not json").unwrap();
        let cases = [
            (
                json!({"path": "one.ipynb", "cell_index": 5}),
                "Error: cell_index 5 out of range (notebook has 1 cells)",
            ),
            (
                json!({"path": "one.ipynb", "cell_index": 1, "edit_mode": "delete"}),
                "Error: cell_index 1 out of range (notebook has 1 cells)",
            ),
            (
                json!({"path": "missing.ipynb", "cell_index": 0}),
                "Error: File not found: missing.ipynb",
            ),
            (
                json!({"path": "notes.txt", "cell_index": 0}),
                "Error: notebook_edit only works on .ipynb files. Use edit_file for other files.",
            ),
        ];
        for (args, expected) in cases {
            let out = call(&registry, &ctx, args.clone()).await;
            assert_eq!(out, ToolOutput::error(expected), "{args}");
        }
        let bad = call(
            &registry,
            &ctx,
            json!({"path": "bad.ipynb", "cell_index": 0}),
        )
        .await;
        assert!(
            bad.content.starts_with("Error: Failed to parse notebook: "),
            "{}",
            bad.content
        );
        let invalid = call(
            &registry,
            &ctx,
            json!({"path": "one.ipynb", "cell_index": 0, "edit_mode": "move"}),
        )
        .await;
        assert!(
            invalid.content.starts_with(
                "Error: Invalid parameters for tool 'notebook_edit': edit_mode must be one of"
            ),
            "{}",
            invalid.content
        );

        // Older notebooks get no cell ids; the sandbox confines the path.
        call(
            &registry,
            &ctx,
            json!({"path": "one.ipynb", "cell_index": 0, "new_source": "b", "edit_mode": "insert"}),
        )
        .await;
        assert!(cells(&ctx, "one.ipynb")[1].get("id").is_none());
        let outside = dir.path().join("out.ipynb");
        let escape = call(
            &registry,
            &ctx,
            json!({"path": "../out.ipynb", "cell_index": 0, "edit_mode": "insert"}),
        )
        .await;
        assert!(
            escape.is_error && escape.content.contains("is outside allowed directory"),
            "{}",
            escape.content
        );
        assert!(!outside.exists());
    }
}

//! Oversized tool results (upstream `maybe_persist_tool_result`, reference §6.5): a result
//! longer than `maxToolResultChars` (any tool but `read_file`, the way back to a saved result)
//! is written to `<workspace>/.nanobot/tool-results/<session>/<call id>.txt` (`.json` for text
//! blocks) and the model gets upstream's reference: the saved path, the original size and a
//! 1,200-character preview. Buckets (one per session) older than 7 days, or beyond the newest
//! 32, are deleted.
//!
//! The file is written atomically (temp file, fsync, rename) and only when missing, so a turn
//! redone after a SIGKILL finds the same path and writes nothing twice; a kill mid-write leaves
//! at most a hidden temp file.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::history::truncate_text;

/// Characters of a persisted result shown to the model (upstream `_TOOL_RESULT_PREVIEW_CHARS`).
pub const PREVIEW_CHARS: usize = 1200;
/// Where results are saved, under the workspace (upstream `_TOOL_RESULTS_DIR`).
pub const RESULTS_DIR: &str = ".nanobot/tool-results";
/// Buckets older than this are deleted (upstream `_TOOL_RESULT_RETENTION_SECS`).
const RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// Most buckets kept (upstream `_TOOL_RESULT_MAX_BUCKETS`).
const MAX_BUCKETS: usize = 32;
/// Tools whose results are never offloaded (upstream `TOOL_RESULT_OFFLOAD_EXEMPT_TOOLS`):
/// `read_file` is how the model reads a saved result back.
const EXEMPT: &[&str] = &["read_file"];

/// Where and from what size tool results are saved instead of sent whole.
#[derive(Debug, Clone, Default)]
pub struct Offload {
    /// The bot's workspace; `None` keeps results inline (truncated).
    pub workspace: Option<PathBuf>,
    /// `maxToolResultChars`; 0 means no limit.
    pub max_chars: usize,
}

impl Offload {
    /// Returns what the model gets for `content`, the result of `tool`'s call `call_id` in
    /// `session_key` (upstream `normalize_tool_result`): the content itself when short
    /// enough, else the persisted reference, else (no workspace, or the write failed) the
    /// content truncated to the limit.
    pub async fn apply(
        &self,
        session_key: &str,
        tool: &str,
        call_id: &str,
        content: Value,
    ) -> Value {
        if self.max_chars == 0 || EXEMPT.contains(&tool) {
            return content;
        }
        let Some(workspace) = &self.workspace else {
            return self.truncated(content);
        };
        let (workspace, session, call) = (
            workspace.clone(),
            session_key.to_string(),
            call_id.to_string(),
        );
        let max = self.max_chars;
        let input = content.clone();
        let persisted =
            tokio::task::spawn_blocking(move || persist(&workspace, &session, &call, &input, max))
                .await;
        // A reference keeps its whole path even past the limit (upstream).
        match persisted {
            Ok(Ok(Some(reference))) => Value::String(reference),
            Ok(Ok(None)) => content,
            Ok(Err(e)) => {
                tracing::warn!(call_id, error = %e, "tool result persist failed, using raw result");
                self.truncated(content)
            }
            Err(e) => {
                tracing::warn!(call_id, error = %e, "tool result persist failed, using raw result");
                self.truncated(content)
            }
        }
    }

    /// Returns a text result cut to the limit (upstream `truncate_text`); others as they are.
    fn truncated(&self, content: Value) -> Value {
        match content {
            Value::String(s) if s.chars().count() > self.max_chars => {
                Value::String(truncate_text(&s, self.max_chars))
            }
            other => other,
        }
    }
}

/// Replaces the characters upstream's `safe_filename` replaces (`<>:"/\|?*`) with `_`.
pub fn safe_filename(name: &str) -> String {
    name.chars()
        .map(|c| if r#"<>:"/\|?*"#.contains(c) { '_' } else { c })
        .collect::<String>()
        .trim()
        .to_string()
}

/// Returns the text of `content` (a string, or text-only blocks joined by newlines) and the
/// file suffix, or `None` when it holds anything else (images).
fn text_payload(content: &Value) -> Option<(String, &'static str)> {
    match content {
        Value::String(s) => Some((s.clone(), "txt")),
        Value::Array(blocks) => {
            let mut parts = Vec::with_capacity(blocks.len());
            for block in blocks {
                if block.get("type").and_then(Value::as_str) != Some("text") {
                    return None;
                }
                parts.push(block.get("text")?.as_str()?.to_string());
            }
            Some((parts.join("\n"), "json"))
        }
        _ => None,
    }
}

/// Saves `content` when its text is over `max` characters and returns upstream's reference;
/// `None` when it stays inline.
fn persist(
    workspace: &Path,
    session_key: &str,
    call_id: &str,
    content: &Value,
    max: usize,
) -> std::io::Result<Option<String>> {
    let Some((text, suffix)) = text_payload(content) else {
        return Ok(None);
    };
    let size = text.chars().count();
    if size <= max {
        return Ok(None);
    }
    let root = workspace.join(RESULTS_DIR);
    let session = if session_key.is_empty() {
        "default"
    } else {
        session_key
    };
    let bucket = root.join(safe_filename(session));
    std::fs::create_dir_all(&bucket)?;
    if let Err(e) = clean_buckets(&root, &bucket) {
        tracing::warn!(root = %root.display(), error = %e, "cannot clean stale tool result buckets");
    }
    let path = bucket.join(format!("{}.{suffix}", safe_filename(call_id)));
    if !path.exists() {
        let body = if suffix == "json" {
            serde_json::to_string_pretty(content).map_err(std::io::Error::other)?
        } else {
            text.clone()
        };
        write_atomic(&path, &body)?;
    }
    let shown = path.canonicalize().unwrap_or(path).display().to_string();
    Ok(Some(reference(&shown, &text, size, max)))
}

/// Returns upstream's reference to a saved result (`_render_tool_result_reference`): the
/// path, the size and a preview, or only `[truncated: <path>]` when that is over `max`.
fn reference(path: &str, text: &str, size: usize, max: usize) -> String {
    let preview: String = text.chars().take(PREVIEW_CHARS).collect();
    let mut reference = format!(
        "[tool output persisted]\nFull output saved to workspace path: {path}\nOriginal size: \
         {size} chars\nPreview:\n{preview}"
    );
    if size > PREVIEW_CHARS {
        reference.push_str("\n...\nPreview is also truncated.");
    }
    reference.push_str("\nResult truncated. Read the saved file if you need the complete output.");
    if reference.chars().count() > max {
        return format!("[truncated: {path}]");
    }
    reference
}

fn write_atomic(path: &Path, body: &str) -> std::io::Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("result");
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(body.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    if let Some(dir) = path.parent()
        && let Ok(dir) = std::fs::File::open(dir)
    {
        let _ = dir.sync_all();
    }
    Ok(())
}

fn modified(path: &Path) -> SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// Deletes buckets other than `current` older than [`RETENTION`], then all but the newest
/// `MAX_BUCKETS - 1` of the rest (upstream `_cleanup_tool_result_buckets`).
fn clean_buckets(root: &Path, current: &Path) -> std::io::Result<()> {
    let mut siblings: Vec<(SystemTime, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let path = entry?.path();
        if path.is_dir() && path != current {
            siblings.push((modified(&path), path));
        }
    }
    let cutoff = SystemTime::now()
        .checked_sub(RETENTION)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    siblings.retain(|(at, path)| {
        if *at < cutoff {
            let _ = std::fs::remove_dir_all(path);
            return false;
        }
        true
    });
    siblings.sort_by_key(|b| std::cmp::Reverse(b.0));
    for (_, path) in siblings.iter().skip(MAX_BUCKETS - 1) {
        let _ = std::fs::remove_dir_all(path);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn an_oversized_result_is_saved_once_and_referenced_with_a_preview() {
        let dir = tempfile::tempdir().unwrap();
        let offload = Offload {
            workspace: Some(dir.path().to_path_buf()),
            max_chars: 1500,
        };
        let long = "é".repeat(3000);
        let out = offload
            .apply("telegram:42", "exec", "call/1", json!(long))
            .await;
        let path = dir
            .path()
            .join(".nanobot/tool-results/telegram_42/call_1.txt");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), long);
        let expected = format!(
            "[tool output persisted]\nFull output saved to workspace path: {}\nOriginal size: \
             3000 chars\nPreview:\n{}\n...\nPreview is also truncated.\nResult truncated. Read \
             the saved file if you need the complete output.",
            path.canonicalize().unwrap().display(),
            "é".repeat(1200)
        );
        assert_eq!(out, json!(expected));
        // Short results, read_file and a missing workspace keep upstream's other rules.
        assert_eq!(
            offload.apply("s", "exec", "c2", json!("short")).await,
            json!("short")
        );
        assert_eq!(
            offload.apply("s", "read_file", "c3", json!(long)).await,
            json!(long)
        );
        let inline = Offload {
            workspace: None,
            max_chars: 10,
        };
        assert_eq!(
            inline.apply("s", "exec", "c4", json!("x".repeat(20))).await,
            json!("xxxxxxxxxx\n... (truncated)")
        );
        // Text blocks are saved as JSON; image blocks stay inline.
        let blocks = json!([{"type": "text", "text": "y".repeat(2000)}]);
        let out = offload.apply("s", "mcp_x_y", "c5", blocks.clone()).await;
        assert!(out.as_str().unwrap().contains("c5.json"), "{out}");
        let image =
            json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]);
        assert_eq!(offload.apply("s", "x", "c6", image.clone()).await, image);
    }

    #[test]
    fn buckets_beyond_the_newest_32_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for i in 0..40 {
            let bucket = root.join(format!("b{i:02}"));
            std::fs::create_dir(&bucket).unwrap();
            let at = SystemTime::now() - Duration::from_secs(100 - i);
            std::fs::File::open(&bucket)
                .unwrap()
                .set_modified(at)
                .unwrap();
        }
        let current = root.join("current");
        std::fs::create_dir(&current).unwrap();
        clean_buckets(root, &current).unwrap();
        let left = std::fs::read_dir(root).unwrap().count();
        assert_eq!(left, 32);
        assert!(root.join("b39").exists() && !root.join("b00").exists());
    }

    /// nanobot 0.3.5's `maybe_persist_tool_result` texts at small limits.
    #[tokio::test]
    async fn at_a_tiny_limit_the_reference_is_only_the_saved_path() {
        let dir = tempfile::tempdir().unwrap();
        let tiny = Offload {
            workspace: Some(dir.path().to_path_buf()),
            max_chars: 10,
        };
        let text = "笔记📔".repeat(10);
        let out = tiny
            .apply("telegram:42", "exec", "call/1", json!(text))
            .await;
        let path = dir
            .path()
            .canonicalize()
            .unwrap()
            .join(".nanobot/tool-results/telegram_42/call_1.txt");
        assert_eq!(out, json!(format!("[truncated: {}]", path.display())));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        // A result that fits is kept whole; a reference that fits has no preview cut.
        let fits = Offload {
            max_chars: 300,
            ..tiny.clone()
        };
        let short = "ab".repeat(50);
        assert_eq!(
            fits.apply("s", "exec", "c2", json!(short)).await,
            json!(short)
        );
        let emoji = "👩‍👩‍👧‍👦 🇨🇳 e\u{301} שלום ".repeat(100);
        let size = emoji.chars().count();
        let preview: String = emoji.chars().take(PREVIEW_CHARS).collect();
        let roomy = Offload {
            max_chars: 1600,
            ..tiny.clone()
        };
        let out = roomy.apply("s", "exec", "c3", json!(emoji)).await;
        let saved = dir
            .path()
            .canonicalize()
            .unwrap()
            .join(".nanobot/tool-results/s/c3.txt");
        assert_eq!(
            out,
            json!(format!(
                "[tool output persisted]\nFull output saved to workspace path: {}\nOriginal size: \
                 {size} chars\nPreview:\n{preview}\n...\nPreview is also truncated.\nResult \
                 truncated. Read the saved file if you need the complete output.",
                saved.display()
            ))
        );
    }
}

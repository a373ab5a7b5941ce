//! `read_file`: numbered lines with offset/limit paging and upstream's footers; images come
//! back as content blocks; PDF, DOCX, XLSX and PPTX as their extracted text
//! ([`super::documents`]); devices, FIFOs and binaries are refused. A text file read before in
//! the session (same path, offset and limit, unchanged mtime and SHA-256; the session's reads
//! come with the call) is answered `[File unchanged since last read: …]` unless `force`.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Value, json};

use nanobot_proto::FileRead;
use nanobot_runtime::skills_dir::builtin_skill_file;
use sha2::{Digest as _, Sha256};

use super::documents::{self, Kind};
use crate::registry::{
    Args, Tool, ToolContext, ToolOutput, arg_bool, arg_i64, arg_str, blocking, object_schema,
};

/// Most characters one read returns.
const MAX_CHARS: usize = 128_000;
/// Lines returned when no `limit` is given.
const DEFAULT_LIMIT: usize = 2000;
/// Largest file read at all (100 MiB).
const MAX_FILE_BYTES: u64 = 100 * 1024 * 1024;

/// Reads a file as numbered lines.
#[derive(Debug, Default)]
pub struct ReadFile {
    /// The fleet's built-in skills: `skills/<name>/…` missing from the workspace reads there.
    builtin_skills: Option<PathBuf>,
}

impl ReadFile {
    /// Returns the tool; `builtin_skills` is the built-in skills directory, if any.
    pub fn new(builtin_skills: Option<PathBuf>) -> Self {
        Self { builtin_skills }
    }
}

#[async_trait::async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Read text, images, PDFs, and Office documents by path. Text is line-numbered; use \
         offset/limit or pages for targeted ranges."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "path": {"type": "string", "description": "The file path to read"},
                "offset": {"type": "integer", "minimum": 1,
                    "description": "1-based text or extracted-document line (default 1)"},
                "limit": {"type": "integer", "minimum": 1,
                    "description": "Maximum lines to return (default 2000)"},
                "pages": {"type": "string",
                    "description": "PDF page number or range, e.g. '7' or '1-5' (max 20 pages)"},
                "force": {"type": "boolean", "default": false,
                    "description": "Return an unchanged range again"},
            }),
            &["path"],
        )
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn execute(&self, ctx: &ToolContext, args: Args) -> ToolOutput {
        let ctx = ctx.clone();
        let builtin = self.builtin_skills.clone();
        blocking(self.name(), move || read(&ctx, builtin.as_deref(), &args)).await
    }
}

fn read(ctx: &ToolContext, builtin_skills: Option<&Path>, args: &Args) -> ToolOutput {
    let path = arg_str(args, "path").unwrap_or_default();
    let offset = usize::try_from(arg_i64(args, "offset").unwrap_or(1).max(1)).unwrap_or(1);
    let asked_limit = arg_i64(args, "limit").and_then(|l| usize::try_from(l).ok());
    let limit = asked_limit.unwrap_or(DEFAULT_LIMIT);
    if is_blocked_device(Path::new(path)) {
        return blocked(path);
    }
    let fp = match ctx.sandbox.resolve(path) {
        Ok(fp) => fp,
        Err(message) => return ToolOutput::error(message),
    };
    // A built-in skill the prompt lists as `skills/<name>/SKILL.md` (0.3.5).
    let fp = match fp.exists() {
        true => fp,
        false => builtin_skills
            .and_then(|dir| builtin_skill_file(dir, path))
            .unwrap_or(fp),
    };
    if is_blocked_device(&fp) {
        return blocked(&fp.display().to_string());
    }
    let meta = match std::fs::metadata(&fp) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return ToolOutput::error(format!("Error: File not found: {path}"));
        }
        Err(e) => return ToolOutput::error(format!("Error reading file: {e}")),
    };
    if !meta.is_file() {
        // Directories, FIFOs, sockets and devices: reading could hang or never end.
        return ToolOutput::error(format!("Error: Not a file: {path}"));
    }
    if meta.len() > MAX_FILE_BYTES {
        // Display only: MiB with one decimal, as upstream shows it.
        let size_mib = meta.len() as f64 / (1024.0 * 1024.0);
        return ToolOutput::error(format!(
            "Error: File too large to read ({size_mib:.1} MiB). Maximum is {} MiB.",
            MAX_FILE_BYTES / (1024 * 1024)
        ));
    }
    if let Some(kind) = Kind::of(&fp) {
        return document(&fp, kind, args, offset, limit);
    }
    let raw = match std::fs::read(&fp) {
        Ok(raw) => raw,
        Err(e) => return ToolOutput::error(format!("Error reading file: {e}")),
    };
    if raw.is_empty() {
        return ToolOutput::text(format!("(Empty file: {path})"));
    }
    if let Some(mime) = image_mime(&raw) {
        return image(&raw, mime, &fp, path);
    }
    let read = FileRead {
        path: fp.display().to_string(),
        offset: u32::try_from(offset).unwrap_or(u32::MAX),
        limit: asked_limit.map_or(0, |l| u32::try_from(l).unwrap_or(u32::MAX)),
        mtime_ns: mtime_ns(&meta),
        sha256: format!("{:x}", Sha256::digest(&raw)),
    };
    if !arg_bool(args, "force") && ctx.file_reads.contains(&read) {
        return ToolOutput::text(format!("[File unchanged since last read: {path}]"));
    }
    let Some(text) = decode(raw, &fp) else {
        let mime = mime_from_extension(&fp).unwrap_or("unknown");
        return ToolOutput::error(format!(
            "Error: Cannot read binary file {path} (MIME: {mime}). Only supported text files \
             and images can be read."
        ));
    };
    match page(&text.replace("\r\n", "\n"), offset, limit) {
        Ok(page) => ToolOutput {
            file_read: Some(read),
            ..ToolOutput::text(page)
        },
        Err(message) => ToolOutput::error(message),
    }
}

/// Returns the text of `raw`: UTF-8 without NULs, or for upstream's known text
/// extensions (`.txt`, `.csv`, …) Latin-1 when it is not UTF-8; `None` for a binary.
fn decode(raw: Vec<u8>, fp: &Path) -> Option<String> {
    const TEXT_EXTENSIONS: [&str; 13] = [
        "txt", "md", "csv", "json", "xml", "html", "htm", "log", "yaml", "yml", "toml", "ini",
        "cfg",
    ];
    match String::from_utf8(raw) {
        Ok(text) => (!text.contains('\0')).then_some(text),
        Err(e) => {
            let ext = fp.extension()?.to_str()?.to_ascii_lowercase();
            if !TEXT_EXTENSIONS.contains(&ext.as_str()) {
                return None;
            }
            Some(e.as_bytes().iter().map(|&b| char::from(b)).collect())
        }
    }
}

/// Reads a PDF (by `pages`) or an Office document (by `offset`/`limit`) as its extracted
/// text; upstream neither deduplicates these reads nor checks for images first.
fn document(fp: &Path, kind: Kind, args: &Args, offset: usize, limit: usize) -> ToolOutput {
    let text = match kind {
        Kind::Pdf => documents::page::read_pdf(fp, arg_str(args, "pages"), MAX_CHARS),
        _ => documents::page::read_office(fp, kind, offset, limit, MAX_CHARS),
    };
    match text {
        Ok(text) => ToolOutput::text(text),
        Err(message) => ToolOutput::error(message),
    }
}

/// Returns the modification time in nanoseconds since the epoch (0 when unknown).
fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_nanos()).ok())
        .unwrap_or(0)
}

fn blocked(path: &str) -> ToolOutput {
    ToolOutput::error(format!(
        "Error: Reading {path} is blocked (device path that could hang or produce infinite output)."
    ))
}

/// Returns whether `path` is a device or a process's standard stream (`/dev/*`,
/// `/proc/<pid>/fd/0-2`), which could block or produce infinite output.
pub fn is_blocked_device(path: &Path) -> bool {
    let text = path.to_string_lossy();
    if text.starts_with("/dev/") {
        return true;
    }
    let parts: Vec<&str> = text.split('/').collect();
    matches!(
        parts.as_slice(),
        ["", "proc", pid, "fd", "0" | "1" | "2"]
            if *pid == "self" || pid.chars().all(|c| c.is_ascii_digit())
    )
}

/// Returns the numbered page of `text` with upstream's footer, or the offset error.
fn page(text: &str, offset: usize, limit: usize) -> Result<String, String> {
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    if offset > total {
        return Err(format!(
            "Error: offset {offset} is beyond end of file ({total} lines)"
        ));
    }
    let start = offset - 1;
    let mut end = start.saturating_add(limit).min(total);
    let numbered: Vec<String> = lines[start..end]
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{}| {l}", start + i + 1))
        .collect();
    let mut out = numbered.join("\n");
    if out.chars().count() > MAX_CHARS {
        let mut kept = 0;
        let mut chars = 0;
        for line in &numbered {
            chars += line.chars().count() + 1;
            if chars > MAX_CHARS {
                break;
            }
            kept += 1;
        }
        if kept == 0 {
            // One line longer than the cap: show its head so paging can move past it.
            out = numbered[0].chars().take(MAX_CHARS).collect();
            kept = 1;
        } else {
            out = numbered[..kept].join("\n");
        }
        end = start + kept;
    }
    if end < total {
        out.push_str(&format!(
            "\n\n(Showing lines {offset}-{end} of {total}. Use offset={} to continue.)",
            end + 1
        ));
    } else {
        out.push_str(&format!("\n\n(End of file — {total} lines total)"));
    }
    Ok(out)
}

fn image_mime(raw: &[u8]) -> Option<&'static str> {
    match raw {
        [0x89, b'P', b'N', b'G', ..] => Some("image/png"),
        [0xFF, 0xD8, 0xFF, ..] => Some("image/jpeg"),
        [b'G', b'I', b'F', b'8', ..] => Some("image/gif"),
        [
            b'R',
            b'I',
            b'F',
            b'F',
            _,
            _,
            _,
            _,
            b'W',
            b'E',
            b'B',
            b'P',
            ..,
        ] => Some("image/webp"),
        _ => None,
    }
}

fn mime_from_extension(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "gz" => "application/gzip",
        "tar" => "application/x-tar",
        "docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "mp3" => "audio/mpeg",
        "mp4" => "video/mp4",
        "exe" | "bin" | "so" | "o" => "application/octet-stream",
        _ => return None,
    })
}

fn image(raw: &[u8], mime: &str, fp: &Path, path: &str) -> ToolOutput {
    let label = format!("(Image file: {path})");
    let data = base64::engine::general_purpose::STANDARD.encode(raw);
    let blocks = json!([
        {"type": "image_url", "image_url": {"url": format!("data:{mime};base64,{data}")},
         "_meta": {"path": fp.display().to_string()}},
        {"type": "text", "text": label},
    ]);
    ToolOutput {
        content: label,
        is_error: false,
        blocks_json: blocks.to_string(),
        file_read: None,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::sandbox::Sandbox;

    fn ctx(restrict: bool) -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let sandbox = Sandbox::new(&ws, restrict);
        (
            dir,
            ToolContext {
                sandbox,
                session_key: "cli:direct".into(),
                origin: Default::default(),
                file_reads: Vec::new(),
            },
        )
    }

    async fn call(ctx: &ToolContext, args: Value) -> ToolOutput {
        let Value::Object(args) = args else {
            panic!("args must be an object")
        };
        ReadFile::default().execute(ctx, args).await
    }

    #[tokio::test]
    async fn skills_paths_missing_from_the_workspace_read_the_builtin_skill() {
        let (dir, ctx) = ctx(true);
        let builtin = dir.path().join("builtin");
        std::fs::create_dir_all(builtin.join("天气")).unwrap();
        std::fs::write(builtin.join("天气/SKILL.md"), "# 天气 🌦\n").unwrap();
        std::fs::create_dir_all(ctx.sandbox.root().join("skills/mine")).unwrap();
        std::fs::write(ctx.sandbox.root().join("skills/mine/SKILL.md"), "# mine\n").unwrap();
        let tool = ReadFile::new(Some(builtin));
        let read = |path: &str| {
            let Value::Object(args) = json!({"path": path}) else {
                unreachable!()
            };
            tool.execute(&ctx, args)
        };
        let builtin_skill = read("skills/天气/SKILL.md").await;
        assert!(!builtin_skill.is_error, "{builtin_skill:?}");
        assert!(
            builtin_skill.content.contains("1| # 天气 🌦"),
            "{builtin_skill:?}"
        );
        let own = read("skills/mine/SKILL.md").await;
        assert!(own.content.contains("1| # mine"), "{own:?}");
        let missing = read("skills/none/SKILL.md").await;
        assert_eq!(
            missing.content,
            "Error: File not found: skills/none/SKILL.md"
        );
        // Without a built-in directory the workspace is all there is.
        let plain = ReadFile::default();
        let Value::Object(args) = json!({"path": "skills/天气/SKILL.md"}) else {
            unreachable!()
        };
        assert!(plain.execute(&ctx, args).await.is_error);
    }

    #[tokio::test]
    async fn returns_numbered_lines_with_paging_footers() {
        let (_dir, ctx) = ctx(true);
        let body: String = (1..=5).map(|i| format!("line {i}\r\n")).collect();
        std::fs::write(ctx.sandbox.root().join("f.txt"), body).unwrap();
        let all = call(&ctx, json!({"path": "f.txt"})).await;
        assert_eq!(
            all.content,
            "1| line 1\n2| line 2\n3| line 3\n4| line 4\n5| line 5\n\n(End of file — 5 lines total)"
        );
        assert!(!all.is_error);
        let part = call(&ctx, json!({"path": "f.txt", "offset": 2, "limit": 2})).await;
        assert_eq!(
            part.content,
            "2| line 2\n3| line 3\n\n(Showing lines 2-3 of 5. Use offset=4 to continue.)"
        );
        let beyond = call(&ctx, json!({"path": "f.txt", "offset": 9})).await;
        assert_eq!(
            beyond.content,
            "Error: offset 9 is beyond end of file (5 lines)"
        );
        assert!(beyond.is_error);
    }

    #[tokio::test]
    async fn caps_output_at_128k_chars() {
        let (_dir, ctx) = ctx(true);
        let line = "x".repeat(1000);
        let body: String = (0..200).map(|_| format!("{line}\n")).collect();
        std::fs::write(ctx.sandbox.root().join("big.txt"), body).unwrap();
        let out = call(&ctx, json!({"path": "big.txt"})).await.content;
        assert!(out.chars().count() < MAX_CHARS + 200, "{}", out.len());
        assert!(
            out.ends_with("(Showing lines 1-127 of 200. Use offset=128 to continue.)"),
            "{}",
            &out[out.len() - 80..]
        );
        std::fs::write(
            ctx.sandbox.root().join("wide.txt"),
            "y".repeat(MAX_CHARS * 2),
        )
        .unwrap();
        let wide = call(&ctx, json!({"path": "wide.txt"})).await.content;
        assert!(
            wide.ends_with("(End of file — 1 lines total)"),
            "a single huge line still pages"
        );
    }

    #[tokio::test]
    async fn refuses_missing_binary_device_and_escaping_paths() {
        let (dir, ctx) = ctx(true);
        let root = ctx.sandbox.root().to_path_buf();
        assert_eq!(
            call(&ctx, json!({"path": "nope.txt"})).await.content,
            "Error: File not found: nope.txt"
        );
        std::fs::write(root.join("blob.bin"), [0u8, 159, 146, 150, 1, 2]).unwrap();
        let binary = call(&ctx, json!({"path": "blob.bin"})).await;
        assert_eq!(
            binary.content,
            "Error: Cannot read binary file blob.bin (MIME: application/octet-stream). Only supported text files and images can be read."
        );
        std::fs::write(root.join("latin1.csv"), b"caf\xe9,\xbfqu\xe9?\n").unwrap();
        assert_eq!(
            call(&ctx, json!({"path": "latin1.csv"})).await.content,
            "1| caf\u{e9},\u{bf}qu\u{e9}?\n\n(End of file — 1 lines total)",
            "a known text extension falls back to Latin-1"
        );
        std::fs::write(root.join("nul.txt"), "a\0b").unwrap();
        assert!(
            call(&ctx, json!({"path": "nul.txt"}))
                .await
                .content
                .starts_with("Error: Cannot read binary file nul.txt")
        );
        for device in ["/dev/zero", "/dev/stdin", "/proc/self/fd/0"] {
            let out = call(&ctx, json!({"path": device})).await;
            assert_eq!(
                out.content,
                format!(
                    "Error: Reading {device} is blocked (device path that could hang or produce infinite output)."
                )
            );
        }
        symlink("/dev/urandom", root.join("rand")).unwrap();
        let (_d2, open) = self::ctx(false);
        let via_link = call(&open, json!({"path": root.join("rand").to_str().unwrap()})).await;
        assert!(
            via_link
                .content
                .starts_with("Error: Reading /dev/urandom is blocked"),
            "{}",
            via_link.content
        );
        std::fs::create_dir(root.join("d")).unwrap();
        assert_eq!(
            call(&ctx, json!({"path": "d"})).await.content,
            "Error: Not a file: d"
        );
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        let escape = call(&ctx, json!({"path": "../secret"})).await;
        assert!(
            escape.is_error && escape.content.contains("is outside allowed directory"),
            "{}",
            escape.content
        );
        let huge = std::fs::File::create(root.join("huge.log")).unwrap();
        huge.set_len(MAX_FILE_BYTES + 1).unwrap();
        assert_eq!(
            call(&ctx, json!({"path": "huge.log"})).await.content,
            "Error: File too large to read (100.0 MiB). Maximum is 100 MiB."
        );
        std::fs::write(root.join("empty"), "").unwrap();
        assert_eq!(
            call(&ctx, json!({"path": "empty"})).await.content,
            "(Empty file: empty)"
        );
    }

    #[tokio::test]
    async fn documents_come_back_as_their_extracted_text() {
        use crate::tools::documents::testdocs;
        let (_dir, ctx) = ctx(true);
        let root = ctx.sandbox.root().to_path_buf();
        std::fs::write(root.join("幻灯片.PPTX"), testdocs::pptx()).unwrap();
        let slides = call(
            &ctx,
            json!({"path": "幻灯片.PPTX", "offset": 9, "limit": 1}),
        )
        .await;
        assert_eq!(
            slides.content,
            "9| --- Slide 3 ---\n\n(Showing extracted lines 9-9. Use offset=10 to continue.)"
        );
        assert!(!slides.is_error && slides.file_read.is_none());
        std::fs::write(root.join("t.pdf"), testdocs::pdf(&testdocs::SAMPLE_PDF)).unwrap();
        let page = call(&ctx, json!({"path": "t.pdf", "pages": "4"})).await;
        assert_eq!(page.content, "--- Page 4 ---\nThe end");
        let bad = call(&ctx, json!({"path": "t.pdf", "pages": "9"})).await;
        assert!(bad.is_error);
        assert_eq!(
            bad.content,
            "Error: Invalid page range '9': document has 4 pages; use a page number or range within 1-4."
        );
        std::fs::write(root.join("bad.xlsx"), "not a zip").unwrap();
        let corrupt = call(&ctx, json!({"path": "bad.xlsx"})).await;
        assert!(corrupt.is_error);
        assert_eq!(
            corrupt.content,
            "Error reading .XLSX file: invalid Office document: File is not a zip file"
        );
    }

    #[tokio::test]
    async fn images_come_back_as_content_blocks() {
        let (_dir, ctx) = ctx(true);
        std::fs::write(
            ctx.sandbox.root().join("p.png"),
            [0x89, b'P', b'N', b'G', 13, 10, 26, 10],
        )
        .unwrap();
        let out = call(&ctx, json!({"path": "p.png"})).await;
        assert_eq!(out.content, "(Image file: p.png)");
        let blocks: Value = serde_json::from_str(&out.blocks_json).unwrap();
        assert!(
            blocks[0]["image_url"]["url"]
                .as_str()
                .unwrap()
                .starts_with("data:image/png;base64,iVBORw")
        );
        assert_eq!(blocks[1]["text"], "(Image file: p.png)");
    }
}

//! `grep`: regex search over workspace files with ripgrep's matcher and searcher, and over
//! the extracted text of PDF, DOCX, XLSX and PPTX documents with source locators
//! (`[page=2,line=3]`, `[sheet='S',row=4,cell=B4]`), in upstream's three output modes
//! (content with five context lines by default, files_with_matches, count).

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::Searcher;
use grep_searcher::sinks::UTF8;
use serde_json::{Value, json};

use super::documents::{self, Kind};
use super::search::{self, MAX_RESULT_CHARS};
use crate::registry::{Args, Tool, ToolContext, ToolOutput, arg_bool, arg_i64, arg_str, blocking};

/// Largest file searched during a directory walk.
const MAX_FILE_BYTES: u64 = 2_000_000;
/// Largest file searched when named explicitly.
const MAX_EXPLICIT_FILE_BYTES: u64 = 100_000_000;
/// Context lines before and after a match unless asked otherwise.
const DEFAULT_CONTEXT: usize = 5;
/// Longest row shown; longer ones are clipped around the match.
const MAX_LINE_CHARS: usize = 2_000;

/// Searches file contents.
#[derive(Debug, Default)]
pub struct Grep;

#[async_trait::async_trait]
impl Tool for Grep {
    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> &str {
        "Search text, PDF, DOCX, XLSX, and PPTX content. Returns matches with five context \
         lines and source locators by default."
    }

    fn parameters(&self) -> Value {
        // 0.3.5's schema: other keys (its legacy max_matches / max_results) pass through.
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "minLength": 1, "description": "Regex, or literal text when fixed_strings=true"},
                "path": {"type": "string", "description": "Search root (default '.')"},
                "glob": {"type": "string", "description": "Path filter, e.g. '*.py' or 'tests/**/test_*.py'"},
                "type": {"type": "string", "description": "File type, e.g. 'py', 'ts', 'md', or 'json'"},
                "pages": {"type": "string", "description": "PDF page number or range, e.g. '7' or '101-200' (max 100 pages)"},
                "case_insensitive": {"type": "boolean", "description": "Ignore case (default false)"},
                "fixed_strings": {"type": "boolean", "description": "Treat pattern literally (default false)"},
                "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"],
                    "description": "content: matches with context (default); files_with_matches: paths; count: matches per file"},
                "context_before": {"type": "integer", "minimum": 0, "maximum": 20, "description": "Context lines before a match (default 5)"},
                "context_after": {"type": "integer", "minimum": 0, "maximum": 20, "description": "Context lines after a match (default 5)"},
                "head_limit": {"type": "integer", "minimum": 0, "maximum": 1000,
                    "description": "Maximum matches or file entries (default 250; 0 for all)"},
                "offset": {"type": "integer", "minimum": 0, "maximum": 100000, "description": "Matches or file entries to skip before head_limit"},
            },
            "required": ["pattern"],
        })
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
    /// `path: reason` of each document that could not be read.
    document_errors: Vec<String>,
    /// `(path: continue PDF search with pages='…')` notes.
    continuations: Vec<String>,
}

fn grep(ctx: &ToolContext, args: &Args) -> ToolOutput {
    let pattern = arg_str(args, "pattern").unwrap_or_default();
    let path = arg_str(args, "path")
        .filter(|p| !p.is_empty())
        .unwrap_or(".");
    let mode = arg_str(args, "output_mode").unwrap_or("content");
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
            .unwrap_or(DEFAULT_CONTEXT)
    };
    let finder = Finder::new(pattern, args);
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
        let lines = match source(&entry.path, &shown, arg_str(args, "pages"), &mut found) {
            Source::Lines(lines) => lines,
            Source::Skip => continue,
            Source::Fail(e) if meta.is_file() => return ToolOutput::error(e),
            Source::Fail(_) => continue,
        };
        let rows = lines.rows();
        let hits = lines.hits(&matcher, &finder, &rows);
        if hits.is_empty() {
            continue;
        }
        if mode != "content" {
            found
                .files
                .push((shown, search::mtime(&entry.path), hits.len()));
            continue;
        }
        let file = Hits {
            shown: &shown,
            rows: &rows,
            hits: &hits,
        };
        add_blocks(&mut found, &file, &finder, (before, after), (limit, offset));
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

/// One searched file: its shown path, its rows and the indexes of its matching rows.
struct Hits<'a> {
    shown: &'a str,
    rows: &'a [Row<'a>],
    hits: &'a [usize],
}

/// One line as grep shows it: its number in the (extracted) text and its locator.
struct Row<'a> {
    text: &'a str,
    number: usize,
    locator: &'a str,
}

/// What one file offers the search.
enum Lines {
    /// A text file's content.
    Text(String),
    /// A document's extracted lines.
    Document(documents::Located),
}

impl Lines {
    fn rows(&self) -> Vec<Row<'_>> {
        match self {
            Self::Text(text) => text
                .lines()
                .enumerate()
                .map(|(i, text)| Row {
                    text,
                    number: i + 1,
                    locator: "",
                })
                .collect(),
            // Headers and blank separators are neither searched nor shown as context.
            Self::Document(doc) => doc
                .lines
                .iter()
                .enumerate()
                .filter(|(_, line)| line.searchable())
                .map(|(i, line)| Row {
                    text: &line.text,
                    number: i + 1,
                    locator: &line.locator,
                })
                .collect(),
        }
    }

    /// Returns the indexes of the rows that match.
    fn hits(&self, matcher: &RegexMatcher, finder: &Finder, rows: &[Row<'_>]) -> Vec<usize> {
        match self {
            Self::Text(text) => matching_lines(matcher, text)
                .into_iter()
                .map(|n| n.saturating_sub(1))
                .filter(|&i| i < rows.len())
                .collect(),
            Self::Document(_) => (0..rows.len())
                .filter(|&i| finder.is_match(rows[i].text))
                .collect(),
        }
    }
}

/// What reading one file gave.
enum Source {
    Lines(Lines),
    /// Not searchable (binary, not UTF-8); counted already.
    Skip,
    /// A document that could not be read: the error for an explicitly named file.
    Fail(String),
}

/// Reads a file as text, or as a document's extracted lines; notes what was skipped.
fn source(path: &std::path::Path, shown: &str, pages: Option<&str>, found: &mut Found) -> Source {
    let Some(kind) = Kind::of(path) else {
        return match std::fs::read(path) {
            Ok(raw) if !search::is_binary(&raw) => {
                String::from_utf8(raw).map_or(Source::Skip, |text| Source::Lines(Lines::Text(text)))
            }
            _ => Source::Skip,
        }
        .counted(found);
    };
    match documents::located(path, kind, pages.filter(|p| !p.is_empty())) {
        Ok(doc) => {
            if let Some(next) = &doc.continuation {
                found
                    .continuations
                    .push(format!("({shown}: continue PDF search with {next})"));
            }
            Source::Lines(Lines::Document(doc))
        }
        Err(e @ documents::Error::PageRange { .. }) => {
            found.skipped_binary += 1;
            found.document_errors.push(format!("{shown}: {e}"));
            let pages = pages.unwrap_or_default();
            Source::Fail(format!("Error: Invalid PDF page range '{pages}': {e}."))
        }
        Err(e) => {
            found.skipped_binary += 1;
            found.document_errors.push(format!("{shown}: {e}"));
            Source::Fail(format!("Error searching document {shown}: {e}"))
        }
    }
}

impl Source {
    fn counted(self, found: &mut Found) -> Self {
        if matches!(self, Self::Skip) {
            found.skipped_binary += 1;
        }
        self
    }
}

/// Finds where a line's first match starts (upstream clips long lines around it).
struct Finder(Option<regex::Regex>);

impl Finder {
    fn new(pattern: &str, args: &Args) -> Self {
        let needle = if arg_bool(args, "fixed_strings") {
            regex::escape(pattern)
        } else {
            pattern.to_string()
        };
        let built = regex::RegexBuilder::new(&needle)
            .case_insensitive(arg_bool(args, "case_insensitive"))
            .build();
        Self(built.ok())
    }

    fn is_match(&self, line: &str) -> bool {
        self.0.as_ref().is_some_and(|re| re.is_match(line))
    }

    /// Returns the character offset of the first match in `line`.
    fn start_in(&self, line: &str) -> usize {
        let byte = self
            .0
            .as_ref()
            .and_then(|re| re.find(line))
            .map_or(0, |m| m.start());
        line[..byte].chars().count()
    }
}

/// Adds one block per matching line of `file` (upstream's content mode): a `path:line`
/// header, then the context rows, the match marked `>`.
fn add_blocks(
    found: &mut Found,
    file: &Hits<'_>,
    finder: &Finder,
    (before, after): (usize, usize),
    (limit, offset): (Option<usize>, usize),
) {
    for &hit in file.hits {
        found.seen += 1;
        if found.seen <= offset {
            continue;
        }
        if limit.is_some_and(|l| found.blocks.len() >= l) {
            found.truncated = true;
            return;
        }
        let end = (hit + after).min(file.rows.len() - 1);
        let block = block(
            file.shown,
            &file.rows[hit.saturating_sub(before)..=end],
            hit - hit.saturating_sub(before),
            finder,
        );
        let separator = if found.blocks.is_empty() { 0 } else { 2 };
        if found.chars + separator + block.chars().count() > MAX_RESULT_CHARS {
            found.size_truncated = true;
            return;
        }
        found.chars += separator + block.chars().count();
        found.blocks.push(block);
    }
}

/// Renders one match (upstream's `_format_block`): a `path:line [locator]` header, then
/// the context rows, the match marked `>`; a spreadsheet match's locator names its cell.
fn block(shown: &str, rows: &[Row<'_>], at: usize, finder: &Finder) -> String {
    let hit = &rows[at];
    let start = finder.start_in(hit.text);
    let mut locator = hit.locator.to_string();
    if locator.starts_with("sheet=") {
        let tabs = hit.text.chars().take(start).filter(|&c| c == '\t').count();
        if let Some((_, row)) = locator.rsplit_once(",row=") {
            let cell = format!(",cell={}{row}", excel_column(tabs + 1));
            locator.push_str(&cell);
        }
    }
    let mut block = vec![format!("{shown}:{}{}", hit.number, bracketed(&locator))];
    for (i, row) in rows.iter().enumerate() {
        let (marker, at_match) = if i == at {
            (">", Some(start))
        } else {
            (" ", None)
        };
        block.push(format!(
            "{marker} {}{}| {}",
            row.number,
            bracketed(row.locator),
            clip_line(row.text, at_match)
        ));
    }
    block.join("\n")
}

fn bracketed(locator: &str) -> String {
    if locator.is_empty() {
        String::new()
    } else {
        format!(" [{locator}]")
    }
}

/// Returns a spreadsheet column's letters (1 is `A`, 27 is `AA`).
fn excel_column(mut number: usize) -> String {
    let mut letters = Vec::new();
    while number > 0 {
        let rest = (number - 1) % 26;
        letters.push(char::from(b'A' + u8::try_from(rest).unwrap_or(0)));
        number = (number - 1) / 26;
    }
    letters.iter().rev().collect()
}

/// Clips a row longer than [`MAX_LINE_CHARS`] characters as upstream does: around the
/// match (a third of the room before it) with `...` on the cut sides, or from the start.
fn clip_line(text: &str, match_start: Option<usize>) -> String {
    const MARKER: &str = "...";
    let len = text.chars().count();
    if len <= MAX_LINE_CHARS {
        return text.to_string();
    }
    let room = MAX_LINE_CHARS - MARKER.len();
    let chars: Vec<char> = text.chars().collect();
    let Some(at) = match_start else {
        return chars[..room].iter().collect::<String>() + MARKER;
    };
    let start = at.saturating_sub(room / 3).min(len - room);
    let end = start + room;
    let (prefix, suffix) = (start > 0, end < len);
    let visible_end = if prefix && suffix {
        end - MARKER.len()
    } else {
        end
    };
    let mut out = String::new();
    if prefix {
        out.push_str(MARKER);
    }
    out.extend(&chars[start..visible_end]);
    if suffix {
        out.push_str(MARKER);
    }
    out
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
    let next = offset + found.blocks.len();
    if mode == "content" && truncated {
        let limit = limit.map_or("None".to_string(), |l| l.to_string());
        notes.push(format!(
            "(pagination: limit={limit}, offset={offset}; use offset={next} to continue)"
        ));
    } else if mode == "content" && found.size_truncated {
        notes.push(format!(
            "(output truncated due to size; use offset={next} to continue)"
        ));
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
    if let Some(first) = found.document_errors.first() {
        notes.push(format!("(first document error: {first})"));
    }
    notes.extend(found.continuations.into_iter().take(10));
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

    fn as_args(args: Value) -> Args {
        let Value::Object(args) = args else {
            panic!("args must be an object")
        };
        args
    }

    async fn call(ctx: &ToolContext, args: Value) -> String {
        Grep.execute(ctx, as_args(args)).await.content
    }

    #[tokio::test]
    async fn output_modes_follow_upstream_formats() {
        let (_dir, ctx) = ctx();
        assert_eq!(
            call(
                &ctx,
                json!({"pattern": "token", "output_mode": "files_with_matches"})
            )
            .await,
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
            call(
                &ctx,
                json!({"pattern": "token", "head_limit": 1, "glob": "*.rs", "context_after": 0})
            )
            .await,
            "src/a.rs:2\n  1| fn main() {\n> 2|     let token = 1;\n\n(pagination: limit=1, offset=0; use offset=1 to continue)"
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

    /// The expected texts are nanobot 0.3.5's `GrepTool` output on the same files.
    #[tokio::test]
    async fn content_is_the_default_with_five_context_lines_on_cjk_and_emoji_files() {
        let (_dir, ctx) = ctx();
        let mut lines: Vec<String> = (1..=12).map(|i| format!("第{i}行")).collect();
        lines[6] = "心情：😀 👩‍👩‍👧‍👦 🇨🇳 e\u{301} שלום عربى".into();
        lines[8] = "又 😀".into();
        let notes = ctx.sandbox.root().join("笔记");
        std::fs::create_dir_all(&notes).unwrap();
        std::fs::write(notes.join("日记 📔.md"), lines.join("\n") + "\n").unwrap();
        let row7 = "心情：😀 👩‍👩‍👧‍👦 🇨🇳 e\u{301} שלום عربى";
        assert_eq!(
            call(&ctx, json!({"pattern": "😀", "path": "笔记"})).await,
            format!(
                "笔记/日记 📔.md:7\n  2| 第2行\n  3| 第3行\n  4| 第4行\n  5| 第5行\n  6| 第6行\n\
                 > 7| {row7}\n  8| 第8行\n  9| 又 😀\n  10| 第10行\n  11| 第11行\n  12| 第12行\n\n\
                 笔记/日记 📔.md:9\n  4| 第4行\n  5| 第5行\n  6| 第6行\n  7| {row7}\n  8| 第8行\n\
                 > 9| 又 😀\n  10| 第10行\n  11| 第11行\n  12| 第12行"
            )
        );
        assert_eq!(
            call(&ctx, json!({"pattern": "😀", "path": "笔记", "context_before": 1, "context_after": 0, "head_limit": 1})).await,
            format!("笔记/日记 📔.md:7\n  6| 第6行\n> 7| {row7}\n\n(pagination: limit=1, offset=0; use offset=1 to continue)")
        );
        assert_eq!(
            call(&ctx, json!({"pattern": "😀", "path": "笔记", "context_before": 0, "context_after": 0, "offset": 1})).await,
            "笔记/日记 📔.md:9\n> 9| 又 😀\n\n(pagination: offset=1)"
        );
        let long = format!("{}😀{}", "x".repeat(2500), "y".repeat(10));
        std::fs::write(ctx.sandbox.root().join("long.txt"), format!("{long}\n")).unwrap();
        let clipped = call(
            &ctx,
            json!({"pattern": "😀", "path": "long.txt", "context_before": 0, "context_after": 0}),
        )
        .await;
        let tail: String = long.chars().skip(514).collect();
        assert_eq!(clipped, format!("long.txt:1\n> 1| ...{tail}"));
        assert_eq!(clip_line(&"é".repeat(2001), None), "é".repeat(1997) + "...");
    }

    fn write_documents(ctx: &ToolContext) {
        use crate::tools::documents::testdocs;
        let root = ctx.sandbox.root().join("docs");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("报告.docx"), testdocs::docx()).unwrap();
        std::fs::write(root.join("表.xlsx"), testdocs::xlsx()).unwrap();
        std::fs::write(root.join("幻灯片.pptx"), testdocs::pptx()).unwrap();
        std::fs::write(root.join("t.pdf"), testdocs::pdf(&testdocs::SAMPLE_PDF)).unwrap();
        let many: Vec<&str> = (0..102).map(|i| testdocs::SAMPLE_PDF[i % 4]).collect();
        std::fs::write(root.join("many.pdf"), testdocs::pdf(&many)).unwrap();
    }

    /// The expected texts are nanobot 0.3.5's `GrepTool` output on the same files.
    #[tokio::test]
    async fn documents_are_searched_with_source_locators_as_upstream() {
        let (_dir, ctx) = ctx();
        write_documents(&ctx);
        let around = |pattern: &str, path: &str| json!({"pattern": pattern, "path": format!("docs/{path}"), "context_before": 1, "context_after": 1});
        assert_eq!(
            call(&ctx, around("你|👩", "报告.docx")).await,
            "docs/报告.docx:1 [paragraph=1]\n> 1 [paragraph=1]| Hello 你好 👩‍👩‍👧‍👦 🇨🇳\n  3 [paragraph=2]| See link\tx"
        );
        assert_eq!(
            call(&ctx, around("👩|名字|3", "表.xlsx")).await,
            "docs/表.xlsx:2 [sheet='数据',row=1,cell=A1]\n> 2 [sheet='数据',row=1]| 名字\tCount\t\n  3 [sheet='数据',row=2]| 👩‍👩‍👧‍👦 family\t3\t2024-01-01 00:00:00\n\n\
             docs/表.xlsx:3 [sheet='数据',row=2,cell=A2]\n  2 [sheet='数据',row=1]| 名字\tCount\t\n> 3 [sheet='数据',row=2]| 👩‍👩‍👧‍👦 family\t3\t2024-01-01 00:00:00\n  4 [sheet='数据',row=3]| مرحبا שלום\t2.5\t"
        );
        assert_eq!(
            call(&ctx, around("e\u{301}|世界", "幻灯片.pptx")).await,
            "docs/幻灯片.pptx:10 [slide=3,line=1]\n  7 [slide=1,line=6]| A\tשלום\n> 10 [slide=3,line=1]| e\u{301} 🇨🇳"
        );
        assert_eq!(
            call(&ctx, around("世界|end", "t.pdf")).await,
            "docs/t.pdf:6 [page=3,line=1]\n  3 [page=1,line=2]| Second line\n> 6 [page=3,line=1]| 你好 世界👩‍👩‍👧‍👦🇨🇳\n  7 [page=3,line=2]| e\u{301} مرحبا\n\n\
             docs/t.pdf:11 [page=4,line=1]\n  8 [page=3,line=3]| مرحبا שלום\n> 11 [page=4,line=1]| The end"
        );
        assert_eq!(
            call(&ctx, json!({"pattern": "3", "path": "docs/表.xlsx", "context_before": 0, "context_after": 0, "head_limit": 1})).await,
            "docs/表.xlsx:3 [sheet='数据',row=2,cell=B2]\n> 3 [sheet='数据',row=2]| 👩‍👩‍👧‍👦 family\t3\t2024-01-01 00:00:00"
        );
    }

    /// The expected texts are nanobot 0.3.5's `GrepTool` output on the same files.
    #[tokio::test]
    async fn pdf_page_ranges_bound_and_continue_the_search_as_upstream() {
        let (_dir, ctx) = ctx();
        write_documents(&ctx);
        let bad = Grep
            .execute(
                &ctx,
                as_args(json!({"pattern": "end", "path": "docs/t.pdf", "pages": "9"})),
            )
            .await;
        assert!(bad.is_error);
        assert_eq!(
            bad.content,
            "Error: Invalid PDF page range '9': document has 4 pages; use a page number or range within 1-4."
        );
        assert_eq!(
            call(&ctx, json!({"pattern": "end", "path": "docs", "pages": "9", "output_mode": "count", "type": "pdf"})).await,
            "No matches found for pattern 'end' in docs\n\n(skipped 1 binary/unreadable files)\n\
             (first document error: docs/t.pdf: document has 4 pages; use a page number or range within 1-4)\n\
             (docs/many.pdf: continue PDF search with pages='10-102')"
        );
        assert_eq!(
            call(
                &ctx,
                json!({"pattern": "end", "path": "docs/many.pdf", "output_mode": "count"})
            )
            .await,
            "docs/many.pdf: 25\n\n(docs/many.pdf: continue PDF search with pages='101-102')\n(total matches: 25 in 1 files)"
        );
        assert_eq!(
            call(&ctx, json!({"pattern": "Hello", "path": "docs/many.pdf", "pages": "101-102", "context_before": 0, "context_after": 0})).await,
            "docs/many.pdf:2 [page=101,line=1]\n> 2 [page=101,line=1]| Hello PDF"
        );
        std::fs::write(ctx.sandbox.root().join("docs/坏.docx"), "not a zip").unwrap();
        let corrupt = Grep
            .execute(
                &ctx,
                as_args(json!({"pattern": "x", "path": "docs/坏.docx"})),
            )
            .await;
        assert!(corrupt.is_error);
        assert_eq!(
            corrupt.content,
            "Error searching document docs/坏.docx: invalid Office document: File is not a zip file"
        );
    }
}

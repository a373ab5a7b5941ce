//! `grep`: regex search over workspace files with ripgrep's matcher and searcher, and over
//! the extracted text of PDF, DOCX, XLSX and PPTX documents with source locators
//! (`[page=2,line=3]`, `[sheet='S',row=4,cell=B4]`), in upstream's three output modes
//! (content with five context lines by default, files_with_matches, count).

use grep_regex::RegexMatcherBuilder;
use serde_json::{Value, json};

use super::search::{self, MAX_RESULT_CHARS};
use source::{Hits, Row, Source, source};

use crate::registry::{Args, Tool, ToolContext, ToolOutput, arg_bool, arg_i64, arg_str, blocking};

mod source;

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
    let mut found = Found::default();
    for entry in entries.iter().filter(|e| !e.is_dir) {
        if !admit(ctx, args, entry, max_bytes, &mut found) {
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

/// Returns whether a walked file passes the glob, type, scope and size filters (what it
/// failed is counted).
fn admit(
    ctx: &ToolContext,
    args: &Args,
    entry: &search::Entry,
    max_bytes: u64,
    found: &mut Found,
) -> bool {
    let name = entry
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let glob = arg_str(args, "glob").filter(|g| !g.is_empty());
    if glob.is_some_and(|g| !search::match_glob(&entry.rel, &name, g)) {
        return false;
    }
    if !search::matches_type(&name, arg_str(args, "type")) {
        return false;
    }
    if !search::in_scope(&ctx.sandbox, &entry.path) {
        found.skipped_scope += 1;
        return false;
    }
    let Ok(size) = std::fs::metadata(&entry.path).map(|m| m.len()) else {
        found.skipped_binary += 1;
        return false;
    };
    if size > max_bytes {
        found.skipped_large += 1;
        return false;
    }
    true
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
mod tests;

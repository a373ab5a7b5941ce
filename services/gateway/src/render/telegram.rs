//! Markdown → Telegram HTML with upstream's rules (nanobot `_markdown_to_telegram_html`), built
//! on the CommonMark parser pulldown-cmark rather than regexes:
//! - fenced and indented code → `<pre><code>…</code></pre>` (language dropped), inline code →
//!   `<code>`; pipe tables → aligned box text in `<pre><code>`;
//! - headings → `<b>`; `**`/`__` → `<b>`, `*`/`_` → `<i>` (never inside words), `~~` → `<s>`;
//!   links → `<a href>`; images → a link to the image;
//! - bullets → `• `, ordered items keep their number (`1. `); nested lists indent two spaces;
//! - blockquote markers stripped; raw HTML shown as text; `& < >` escaped everywhere;
//! - the blank lines between blocks follow the source (one newline or one blank line).
//!
//! Only tags Telegram accepts are produced: `b i s u a code pre blockquote`.
//!
//! Long replies: [`split_markdown`] cuts raw Markdown into ≤ [`MAX_MESSAGE_LEN`]-character
//! chunks without unbalanced fences (upstream's `_split_telegram_markdown`);
//! [`split_markdown_html`] also re-splits any chunk whose HTML exceeds [`MAX_HTML_LEN`].
//! Streaming previews use [`strip_markdown`] (plain text, no HTML).
//!
//! ```
//! use nanobot_gateway::render::telegram::{markdown_to_html, split_markdown_html, MAX_HTML_LEN};
//! assert_eq!(markdown_to_html("# Hi\n**bold** & <tag>"), "<b>Hi</b>\n<b>bold</b> &amp; &lt;tag&gt;");
//! for chunk in split_markdown_html(&"word ".repeat(2000), MAX_HTML_LEN) {
//!     assert!(chunk.html.chars().count() <= MAX_HTML_LEN);
//! }
//! ```

use std::collections::VecDeque;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use super::{split, table};

/// Upstream's chunk size for raw Markdown (a margin under Telegram's 4096 for edits).
pub const MAX_MESSAGE_LEN: usize = 4000;
/// Telegram's message length limit, which every rendered HTML chunk respects.
pub const MAX_HTML_LEN: usize = 4096;

/// Returns `md` as Telegram HTML (for `parse_mode: "HTML"`).
pub fn markdown_to_html(md: &str) -> String {
    Renderer::new(md, Mode::Html).run()
}

/// Returns `md` as readable plain text without Markdown syntax, for streaming previews (sent
/// without `parse_mode`).
pub fn strip_markdown(md: &str) -> String {
    Renderer::new(md, Mode::Plain).run()
}

/// Returns `md` in chunks of at most `max_chars` characters, cut at a newline, else a space,
/// else hard; never leaving a ``` fence unbalanced (a cut inside code closes the chunk with
/// "\n```" and reopens the next with the same fence line). Blank input gives no chunks.
pub fn split_markdown(md: &str, max_chars: usize) -> Vec<String> {
    split::split(md, max_chars)
}

/// One message of a long reply: its Markdown and the HTML to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HtmlChunk {
    /// The raw Markdown of this chunk (for a plain-text fallback).
    pub markdown: String,
    /// The chunk rendered with [`markdown_to_html`].
    pub html: String,
}

/// Returns `md` split into messages whose HTML has at most `max_html_chars` characters (use
/// [`MAX_HTML_LEN`]): chunks of [`MAX_MESSAGE_LEN`] first, and any chunk that HTML tags and
/// entities push over the limit split again, smaller. A chunk that cannot be split further (a
/// single character rendering longer than the limit) is returned as is.
pub fn split_markdown_html(md: &str, max_html_chars: usize) -> Vec<HtmlChunk> {
    let mut pending: VecDeque<String> = split_markdown(md, MAX_MESSAGE_LEN).into();
    let mut chunks = Vec::new();
    while let Some(markdown) = pending.pop_front() {
        let html = markdown_to_html(&markdown);
        let html_len = html.chars().count();
        let md_len = markdown.chars().count();
        if html_len <= max_html_chars || md_len <= 1 {
            chunks.push(HtmlChunk { markdown, html });
            continue;
        }
        let limit = (md_len * max_html_chars / html_len)
            .saturating_sub(8)
            .clamp(1, md_len - 1);
        let parts = split_markdown(&markdown, limit);
        if parts.len() <= 1 {
            chunks.push(HtmlChunk { markdown, html });
            continue;
        }
        for part in parts.into_iter().rev() {
            pending.push_front(part);
        }
    }
    chunks
}

/// Returns `text` escaped for Telegram HTML (`&`, `<`, `>`).
pub fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Returns a tool hint as upstream shows it: an expandable (collapsed) blockquote.
pub fn tool_hint_html(text: &str) -> String {
    if text.is_empty() {
        return String::new();
    }
    format!("<blockquote expandable>{}</blockquote>", escape_html(text))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Html,
    Plain,
}

/// One open block container: where its previous child block ended in the source, and how long
/// the output was when the container opened.
#[derive(Debug)]
struct Level {
    prev_end: Option<usize>,
    out_at_start: usize,
}

#[derive(Debug, Default)]
struct TableBuf {
    rows: Vec<Vec<String>>,
    row: Vec<String>,
    cell: String,
}

struct Renderer<'a> {
    src: &'a str,
    mode: Mode,
    out: String,
    levels: Vec<Level>,
    /// Next number of each open list (`None` for bullets).
    lists: Vec<Option<u64>>,
    code: Option<String>,
    table: Option<TableBuf>,
}

impl<'a> Renderer<'a> {
    fn new(src: &'a str, mode: Mode) -> Self {
        Self {
            src,
            mode,
            out: String::with_capacity(src.len() + src.len() / 4),
            levels: vec![Level {
                prev_end: None,
                out_at_start: 0,
            }],
            lists: Vec::new(),
            code: None,
            table: None,
        }
    }

    fn run(mut self) -> String {
        let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
        for (event, range) in Parser::new_ext(self.src, options).into_offset_iter() {
            match event {
                Event::Start(tag) if is_block(&tag) => self.open_block(tag, range.start),
                Event::End(tag) if is_block_end(tag) => self.close_block(tag, range.end),
                Event::Start(tag) => self.open_inline(tag),
                Event::End(tag) => self.close_inline(tag),
                Event::Text(text) => self.text(&text),
                Event::Code(code) => self.inline_code(&code),
                Event::Html(raw) | Event::InlineHtml(raw) => self.text(&raw),
                Event::SoftBreak | Event::HardBreak => self.text("\n"),
                Event::Rule => {
                    self.separate(range.start);
                    self.out.push_str("──────────");
                    self.ended(range.end);
                }
                Event::InlineMath(t) | Event::DisplayMath(t) => self.text(&t),
                Event::FootnoteReference(_) | Event::TaskListMarker(_) => {}
            }
        }
        let len = self.out.trim_end().len();
        self.out.truncate(len);
        self.out
    }

    /// Writes the break before a block: a blank line when the source has one, else a newline.
    fn separate(&mut self, start: usize) {
        let level = self.levels.last().expect("the root level is never popped");
        match level.prev_end {
            Some(prev_end) => {
                let content_end = self.src[..prev_end].trim_end().len();
                let gap = &self.src[content_end..start.max(content_end)];
                let blank_line = gap.matches('\n').count() >= 2;
                self.out.push_str(if blank_line { "\n\n" } else { "\n" });
            }
            None if self.out.len() > level.out_at_start && !self.out.ends_with('\n') => {
                self.out.push('\n');
            }
            None => {}
        }
    }

    fn ended(&mut self, end: usize) {
        if let Some(level) = self.levels.last_mut() {
            level.prev_end = Some(end);
        }
    }

    fn open_block(&mut self, tag: Tag<'_>, start: usize) {
        if matches!(tag, Tag::TableHead | Tag::TableRow | Tag::TableCell) {
            return;
        }
        self.separate(start);
        match tag {
            Tag::Heading { .. } => self.tag("<b>"),
            Tag::CodeBlock(_) => self.code = Some(String::new()),
            Tag::List(first) => self.lists.push(first),
            Tag::Item => {
                let depth = self.lists.len().saturating_sub(1);
                self.out.push_str(&"  ".repeat(depth));
                match self.lists.last_mut() {
                    Some(Some(n)) => {
                        self.out.push_str(&format!("{n}. "));
                        *n += 1;
                    }
                    _ => self.out.push_str("• "),
                }
            }
            Tag::Table(_) => self.table = Some(TableBuf::default()),
            _ => {}
        }
        self.levels.push(Level {
            prev_end: None,
            out_at_start: self.out.len(),
        });
    }

    fn close_block(&mut self, tag: TagEnd, end: usize) {
        match tag {
            TagEnd::TableCell => {
                if let Some(table) = &mut self.table {
                    let cell = std::mem::take(&mut table.cell);
                    table.row.push(cell.trim().to_string());
                }
                return;
            }
            TagEnd::TableHead | TagEnd::TableRow => {
                if let Some(table) = &mut self.table {
                    let row = std::mem::take(&mut table.row);
                    table.rows.push(row);
                }
                return;
            }
            _ => {}
        }
        self.levels.pop();
        match tag {
            TagEnd::Heading(_) => self.tag("</b>"),
            TagEnd::CodeBlock => {
                let code = self.code.take().unwrap_or_default();
                self.preformatted(code.strip_suffix('\n').unwrap_or(&code));
            }
            TagEnd::List(_) => {
                self.lists.pop();
            }
            TagEnd::Table => {
                let rows = self.table.take().map(|t| t.rows).unwrap_or_default();
                self.preformatted(&table::render_box(&rows));
            }
            _ => {}
        }
        self.ended(end);
    }

    fn open_inline(&mut self, tag: Tag<'_>) {
        if self.table.is_some() {
            return;
        }
        match tag {
            Tag::Emphasis => self.tag("<i>"),
            Tag::Strong => self.tag("<b>"),
            Tag::Strikethrough => self.tag("<s>"),
            Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                let href = escape_html(&dest_url).replace('"', "&quot;");
                self.tag(&format!("<a href=\"{href}\">"));
            }
            _ => {}
        }
    }

    fn close_inline(&mut self, tag: TagEnd) {
        if self.table.is_some() {
            return;
        }
        match tag {
            TagEnd::Emphasis => self.tag("</i>"),
            TagEnd::Strong => self.tag("</b>"),
            TagEnd::Strikethrough => self.tag("</s>"),
            TagEnd::Link | TagEnd::Image => self.tag("</a>"),
            _ => {}
        }
    }

    fn tag(&mut self, tag: &str) {
        if self.mode == Mode::Html {
            self.out.push_str(tag);
        }
    }

    fn text(&mut self, text: &str) {
        if let Some(code) = &mut self.code {
            code.push_str(text);
        } else if let Some(table) = &mut self.table {
            table.cell.push_str(&text.replace('\n', " "));
        } else if self.mode == Mode::Html {
            self.out.push_str(&escape_html(text));
        } else {
            self.out.push_str(text);
        }
    }

    fn inline_code(&mut self, code: &str) {
        if let Some(table) = &mut self.table {
            table.cell.push_str(code);
            return;
        }
        self.tag("<code>");
        self.text(code);
        self.tag("</code>");
    }

    fn preformatted(&mut self, text: &str) {
        self.tag("<pre><code>");
        match self.mode {
            Mode::Html => self.out.push_str(&escape_html(text)),
            Mode::Plain => self.out.push_str(text),
        }
        self.tag("</code></pre>");
    }
}

fn is_block(tag: &Tag<'_>) -> bool {
    !matches!(
        tag,
        Tag::Emphasis
            | Tag::Strong
            | Tag::Strikethrough
            | Tag::Superscript
            | Tag::Subscript
            | Tag::Link { .. }
            | Tag::Image { .. }
    )
}

fn is_block_end(tag: TagEnd) -> bool {
    !matches!(
        tag,
        TagEnd::Emphasis
            | TagEnd::Strong
            | TagEnd::Strikethrough
            | TagEnd::Superscript
            | TagEnd::Subscript
            | TagEnd::Link
            | TagEnd::Image
    )
}

#[cfg(test)]
mod tests;

//! Markdown → Telegram HTML exactly as nanobot 0.3.5's `_markdown_to_telegram_html` (a port of
//! its regex steps in the `html` module, checked against 0.3.5's output in
//! `tests/conformance/telegram_html.json`):
//! - fenced code → `<pre><code>…</code></pre>` (info line dropped, last newline kept), inline
//!   code → `<code>`; pipe tables → aligned text in `<pre><code>`;
//! - headings → `<b>`; `**`/`__` → `<b>`, `_x_` → `<i>` (not inside ASCII words), `~~` → `<s>`;
//!   `*x*` and `2*3*4` stay as typed; links → `<a href>`;
//! - `-`/`*` bullets at a line's start → `• `, numbers keep theirs (`1. `); indented (nested)
//!   items stay as typed; blockquote markers are dropped;
//! - `& < >` escaped everywhere outside tags, entities included (`&amp;` → `&amp;amp;`).
//!
//! Long replies: [`split_markdown`] cuts raw Markdown into chunks of ≤ [`MAX_MESSAGE_LEN`]
//! UTF-16 code units (Telegram's unit) without unbalanced fences or halved grapheme clusters
//! (upstream's `_split_telegram_markdown`, which counts Python characters);
//! [`split_markdown_html`] also re-splits any chunk whose HTML exceeds [`MAX_HTML_LEN`].
//! Streaming previews use [`strip_markdown`] (plain text, no HTML).
//!
//! ```
//! use nanobot_gateway::render::telegram::{markdown_to_html, split_markdown_html, MAX_HTML_LEN};
//! assert_eq!(markdown_to_html("# Hi\n**bold** & <tag>"), "<b>Hi</b>\n<b>bold</b> &amp; &lt;tag&gt;");
//! for chunk in split_markdown_html(&"word ".repeat(2000), MAX_HTML_LEN) {
//!     assert!(chunk.html.encode_utf16().count() <= MAX_HTML_LEN);
//! }
//! ```

use std::collections::VecDeque;

use super::measure::Limit;
use super::split;

mod html;
mod pattern;
mod table;

/// Upstream's chunk size for raw Markdown (a margin under Telegram's 4096 for edits), in UTF-16
/// code units.
pub const MAX_MESSAGE_LEN: usize = 4000;
/// Telegram's message length limit in UTF-16 code units (how Telegram counts lengths and entity
/// offsets; an emoji outside the BMP counts 2), which every rendered HTML chunk respects.
pub const MAX_HTML_LEN: usize = 4096;

/// Returns `md` as Telegram HTML (for `parse_mode: "HTML"`).
pub fn markdown_to_html(md: &str) -> String {
    html::markdown_to_html(md)
}

/// Returns `md` as readable plain text without Markdown markers, for streaming previews (sent
/// without `parse_mode`), as 0.3.5's `_strip_md_block`.
pub fn strip_markdown(md: &str) -> String {
    html::strip_markdown(md)
}

/// Returns `md` in chunks of at most `max_units` UTF-16 code units, cut at a newline, else a
/// space, else hard between grapheme clusters; never leaving a ``` fence unbalanced (a cut
/// inside code closes the chunk with "\n```" and reopens the next with the same fence line).
/// Blank input gives no chunks.
pub fn split_markdown(md: &str, max_units: usize) -> Vec<String> {
    split::split_markdown(md, Limit::utf16(max_units))
}

/// One message of a long reply: its Markdown and the HTML to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HtmlChunk {
    /// The raw Markdown of this chunk (for a plain-text fallback).
    pub markdown: String,
    /// The chunk rendered with [`markdown_to_html`].
    pub html: String,
}

/// Returns `md` split into messages whose HTML has at most `max_html_units` UTF-16 code units
/// (use [`MAX_HTML_LEN`]): chunks of [`MAX_MESSAGE_LEN`] first, and any chunk that HTML tags
/// and entities push over the limit split again, smaller. The HTML itself is never cut (so
/// never inside a tag or an entity such as `&amp;`): each chunk is rendered whole from its
/// Markdown. A chunk that cannot be split further (a single cluster rendering longer than the
/// limit) is returned as is.
pub fn split_markdown_html(md: &str, max_html_units: usize) -> Vec<HtmlChunk> {
    let mut pending: VecDeque<String> = split_markdown(md, MAX_MESSAGE_LEN).into();
    let mut chunks = Vec::new();
    while let Some(markdown) = pending.pop_front() {
        let html = markdown_to_html(&markdown);
        let html_len = html.encode_utf16().count();
        let md_len = markdown.encode_utf16().count();
        if html_len <= max_html_units || md_len <= 1 {
            chunks.push(HtmlChunk { markdown, html });
            continue;
        }
        let limit = (md_len * max_html_units / html_len)
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

#[cfg(test)]
mod tests;

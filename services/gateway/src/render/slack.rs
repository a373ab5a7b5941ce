//! Markdown → Slack mrkdwn (upstream renders with slackify-markdown plus fix-ups), built on
//! pulldown-cmark:
//! - `**bold**`/`__bold__` → `*bold*`, `*italic*`/`_italic_` → `_italic_`, `~~s~~` → `~s~`;
//! - headings → `*heading*`; links → `<url|text>` (`<url>` when the text is the URL); images →
//!   a link to the image;
//! - inline code → `` `code` ``, fenced and indented code → a ``` block (language dropped);
//! - bullets → `• `, ordered items keep their number; nested lists indent two spaces;
//! - blockquotes → `> ` lines; pipe tables → one line per row, `*header*: value · …` (upstream);
//! - `&`, `<` and `>` escaped everywhere (Slack's only control characters), raw HTML as text.
//!
//! Long replies: [`split_mrkdwn`] cuts the Markdown with the fence-safe splitter (between
//! grapheme clusters) and renders each chunk, so every message is at most [`MAX_MESSAGE_LEN`]
//! characters (code points, as upstream counts; Slack's `text` takes 40,000).
//!
//! ```
//! use nanobot_gateway::render::slack::markdown_to_mrkdwn;
//! assert_eq!(markdown_to_mrkdwn("**Hi** [docs](https://x.io) & <b>"), "*Hi* <https://x.io|docs> &amp; &lt;b&gt;");
//! ```

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use super::measure::Limit;
use super::split::split_markdown;

/// Upstream's chunk size (`SLACK_MAX_MESSAGE_LEN`: Slack takes ~40,000, with a margin).
pub const MAX_MESSAGE_LEN: usize = 39_000;

/// Returns `md` as Slack mrkdwn (the `text` of `chat.postMessage`).
pub fn markdown_to_mrkdwn(md: &str) -> String {
    let mut r = Renderer::default();
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    for event in Parser::new_ext(md, options) {
        r.event(event);
    }
    r.bufs.swap_remove(0).trim_end().to_string()
}

/// Returns `md` rendered as messages of at most `max_chars` characters (code points) each
/// (use [`MAX_MESSAGE_LEN`]); a chunk whose rendering grew past the limit is split again,
/// smaller. Cuts fall between grapheme clusters, in the Markdown, so never inside an escape
/// such as `&amp;` or a `<url|text>` link.
pub fn split_mrkdwn(md: &str, max_chars: usize) -> Vec<String> {
    let limit = Limit::code_points(max_chars);
    let mut pending: std::collections::VecDeque<String> = split_markdown(md, limit).into();
    let mut out = Vec::new();
    while let Some(chunk) = pending.pop_front() {
        let text = markdown_to_mrkdwn(&chunk);
        let (len, md_len) = (limit.measure(&text), limit.measure(&chunk));
        if len <= max_chars || md_len <= 1 {
            out.push(text);
            continue;
        }
        let smaller = (md_len * max_chars / len)
            .saturating_sub(8)
            .clamp(1, md_len - 1);
        let parts = split_markdown(&chunk, limit.with_max(smaller));
        if parts.len() <= 1 {
            out.push(text);
            continue;
        }
        for part in parts.into_iter().rev() {
            pending.push_front(part);
        }
    }
    out.retain(|t| !t.is_empty());
    out
}

/// Returns `text` with Slack's control characters escaped.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Returns a tool hint as a quote of escaped plain text (its `_` and `*` stay literal).
pub fn tool_hint(text: &str) -> String {
    text.lines()
        .map(|l| format!("> {}", escape(l).replace('`', "'")))
        .collect::<Vec<_>>()
        .join("\n")
}

#[derive(Default)]
struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
    row: Vec<String>,
    in_head: bool,
}

struct Renderer {
    /// Output buffers: the message, then one per open blockquote, link or table cell.
    bufs: Vec<String>,
    /// Open lists: the next number of an ordered one, `None` for bullets.
    lists: Vec<Option<u64>>,
    links: Vec<String>,
    table: Option<Table>,
    /// Just wrote a list marker: the item's first block starts on this line.
    fresh_item: bool,
}

impl Default for Renderer {
    fn default() -> Self {
        Self {
            bufs: vec![String::new()],
            lists: Vec::new(),
            links: Vec::new(),
            table: None,
            fresh_item: false,
        }
    }
}

impl Renderer {
    fn out(&mut self) -> &mut String {
        self.bufs.last_mut().expect("the message buffer")
    }

    fn push(&mut self, text: &str) {
        self.fresh_item = false;
        self.out().push_str(text);
    }

    /// Separates a new block from what precedes it: a blank line, a newline inside lists.
    fn block(&mut self) {
        if self.fresh_item {
            return;
        }
        let sep = if self.lists.is_empty() { "\n\n" } else { "\n" };
        let out = self.out();
        if out.is_empty() {
            return;
        }
        let trimmed = out.trim_end_matches('\n').len();
        out.truncate(trimmed);
        out.push_str(sep);
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(t) => self.push(&escape(&t)),
            Event::Code(c) => self.push(&format!("`{}`", escape(&c))),
            Event::Html(h) | Event::InlineHtml(h) => self.push(&escape(&h)),
            Event::SoftBreak | Event::HardBreak => self.push("\n"),
            Event::Rule => {
                self.block();
                self.push("───");
            }
            Event::TaskListMarker(done) => self.push(if done { "☑ " } else { "☐ " }),
            Event::FootnoteReference(f) => self.push(&format!("[{}]", escape(&f))),
            Event::InlineMath(m) | Event::DisplayMath(m) => self.push(&escape(&m)),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph => self.block(),
            Tag::Heading { .. } => {
                self.block();
                self.push("*");
            }
            Tag::BlockQuote(_) => {
                self.block();
                self.bufs.push(String::new());
            }
            Tag::CodeBlock(_) => {
                self.block();
                self.push("```\n");
            }
            Tag::List(first) => {
                if self.lists.is_empty() {
                    self.block();
                } else if !self.out().ends_with('\n') {
                    self.push("\n");
                }
                self.lists.push(first);
            }
            Tag::Item => {
                if !self.out().is_empty() && !self.out().ends_with('\n') {
                    self.push("\n");
                }
                let depth = self.lists.len().saturating_sub(1);
                let marker = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let m = format!("{n}. ");
                        *n += 1;
                        m
                    }
                    _ => "• ".to_string(),
                };
                self.push(&format!("{}{marker}", "  ".repeat(depth)));
                self.fresh_item = true;
            }
            Tag::Emphasis => self.push("_"),
            Tag::Strong => self.push("*"),
            Tag::Strikethrough => self.push("~"),
            Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                self.links.push(dest_url.to_string());
                self.bufs.push(String::new());
            }
            Tag::Table(_) => {
                self.block();
                self.table = Some(Table::default());
            }
            Tag::TableHead => {
                if let Some(t) = &mut self.table {
                    t.in_head = true;
                }
            }
            Tag::TableCell => self.bufs.push(String::new()),
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Heading(_) => self.push("*"),
            TagEnd::BlockQuote(_) => {
                let quoted = self.bufs.pop().unwrap_or_default();
                let quoted = quoted
                    .trim_end()
                    .lines()
                    .map(|l| format!("> {l}"))
                    .collect::<Vec<_>>()
                    .join("\n");
                self.push(&quoted);
            }
            TagEnd::CodeBlock => {
                if !self.out().ends_with('\n') {
                    self.push("\n");
                }
                self.push("```");
            }
            TagEnd::List(_) => {
                self.lists.pop();
            }
            TagEnd::Emphasis => self.push("_"),
            TagEnd::Strong => self.push("*"),
            TagEnd::Strikethrough => self.push("~"),
            TagEnd::Link | TagEnd::Image => {
                let text = self.bufs.pop().unwrap_or_default();
                let url = self.links.pop().unwrap_or_default();
                let url = url
                    .replace('<', "%3C")
                    .replace('>', "%3E")
                    .replace('|', "%7C");
                if text.is_empty() || text == escape(&url) {
                    self.push(&format!("<{url}>"));
                } else {
                    self.push(&format!("<{url}|{text}>"));
                }
            }
            TagEnd::TableCell => {
                let cell = self.bufs.pop().unwrap_or_default().trim().to_string();
                if let Some(t) = &mut self.table {
                    match t.in_head {
                        true => t.head.push(cell),
                        false => t.row.push(cell),
                    }
                }
            }
            TagEnd::TableHead => {
                if let Some(t) = &mut self.table {
                    t.in_head = false;
                }
            }
            TagEnd::TableRow => {
                if let Some(t) = &mut self.table {
                    let row = std::mem::take(&mut t.row);
                    t.rows.push(row);
                }
            }
            TagEnd::Table => {
                if let Some(t) = self.table.take() {
                    let lines: Vec<String> = t
                        .rows
                        .iter()
                        .map(|row| {
                            row.iter()
                                .enumerate()
                                .filter(|(_, c)| !c.is_empty())
                                .map(|(i, c)| match t.head.get(i) {
                                    Some(h) if !h.is_empty() => format!("*{h}*: {c}"),
                                    _ => c.clone(),
                                })
                                .collect::<Vec<_>>()
                                .join(" · ")
                        })
                        .filter(|l| !l.is_empty())
                        .collect();
                    self.push(&lines.join("\n"));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emphasis_headings_and_strikes_become_mrkdwn() {
        assert_eq!(
            markdown_to_mrkdwn("**bold** and __also__"),
            "*bold* and *also*"
        );
        assert_eq!(markdown_to_mrkdwn("*it* and _it_"), "_it_ and _it_");
        assert_eq!(markdown_to_mrkdwn("~~gone~~"), "~gone~");
        assert_eq!(markdown_to_mrkdwn("# Title\nbody"), "*Title*\n\nbody");
        assert_eq!(markdown_to_mrkdwn("snake_case_name"), "snake_case_name");
    }

    #[test]
    fn links_become_angle_links_and_bare_urls_stay_links() {
        assert_eq!(
            markdown_to_mrkdwn("see [the docs](https://x.io/a?b=1&c=2)"),
            "see <https://x.io/a?b=1&c=2|the docs>"
        );
        assert_eq!(
            markdown_to_mrkdwn("<https://x.io>"),
            "<https://x.io>",
            "an autolink's text is its URL"
        );
        assert_eq!(
            markdown_to_mrkdwn("![chart](https://x.io/c.png)"),
            "<https://x.io/c.png|chart>"
        );
        assert_eq!(
            markdown_to_mrkdwn("[a|b](https://x.io/p|q>)"),
            "<https://x.io/p%7Cq%3E|a|b>"
        );
    }

    #[test]
    fn ampersands_and_angle_brackets_are_escaped_everywhere_even_in_code() {
        assert_eq!(
            markdown_to_mrkdwn("a < b & c > d <@U123>"),
            "a &lt; b &amp; c &gt; d &lt;@U123&gt;"
        );
        assert_eq!(markdown_to_mrkdwn("`x < y`"), "`x &lt; y`");
        assert_eq!(
            markdown_to_mrkdwn("```rust\nif a && b { x<y }\n```"),
            "```\nif a &amp;&amp; b { x&lt;y }\n```"
        );
        assert_eq!(markdown_to_mrkdwn("<b>raw</b>"), "&lt;b&gt;raw&lt;/b&gt;");
    }

    #[test]
    fn lists_quotes_and_tables_are_readable() {
        assert_eq!(
            markdown_to_mrkdwn("Items:\n\n- one\n- **two**\n  - nested\n\n1. first\n2. second"),
            "Items:\n\n• one\n• *two*\n  • nested\n\n1. first\n2. second"
        );
        assert_eq!(markdown_to_mrkdwn("> quoted\n> more"), "> quoted\n> more");
        assert_eq!(
            markdown_to_mrkdwn("| Name | Age |\n|---|---|\n| Ann | 3 |\n| Bo |  |"),
            "*Name*: Ann · *Age*: 3\n*Name*: Bo"
        );
    }

    #[test]
    fn long_answers_split_under_the_limit_with_balanced_code() {
        let mut md = String::from("```\n");
        md.push_str(&"let a = b && c;\n".repeat(400));
        md.push_str("```\nend **ok**");
        let parts = split_mrkdwn(&md, 2_000);
        assert!(parts.len() >= 4, "{}", parts.len());
        for p in &parts {
            assert!(p.chars().count() <= 2_000, "{}", p.chars().count());
            assert_eq!(p.matches("```").count() % 2, 0, "{p}");
        }
        assert!(parts.last().unwrap().ends_with("end *ok*"));
        let joined = parts.join("\n");
        assert_eq!(joined.matches("let a = b &amp;&amp; c;").count(), 400);
        assert!(split_mrkdwn("  ", MAX_MESSAGE_LEN).is_empty());
    }

    #[test]
    fn tool_hints_are_quoted_literal_text() {
        assert_eq!(
            tool_hint("read_file(\"a_b*.md\")\nexec(`ls <x>`)"),
            "> read_file(\"a_b*.md\")\n> exec('ls &lt;x&gt;')"
        );
    }
}

//! Markdown → Slack mrkdwn exactly as nanobot 0.3.5's Slack channel sends it
//! (`SlackChannel._to_mrkdwn`):
//! 1. pipe tables outside ``` fences become one line per row, `**header**: cell · …`;
//! 2. the text goes through slackify-markdown ([`slackify`](self::slackify), a port);
//! 3. fix-ups outside code: a `**x**` left over becomes `*x*`, a `# heading` line left over
//!    `*heading*`, and a bare URL's `&amp;` goes back to `&`.
//!
//! Long replies: [`split_mrkdwn`] renders the whole reply, then cuts the mrkdwn into messages
//! of at most [`MAX_MESSAGE_LEN`] characters (code points, as upstream counts) as upstream's
//! `split_message` does, except that a hard cut falls between grapheme clusters and never
//! inside an `&amp;` escape or a `<url|text>` link (upstream cuts anywhere).
//!
//! ```
//! use nanobot_gateway::render::slack::markdown_to_mrkdwn;
//! assert_eq!(markdown_to_mrkdwn("**Hi** [docs](https://x.io) & <b> <@U1>"), "*Hi* <https://x.io|docs> &amp; &lt;b&gt; <@U1>");
//! ```

mod slackify;
mod url;

use std::sync::LazyLock;

use regex::{Captures, Regex};

use super::measure::Limit;
use super::message::{is_py_space, split_message};

/// Upstream's chunk size (`SLACK_MAX_MESSAGE_LEN`: Slack takes ~40,000, with a margin).
pub const MAX_MESSAGE_LEN: usize = 39_000;

/// Python's `\s` (Rust's lacks U+001C..U+001F), for the upstream patterns below.
macro_rules! py_space {
    () => {
        r"[\s\x1c-\x1f]"
    };
}

static FENCE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"```[\s\S]*?```").expect("fence"));
static INLINE_CODE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"`[^`]+`").expect("code"));
static TABLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?m)^\|.*\|$(?:\n\|(?:",
        py_space!(),
        r"|[:|-])*\|$)(?:\n\|.*\|$)*"
    ))
    .expect("table")
});
static LEFTOVER_BOLD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\*\*(.+?)\*\*").expect("bold"));
static LEFTOVER_HEADER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(concat!(r"(?m)^#{1,6}", py_space!(), r"+(.+)$")).expect("header"));
static URL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"https?://[^\s\x1c-\x1f]+").expect("url"));

/// Returns `md` as Slack mrkdwn (the `text` of `chat.postMessage`), as upstream's `_to_mrkdwn`.
pub fn markdown_to_mrkdwn(md: &str) -> String {
    if md.is_empty() {
        return String::new();
    }
    let (text, fences) = hide(md, &[&FENCE]);
    let text = TABLE.replace_all(&text, |c: &Captures<'_>| convert_table(&c[0]));
    let text = restore(&text, &fences);
    let text = fix_up(&slackify::slackify(&text));
    text.trim_end_matches('\n').to_string()
}

/// Returns the messages a reply becomes: its mrkdwn cut at `max_chars` characters (use
/// [`MAX_MESSAGE_LEN`]); an empty reply is one space (upstream posts `" "`).
pub fn split_mrkdwn(md: &str, max_chars: usize) -> Vec<String> {
    let text = match md {
        "" => " ".to_string(),
        md => markdown_to_mrkdwn(md),
    };
    split_message(&text, Limit::code_points(max_chars), outside_escapes)
}

/// Moves a hard cut back before an escape (`&amp;`) or a `<…>` link it would halve.
fn outside_escapes(text: &str, cut: usize) -> usize {
    let before = &text[..cut];
    let entity = before
        .rfind('&')
        .filter(|&amp| !before[amp..].contains(';') && cut - amp < 8);
    let link = before.rfind('<').filter(|&lt| !before[lt..].contains('>'));
    match entity.into_iter().chain(link).min() {
        Some(start) if start > 0 => start,
        _ => cut,
    }
}

/// Replaces each match of `patterns` (in turn) with a placeholder, as upstream does.
fn hide(text: &str, patterns: &[&Regex]) -> (String, Vec<String>) {
    let mut saved = Vec::new();
    let mut text = text.to_string();
    for pattern in patterns {
        text = pattern
            .replace_all(&text, |c: &Captures<'_>| {
                saved.push(c[0].to_string());
                format!("\0CB{}\0", saved.len() - 1)
            })
            .into_owned();
    }
    (text, saved)
}

fn restore(text: &str, saved: &[String]) -> String {
    let mut text = text.to_string();
    for (i, block) in saved.iter().enumerate() {
        text = text.replace(&format!("\0CB{i}\0"), block);
    }
    text
}

/// Upstream's `_fixup_mrkdwn`: what slackify-markdown leaves, outside code.
fn fix_up(text: &str) -> String {
    let (text, code) = hide(text, &[&FENCE, &INLINE_CODE]);
    let text = LEFTOVER_BOLD.replace_all(&text, "*$1*");
    let text = LEFTOVER_HEADER.replace_all(&text, "*$1*");
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    let mut from = 0;
    while let Some(m) = URL.find_at(&text, from) {
        from = m.start() + 1;
        if text[..m.start()].ends_with(['|', '<']) {
            continue;
        }
        out.push_str(&text[last..m.start()]);
        out.push_str(&m.as_str().replace("&amp;", "&"));
        last = m.end();
        from = m.end();
    }
    out.push_str(&text[last..]);
    restore(&out, &code)
}

/// Upstream's `_convert_table`: each row a line of `**header**: cell`, joined with ` · `.
fn convert_table(table: &str) -> String {
    let lines: Vec<&str> = py_lines(py_strip(table))
        .into_iter()
        .map(py_strip)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.len() < 2 {
        return table.to_string();
    }
    let cells = |line: &str| -> Vec<String> {
        line.trim_matches('|')
            .split('|')
            .map(|c| py_strip(c).to_string())
            .collect()
    };
    let headers = cells(lines[0]);
    let separator = lines[1]
        .chars()
        .all(|c| c == '|' || c == ':' || c == '-' || is_py_space(c));
    let start = if separator { 2 } else { 1 };
    let rows: Vec<String> = lines[start..]
        .iter()
        .filter_map(|line| {
            let row = cells(line);
            let parts: Vec<String> = headers
                .iter()
                .enumerate()
                .filter_map(|(i, h)| {
                    let cell = row.get(i).map_or("", String::as_str);
                    (!cell.is_empty()).then(|| format!("**{h}**: {cell}"))
                })
                .collect();
            (!parts.is_empty()).then(|| parts.join(" · "))
        })
        .collect();
    rows.join("\n")
}

/// Python's `str.strip()`.
fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// Python's `str.splitlines()`.
fn py_lines(s: &str) -> Vec<&str> {
    let breaks = |c: char| {
        matches!(
            c,
            '\n' | '\r'
                | '\u{b}'
                | '\u{c}'
                | '\u{1c}'
                | '\u{1d}'
                | '\u{1e}'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        )
    };
    let mut lines = Vec::new();
    let mut rest = s;
    while let Some(at) = rest.find(breaks) {
        lines.push(&rest[..at]);
        let skip = if rest[at..].starts_with("\r\n") {
            2
        } else {
            rest[at..].chars().next().map_or(1, char::len_utf8)
        };
        rest = &rest[at + skip..];
    }
    if !rest.is_empty() {
        lines.push(rest);
    }
    lines
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
        assert_eq!(markdown_to_mrkdwn("~~gone~~ ~kept~"), "~gone~ ~kept~");
        assert_eq!(markdown_to_mrkdwn("# Title\nbody"), "*Title*\n\nbody");
        assert_eq!(markdown_to_mrkdwn("snake_case_name"), "snake_case_name");
        assert_eq!(markdown_to_mrkdwn("这是**很重要**的事"), "这是*很重要*的事");
    }

    #[test]
    fn links_become_angle_links_and_autolinks_keep_their_text() {
        assert_eq!(
            markdown_to_mrkdwn("see [the docs](https://x.io/a?b=1&c=2)"),
            "see <https://x.io/a?b=1&c=2|the docs>"
        );
        assert_eq!(
            markdown_to_mrkdwn("<https://x.io>"),
            "<https://x.io|https://x.io>"
        );
        assert_eq!(
            markdown_to_mrkdwn("![chart](https://x.io/c.png) ![rel](c.png)"),
            "<https://x.io/c.png|chart> rel"
        );
        assert_eq!(
            markdown_to_mrkdwn("[文档](https://example.com/文档?q=1&x=2)"),
            "<https://example.com/%E6%96%87%E6%A1%A3?q=1&x=2|文档>"
        );
    }

    #[test]
    fn text_is_escaped_but_mentions_and_code_stay_as_written() {
        assert_eq!(
            markdown_to_mrkdwn("a < b & c > d <@U123> <#C1|general> <!here>"),
            "a &lt; b &amp; c &gt; d <@U123> <#C1|general> <!here>"
        );
        assert_eq!(markdown_to_mrkdwn("`x < y`"), "`x < y`");
        assert_eq!(
            markdown_to_mrkdwn("```rust\nif a && b { x<y }\n```"),
            "```\nif a && b { x<y }\n```"
        );
        assert_eq!(markdown_to_mrkdwn("<b>raw</b>"), "&lt;b&gt;raw&lt;/b&gt;");
    }

    #[test]
    fn lists_quotes_and_tables_render_as_upstream() {
        assert_eq!(
            markdown_to_mrkdwn("Items:\n\n- one\n- **two**\n  - nested\n\n1. first\n2. second"),
            "Items:\n\n•   one\n•   *two*\n    ◦   nested\n\n1.  first\n2.  second"
        );
        assert_eq!(markdown_to_mrkdwn("> quoted\n> more"), "> quoted\nmore");
        assert_eq!(
            markdown_to_mrkdwn("| Name | Age |\n|---|---|\n| Ann | 3 |\n| Bo |  |"),
            "*Name*: Ann · *Age*: 3\n*Name*: Bo"
        );
    }

    #[test]
    fn long_answers_split_under_the_limit_keeping_escapes_links_and_clusters_whole() {
        let md = "ab &amp; <https://x.io|x> ".repeat(3);
        let parts = split_mrkdwn(&md, 12);
        assert!(parts.iter().all(|p| p.chars().count() <= 12), "{parts:?}");
        assert_eq!(
            parts.concat().replace(' ', ""),
            markdown_to_mrkdwn(&md).replace(' ', "")
        );
        assert!(parts.iter().all(|p| !p.ends_with("&am")), "{parts:?}");
        let family = "👩\u{200d}👩\u{200d}👧\u{200d}👦";
        assert_eq!(split_mrkdwn(&family.repeat(2), 8), [family, family]);
        assert_eq!(split_mrkdwn("", MAX_MESSAGE_LEN), [" "]);
    }

    #[test]
    fn tool_hints_are_quoted_literal_text() {
        assert_eq!(
            tool_hint("read_file(\"a_b*.md\")\nexec(`ls <x>`)"),
            "> read_file(\"a_b*.md\")\n> exec('ls &lt;x&gt;')"
        );
    }
}

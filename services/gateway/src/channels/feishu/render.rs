//! How a reply looks on Feishu, as 0.3.5 renders it: one message type per reply
//! ([`format_of`]: `text` for short plain text, `post` for text with links, a markdown card for
//! anything with markdown or longer than 2,000 characters), cut in chunks whose JSON-escaped
//! UTF-8 fits Feishu's byte limits ([`split_within_bytes`]: between grapheme clusters, code
//! fences balanced).

use serde_json::{Value, json};

use crate::render::measure::Limit;
use crate::render::split::split_markdown;

/// Most bytes of one chunk's JSON-escaped text (a card may be 30 KB; the rest is its frame).
pub const MAX_CONTENT_BYTES: usize = 28_000;
/// Plain text this short (in characters) goes as a `text` message (0.3.5's `_TEXT_MAX_LEN`).
const TEXT_MAX_CHARS: usize = 200;
/// Longer than this (in characters) always goes as a card (0.3.5's `_POST_MAX_LEN`).
const POST_MAX_CHARS: usize = 2000;

/// Returns `text` in chunks whose JSON-escaped UTF-8 is at most `max_bytes`, cut as
/// [`split_markdown`] cuts (between grapheme clusters, fences balanced).
pub fn split_within_bytes(text: &str, max_bytes: usize) -> Vec<String> {
    let mut out = Vec::new();
    for chunk in split_markdown(text, Limit::code_points(max_bytes)) {
        split_chunk(chunk, max_bytes, &mut out);
    }
    out
}

fn split_chunk(chunk: String, max_bytes: usize, out: &mut Vec<String>) {
    let bytes = escaped_len(&chunk);
    let chars = chunk.chars().count();
    if bytes <= max_bytes || chars <= 1 {
        out.push(chunk);
        return;
    }
    // Fewer characters in proportion to the overshoot; strictly fewer, so this ends.
    let fewer = (chars * max_bytes / bytes).clamp(1, chars - 1);
    for piece in split_markdown(&chunk, Limit::code_points(fewer)) {
        split_chunk(piece, max_bytes, out);
    }
}

/// Bytes of `text` inside a JSON string.
fn escaped_len(text: &str) -> usize {
    serde_json::to_string(text).map_or(text.len(), |s| s.len() - 2)
}

/// Which message type 0.3.5 picks for `content`: `text`, `post` or `interactive`.
pub(super) fn format_of(content: &str) -> &'static str {
    let s = content.trim();
    let lines = || s.lines().map(str::trim_start);
    let complex = s.contains("```")
        || lines().any(|l| {
            let hashes = l.chars().take_while(|c| *c == '#').count();
            (1..=6).contains(&hashes) && l[hashes..].starts_with(' ')
        })
        || lines().any(|l| l.starts_with('|') && l.contains("---"));
    let emphasis = ["**", "__", "~~"].iter().any(|m| s.contains(m));
    let list = lines().any(|l| {
        let digits = l.chars().take_while(char::is_ascii_digit).count();
        ["- ", "* ", "+ "].iter().any(|p| l.starts_with(p))
            || (digits > 0 && l[digits..].starts_with(". "))
    });
    let chars = s.chars().count();
    if complex || chars > POST_MAX_CHARS || emphasis || list {
        "interactive"
    } else if has_link(s) {
        "post"
    } else if chars <= TEXT_MAX_CHARS {
        "text"
    } else {
        "post"
    }
}

fn has_link(s: &str) -> bool {
    s.find('[').is_some_and(|at| {
        s[at..]
            .find("](")
            .is_some_and(|m| s[at + m..].contains(')'))
    })
}

/// Returns `(msg_type, content)` of one chunk sent as `format` ([`format_of`]).
pub(super) fn content_of(format: &str, chunk: &str) -> (&'static str, String) {
    match format {
        "text" => ("text", json!({"text": chunk.trim()}).to_string()),
        "post" => ("post", post_of(chunk).to_string()),
        _ => ("interactive", card_of(chunk).to_string()),
    }
}

/// A markdown card (updatable, so a streaming preview can become the reply).
pub(super) fn card_of(markdown: &str) -> Value {
    json!({"config": {"wide_screen_mode": true, "update_multi": true},
        "elements": [{"tag": "markdown", "content": markdown}]})
}

/// A rich-text post: one paragraph per line, `[text](url)` as links, the rest as text.
fn post_of(content: &str) -> Value {
    let paragraphs: Vec<Value> = content
        .trim()
        .lines()
        .map(|line| {
            let mut els = Vec::new();
            let mut rest = line;
            while let Some((before, text, href, after)) = next_link(rest) {
                if !before.is_empty() {
                    els.push(json!({"tag": "text", "text": before}));
                }
                els.push(json!({"tag": "a", "text": text, "href": href}));
                rest = after;
            }
            if !rest.is_empty() || els.is_empty() {
                els.push(json!({"tag": "text", "text": rest}));
            }
            Value::Array(els)
        })
        .collect();
    json!({"zh_cn": {"content": paragraphs}})
}

/// Splits `s` around its first `[text](url)`.
fn next_link(s: &str) -> Option<(&str, &str, &str, &str)> {
    let open = s.find('[')?;
    let mid = open + s[open..].find("](")?;
    let close = mid + 2 + s[mid + 2..].find(')')?;
    let text = &s[open + 1..mid];
    let href = &s[mid + 2..close];
    if text.contains('[') || href.contains(char::is_whitespace) || href.is_empty() {
        return None;
    }
    Some((&s[..open], text, href, &s[close + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_stay_within_the_byte_limit_and_never_cut_a_character_or_grapheme() {
        let family = "👩‍👩‍👧‍👦";
        let text = format!("{}\n{}", "飞书消息测试。".repeat(3000), family.repeat(2000));
        let chunks = split_within_bytes(&text, MAX_CONTENT_BYTES);
        assert!(chunks.len() >= 3, "{}", chunks.len());
        for c in &chunks {
            assert!(escaped_len(c) <= MAX_CONTENT_BYTES, "{}", escaped_len(c));
            assert!(
                !c.starts_with('\u{200d}') && !c.ends_with('\u{200d}'),
                "a ZWJ family was cut"
            );
        }
        let joined: String = chunks.concat();
        assert_eq!(
            joined.replace(char::is_whitespace, ""),
            text.replace(char::is_whitespace, "")
        );
        // Escapes count: a text of quotes needs twice its length in the JSON.
        let quotes = "\"".repeat(100);
        assert!(
            split_within_bytes(&quotes, 60)
                .iter()
                .all(|c| escaped_len(c) <= 60)
        );
        assert_eq!(split_within_bytes("短 👍", 60), ["短 👍"]);
    }

    #[test]
    fn the_message_type_follows_035() {
        assert_eq!(format_of("你好 👋"), "text");
        assert_eq!(format_of("see [文档](https://x.io)"), "post");
        assert_eq!(format_of(&"长".repeat(300)), "post");
        assert_eq!(format_of(&"长".repeat(2001)), "interactive");
        for md in [
            "**粗体**",
            "# 标题",
            "```\ncode\n```",
            "- 一\n- 二",
            "1. 一",
            "| a |\n|---|",
        ] {
            assert_eq!(format_of(md), "interactive", "{md}");
        }
        let (kind, content) = content_of("post", "看 [文档](https://x.io) 吧");
        assert_eq!(kind, "post");
        let post: Value = serde_json::from_str(&content).unwrap();
        assert_eq!(
            post["zh_cn"]["content"][0],
            json!([{"tag": "text", "text": "看 "}, {"tag": "a", "text": "文档", "href": "https://x.io"},
                {"tag": "text", "text": " 吧"}])
        );
    }
}

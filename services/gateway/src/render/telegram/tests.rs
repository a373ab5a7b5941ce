//! Cases for tool hints and long replies; the Markdown → HTML cases are in `html.rs` and
//! `tests/conformance/telegram_html.json`.

use super::*;

const TELEGRAM_TAGS: &[&str] = &["b", "i", "s", "u", "a", "code", "pre", "blockquote"];

/// Asserts `html` uses only Telegram's tags, each closed in order, and no bare `<` or `>`.
fn assert_telegram_html(html: &str) {
    let mut open: Vec<String> = Vec::new();
    let mut rest = html;
    while let Some(lt) = rest.find('<') {
        assert!(!rest[..lt].contains('>'), "bare > in {html:?}");
        let end = rest[lt..].find('>').expect("unclosed tag") + lt;
        let tag = &rest[lt + 1..end];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(open.pop().as_deref(), Some(name), "unbalanced in {html:?}");
        } else {
            let name = tag.split_whitespace().next().unwrap_or("");
            assert!(TELEGRAM_TAGS.contains(&name), "tag {name:?} in {html:?}");
            open.push(name.to_string());
        }
        rest = &rest[end + 1..];
    }
    assert!(!rest.contains('>'), "bare > in {html:?}");
    assert!(open.is_empty(), "unclosed {open:?} in {html:?}");
}

#[test]
fn tool_hints_are_expandable_quotes() {
    assert_eq!(
        tool_hint_html("read_file(\"a<b\")"),
        "<blockquote expandable>read_file(\"a&lt;b\")</blockquote>"
    );
    assert_eq!(tool_hint_html(""), "");
}

/// A 9,000-character reply with prose, a list and a long code block.
fn long_reply() -> String {
    let mut md = String::from("# Report\n\nSome **intro** text with <angle> & ampersands.\n\n");
    for i in 0..40 {
        md.push_str(&format!("- point {i}: *detail* about `item_{i}` & more\n"));
    }
    md.push_str("\n```python\n");
    for i in 0..120 {
        md.push_str(&format!("print(\"line {i} <tag> & stuff\")  # comment\n"));
    }
    md.push_str("```\n\nClosing words.\n");
    while md.chars().count() < 9_000 {
        md.push_str("More closing prose to reach the length of a long reply. ");
    }
    md
}

#[test]
fn a_9000_character_reply_splits_into_valid_html_chunks_of_telegram_size() {
    let md = long_reply();
    assert!(md.chars().count() >= 9_000);
    let raw = split_markdown(&md, MAX_MESSAGE_LEN);
    assert!(raw.len() >= 3, "{} chunks", raw.len());
    for chunk in &raw {
        assert!(chunk.chars().count() <= MAX_MESSAGE_LEN);
        assert_eq!(
            chunk.matches("```").count() % 2,
            0,
            "unbalanced fence in {chunk:?}"
        );
    }
    let chunks = split_markdown_html(&md, MAX_HTML_LEN);
    assert!(chunks.len() >= 3);
    for chunk in &chunks {
        assert!(
            chunk.html.chars().count() <= MAX_HTML_LEN,
            "{}",
            chunk.html.len()
        );
        assert!(!chunk.html.is_empty());
        assert_telegram_html(&chunk.html);
    }
    // Every code line arrives, inside <pre>, exactly once.
    let all: String = chunks.iter().map(|c| c.html.as_str()).collect();
    for i in 0..120 {
        let line = format!("print(\"line {i} &lt;tag&gt; &amp; stuff\")");
        assert_eq!(all.matches(&line).count(), 1, "{line}");
    }
    let code_chunks = chunks
        .iter()
        .filter(|c| c.html.contains("<pre><code>"))
        .count();
    assert!(code_chunks >= 2, "the code block spans chunks");
}

#[test]
fn html_expansion_forces_a_smaller_split() {
    // 3,900 characters that triple in HTML.
    let md = "<&>".repeat(1_300);
    let chunks = split_markdown_html(&md, MAX_HTML_LEN);
    assert!(chunks.len() >= 3);
    for chunk in &chunks {
        assert!(chunk.html.chars().count() <= MAX_HTML_LEN);
    }
    let rejoined: String = chunks.iter().map(|c| c.markdown.as_str()).collect();
    assert_eq!(rejoined, md);
}

//! Reasoning tags in a reply, as 0.3.5's `strip_think` / `extract_think`
//! (`nanobot/utils/helpers.py`): closed `<think>`, `<thinking>` and `<thought>` blocks are cut
//! out (their text is the reply's inline reasoning), an unclosed block at the start drops the
//! rest, and tags leaked by some models are removed where 0.3.5 removes them — malformed
//! opening tags run into text (`<think广场…`) anywhere, self-closing markers, orphan closing
//! tags and channel markers only at the edges, so prose that mentions the tags keeps them.

use std::sync::LazyLock;

use regex::Regex;

/// The thinking tags, in 0.3.5's alternation order (`think` is tried before `thinking`).
const TAGS: [&str; 3] = ["think", "thinking", "thought"];

/// Returns `(cleaned reply, reasoning of its closed blocks)`: 0.3.5's `extract_think` with
/// its two values swapped. The reasoning is every closed block's trimmed text joined by a
/// blank line; `None` when there is no closed block.
pub fn strip_think(text: &str) -> (String, Option<String>) {
    if !text.contains('<') {
        return (text.trim().to_string(), None);
    }
    let (rest, blocks) = cut_closed_blocks(text);
    let reasoning = (!blocks.is_empty()).then(|| blocks.join("\n\n"));
    (strip_think_edges(&rest), reasoning)
}

/// Returns the opening tag at the start of `s` (`s` begins after a `<`), trying the tags in
/// 0.3.5's order, with `accept` deciding from what follows the name.
fn tag_at(s: &str, accept: impl Fn(&str) -> bool) -> Option<&'static str> {
    TAGS.into_iter()
        .find(|tag| s.strip_prefix(tag).is_some_and(&accept))
}

/// Cuts every closed block out of `text`, left to right, as 0.3.5's
/// `<(?P<tag>…)>[\s\S]*?</(?P=tag)>` does: a block ends at the first close of its own tag; an
/// opening tag with no close is left for the next rules. Returns the rest and each block's
/// trimmed text.
fn cut_closed_blocks(text: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut blocks = Vec::new();
    let mut pos = 0;
    while let Some(offset) = text[pos..].find('<') {
        let start = pos + offset;
        let after = &text[start + 1..];
        let closed = TAGS.into_iter().find_map(|tag| {
            let body_start = start + 1 + tag.len() + 1;
            after.strip_prefix(tag)?.strip_prefix('>')?;
            let close = format!("</{tag}>");
            let body_len = text[body_start..].find(&close)?;
            Some((body_start, body_len, close.len()))
        });
        match closed {
            Some((body_start, body_len, close_len)) => {
                out.push_str(&text[pos..start]);
                blocks.push(text[body_start..body_start + body_len].trim().to_string());
                pos = body_start + body_len + close_len;
            }
            None => {
                out.push_str(&text[pos..=start]);
                pos = start + 1;
            }
        }
    }
    out.push_str(&text[pos..]);
    (out, blocks)
}

/// Removes each `<think`, `<thinking` or `<thought` not followed by a character that could
/// continue a tag (`[A-Za-z0-9_\-:>/]`): 0.3.5's malformed-opening-tag rule, which takes such
/// a tag out wherever it is (`<think广场…` → `广场…`).
fn cut_malformed_openings(text: &str) -> String {
    let continues = |rest: &str| {
        rest.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || "_-:>/".contains(c))
    };
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    while let Some(offset) = text[pos..].find('<') {
        let start = pos + offset;
        out.push_str(&text[pos..start]);
        match tag_at(&text[start + 1..], |rest| !continues(rest)) {
            Some(tag) => pos = start + 1 + tag.len(),
            None => {
                out.push('<');
                pos = start + 1;
            }
        }
    }
    out.push_str(&text[pos..]);
    out
}

/// 0.3.5's rules after the block pass: an unclosed block at the start drops the rest,
/// self-closing `<thinking/>` at the edges, malformed opening tags anywhere, orphan closing
/// tags at the edges, a channel marker (`<|channel|>`) at the start, a partial tag cut off at
/// the end of a stream chunk (`<thi`, `</thou`, `<|chan`), a lone `<` or `<|`; then trimmed.
pub fn strip_think_edges(text: &str) -> String {
    static BEFORE: LazyLock<Vec<Regex>> = LazyLock::new(|| {
        [
            r"^\s*<(?:think|thinking|thought)>[\s\S]*$",
            r"^\s*<thinking/>\s*",
            r"\s*<thinking/>\s*$",
        ]
        .into_iter()
        .map(|p| Regex::new(p).expect("static think-strip pattern"))
        .collect()
    });
    static AFTER: LazyLock<Vec<Regex>> = LazyLock::new(|| {
        const PARTIAL: &str =
            "</?(?:thinking|thought|thinkin|thinki|though|think|thoug|thin|thou|thi|tho|th|t)>?";
        [
            r"^\s*</(?:think|thinking|thought)>\s*".to_string(),
            r"\s*</(?:think|thinking|thought)>\s*$".to_string(),
            r"^\s*<\|?channel\|?>\s*".to_string(),
            // Python's `$` also matches before a final newline.
            format!(r"(?:{PARTIAL}|<\|?(?:c|ch|cha|chan|chann|channe|channel)(?:\|?>?)?)\n?$"),
            r"^\s*<\|?\n?$".to_string(),
        ]
        .iter()
        .map(|p| Regex::new(p).expect("static think-strip pattern"))
        .collect()
    });
    let mut out = text.to_string();
    for pattern in BEFORE.iter() {
        out = pattern.replace(&out, "").into_owned();
    }
    out = cut_malformed_openings(&out);
    for pattern in AFTER.iter() {
        out = pattern.replace(&out, "").into_owned();
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_blocks_are_cut_out_and_their_text_is_the_reasoning() {
        let (text, reasoning) = strip_think("<think>先想一想 🤔</think>\n答案是 42。");
        assert_eq!(text, "答案是 42。");
        assert_eq!(reasoning.as_deref(), Some("先想一想 🤔"));
        assert_eq!(
            strip_think("<think>one</think>mid<thought>two</thought>end"),
            ("midend".to_string(), Some("one\n\ntwo".to_string()))
        );
        assert_eq!(strip_think(" plain 🐈 ").0, "plain 🐈");
    }

    #[test]
    fn unclosed_blocks_drop_the_rest_only_at_the_start() {
        assert_eq!(strip_think("\n<thought>draft 中").0, "");
        assert_eq!(
            strip_think("x <thinking>unterminated").0,
            "x <thinking>unterminated"
        );
    }

    #[test]
    fn leaked_tags_are_stripped_where_0_3_5_strips_them() {
        let clean = |t: &str| strip_think(t).0;
        assert_eq!(clean("</think>\nAnswer."), "Answer.");
        assert_eq!(clean("Answer.</thinking>"), "Answer.");
        assert_eq!(clean("Answer. <thi"), "Answer.");
        assert_eq!(clean("Answer <|chan"), "Answer");
        assert_eq!(clean("<|channel|>final text"), "final text");
        assert_eq!(clean("<thinking/> hi"), "hi");
        assert_eq!(clean("<think<think答案"), "答案");
        assert_eq!(clean("<thinker> is a word"), "<thinker> is a word");
        assert_eq!(
            clean("the </think> tag closes a block"),
            "the </think> tag closes a block"
        );
    }
}

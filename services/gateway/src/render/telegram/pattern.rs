//! The patterns of upstream's Telegram Markdown handling (nanobot 0.3.5 `channels/telegram`),
//! with Python `re` semantics kept where the `regex` crate differs:
//! - Python's `\s` also matches the separators U+001C–U+001F (`str.isspace`), so patterns
//!   spell it [`py_space!`];
//! - the italic rule needs look-around, which `regex` lacks, so it is [`replace_italic`].
//!
//! Everything else (`.` stops at `\n`, `(?m)^`/`$`, lazy quantifiers, leftmost-first
//! alternation, Unicode `\d`) already behaves as in Python.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

/// Python's `\s`: Unicode `White_Space` plus U+001C–U+001F.
macro_rules! py_space {
    () => {
        r"[\s\x1C-\x1F]"
    };
}

fn compile(pattern: &str) -> Regex {
    Regex::new(pattern).expect("the pattern is a valid regex")
}

/// A fenced code block: an optional info line, then the code up to the next fence.
pub(super) static FENCED_CODE: LazyLock<Regex> =
    LazyLock::new(|| compile(r"(?s)```(?:[^\n]*\n)?(.*?)```"));
/// A line that starts (after blanks) with `|` and has another `|` later.
pub(super) static TABLE_ROW: LazyLock<Regex> =
    LazyLock::new(|| compile(concat!("^", py_space!(), r"*\|.+\|")));
/// A table cell that is a separator (`---`, `:--`, `:-:`, `--:`).
pub(super) static SEPARATOR_CELL: LazyLock<Regex> = LazyLock::new(|| compile(r"^:?-+:?$"));
/// Inline code.
pub(super) static INLINE_CODE: LazyLock<Regex> = LazyLock::new(|| compile(r"`([^`]+)`"));
/// A heading line; the blanks after the `#`s may run over newlines, as in upstream.
pub(super) static HEADING: LazyLock<Regex> =
    LazyLock::new(|| compile(concat!(r"(?m)^#{1,6}", py_space!(), r"+(.+)$")));
/// A blockquote line.
pub(super) static QUOTE: LazyLock<Regex> =
    LazyLock::new(|| compile(concat!(r"(?m)^>", py_space!(), r"*(.*)$")));
/// A link `[text](url)` (an image's `!` stays in front of it).
pub(super) static LINK: LazyLock<Regex> = LazyLock::new(|| compile(r"\[([^\]]+)\]\(([^)]+)\)"));
/// Bold with stars, within one line.
pub(super) static BOLD_STARS: LazyLock<Regex> = LazyLock::new(|| compile(r"\*\*(.+?)\*\*"));
/// Bold with underscores, within one line.
pub(super) static BOLD_UNDERSCORES: LazyLock<Regex> = LazyLock::new(|| compile(r"__(.+?)__"));
/// Strikethrough, within one line.
pub(super) static STRIKE: LazyLock<Regex> = LazyLock::new(|| compile(r"~~(.+?)~~"));
/// A `-` or `*` bullet at the very start of a line (indented bullets are left alone).
pub(super) static BULLET: LazyLock<Regex> =
    LazyLock::new(|| compile(concat!(r"(?m)^[-*]", py_space!(), "+")));
/// A numbered item at the very start of a line.
pub(super) static NUMBERED: LazyLock<Regex> =
    LazyLock::new(|| compile(concat!(r"(?m)^(\d+)\.", py_space!(), "+")));

/// Replaces every match of `pattern` in `text` with `with` (`${1}` names a group).
pub(super) fn substitute(text: &mut String, pattern: &Regex, with: &str) {
    if let Cow::Owned(replaced) = pattern.replace_all(text, with) {
        *text = replaced;
    }
}

/// Returns `text` with each `_italic_` span wrapped in `open`/`close`: upstream's
/// `(?<![a-zA-Z0-9])_([^_]+)_(?![a-zA-Z0-9])`, so `snake_case_names` stay as they are while
/// `中文_斜体_中文` is italic (only ASCII letters and digits count as a word).
pub(super) fn replace_italic(text: &str, open: &str, close: &str) -> String {
    let bytes = text.as_bytes();
    let is_word = |at: usize| bytes.get(at).is_some_and(u8::is_ascii_alphanumeric);
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(offset) = text[from..].find('_') {
        let start = from + offset;
        let Some(inner_len) = text[start + 1..].find('_') else {
            break;
        };
        let end = start + 1 + inner_len;
        let free_before = start == 0 || !is_word(start - 1);
        if inner_len == 0 || !free_before || is_word(end + 1) {
            from = start + 1;
            continue;
        }
        out.push_str(&text[copied..start]);
        out.push_str(open);
        out.push_str(&text[start + 1..end]);
        out.push_str(close);
        copied = end + 1;
        from = end + 1;
    }
    out.push_str(&text[copied..]);
    out
}

/// Returns whether Python's `str.isspace` holds for `c`.
pub(super) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Returns `text` without leading and trailing whitespace, as Python's `str.strip()`.
pub(super) fn py_strip(text: &str) -> &str {
    text.trim_matches(is_py_space)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn italics_need_a_non_word_character_on_both_sides() {
        let italic = |s: &str| replace_italic(s, "<i>", "</i>");
        assert_eq!(italic("some_var_name _yes_"), "some_var_name <i>yes</i>");
        assert_eq!(italic("中文_斜体_中文"), "中文<i>斜体</i>中文");
        assert_eq!(italic("__ _a__b_ x_"), "__ <i>a</i><i>b</i> x_");
        assert_eq!(italic("x_y_ _z"), "x_y_ _z");
        assert_eq!(italic("_a__b_"), "<i>a</i><i>b</i>");
        assert_eq!(
            italic("_👩\u{200d}👩\u{200d}👧\u{200d}👦_ _e\u{301}_"),
            "<i>👩\u{200d}👩\u{200d}👧\u{200d}👦</i> <i>e\u{301}</i>"
        );
        assert_eq!(
            italic("_שלום_ _مرحبا_ _🇨🇳_"),
            "<i>שלום</i> <i>مرحبا</i> <i>🇨🇳</i>"
        );
        assert_eq!(italic("_line\nbreak_"), "<i>line\nbreak</i>");
    }

    #[test]
    fn python_whitespace_includes_the_information_separators() {
        assert_eq!(py_strip("\u{1c} a \u{3000}"), "a");
        assert!(HEADING.is_match("#\u{1f}Title"));
        assert!(!HEADING.is_match("#Title"));
    }
}

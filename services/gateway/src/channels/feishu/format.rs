//! 0.3.5's Feishu text rules, ported regex for regex (`FeishuChannel` in
//! `nanobot/channels/feishu/runtime.py`):
//! - [`format_of`] (`_detect_msg_format`): `interactive` for code fences, tables, headings, more
//!   than 2,000 characters, bold/italic/strike or list items; else `post` when there is a
//!   `[text](http…)` link or more than 200 characters; else `text`;
//! - [`post_of`] (`_markdown_to_post`): one paragraph per line, links as `a`, the rest `text`;
//! - [`card_elements`] (`_build_card_elements`): pipe tables as Feishu `table` elements (their
//!   cells without Markdown markers), headings as bold `div` lines, the rest `markdown`; and
//!   [`by_table_limit`] (`_split_elements_by_table_limit`): one table per card.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use crate::render::message::is_py_space;

/// Python's `\s` (Rust's lacks U+001C..U+001F).
macro_rules! py_space {
    () => {
        r"[\s\x1c-\x1f]"
    };
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("a valid pattern")
}

static FENCE: LazyLock<Regex> = LazyLock::new(|| re(r"```[\s\S]*?```"));
static TABLE: LazyLock<Regex> = LazyLock::new(|| {
    re(concat!(
        r"(?m)(?:^[ \t]*\|.+\|[ \t]*\n)(?:^[ \t]*\|(?:[-:|]|",
        py_space!(),
        r")+\|[ \t]*\n)(?:^[ \t]*\|.+\|[ \t]*\n?)+"
    ))
});
static HEADING: LazyLock<Regex> =
    LazyLock::new(|| re(concat!(r"(?m)^(#{1,6})", py_space!(), r"+(.+)$")));
static COMPLEX: LazyLock<Regex> = LazyLock::new(|| {
    re(concat!(
        r"(?m)```|^\|.+\|.*\n",
        py_space!(),
        r"*\|(?:[-:|]|",
        py_space!(),
        r")+\||^#{1,6}",
        py_space!(),
        "+"
    ))
});
static LINK: LazyLock<Regex> = LazyLock::new(|| re(r"\[([^\]]+)\]\((https?://[^)]+)\)"));
static LIST: LazyLock<Regex> = LazyLock::new(|| {
    re(concat!(
        r"(?m)^",
        py_space!(),
        r"*(?:[-*+]",
        py_space!(),
        r"+|\d+\.",
        py_space!(),
        "+)"
    ))
});
static BOLD: LazyLock<Regex> = LazyLock::new(|| re(r"\*\*(.+?)\*\*"));
static BOLD_UNDERSCORE: LazyLock<Regex> = LazyLock::new(|| re(r"__(.+?)__"));
static STRIKE: LazyLock<Regex> = LazyLock::new(|| re(r"~~(.+?)~~"));

const TEXT_MAX_CHARS: usize = 200;
const POST_MAX_CHARS: usize = 2000;

/// Which message type 0.3.5 picks for `content`: `text`, `post` or `interactive`.
pub fn format_of(content: &str) -> &'static str {
    let s = py_strip(content);
    let chars = s.chars().count();
    let simple = ["**", "__", "~~"].iter().any(|m| paired(s, m)) || single_star_pair(s, true);
    if COMPLEX.is_match(s) || chars > POST_MAX_CHARS || simple || LIST.is_match(s) {
        "interactive"
    } else if LINK.is_match(s) || chars > TEXT_MAX_CHARS {
        "post"
    } else {
        "text"
    }
}

/// `m.+?m` with DOTALL: `m`, at least one character, then `m` again.
fn paired(s: &str, m: &str) -> bool {
    let Some(at) = s.find(m) else {
        return false;
    };
    let after = &s[at + m.len()..];
    after
        .chars()
        .next()
        .is_some_and(|c| after[c.len_utf8()..].contains(m))
}

/// Whether the `*` at byte `i` is a lone star (not next to another).
fn lone_star(b: &[u8], i: usize) -> bool {
    b[i] == b'*' && (i == 0 || b[i - 1] != b'*') && b.get(i + 1) != Some(&b'*')
}

/// The closing star of the lone-star pair opening at `open` (upstream's
/// `(?<!\*)\*(?!\*)(.+?)(?<!\*)\*(?!\*)`), across lines with `dotall`.
fn star_pair_end(s: &str, open: usize, dotall: bool) -> Option<usize> {
    let b = s.as_bytes();
    for (n, (k, c)) in s[open + 1..].char_indices().enumerate() {
        let k = open + 1 + k;
        if c == '\n' && !dotall {
            return None;
        }
        if n > 0 && lone_star(b, k) {
            return Some(k);
        }
    }
    None
}

fn single_star_pair(s: &str, dotall: bool) -> bool {
    let b = s.as_bytes();
    (0..b.len()).any(|i| lone_star(b, i) && star_pair_end(s, i, dotall).is_some())
}

/// Upstream's `_strip_md_formatting`: bold, italic and strike markers removed.
pub fn strip_md_formatting(text: &str) -> String {
    let text = BOLD.replace_all(text, "$1");
    let text = BOLD_UNDERSCORE.replace_all(&text, "$1");
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        if lone_star(b, i)
            && let Some(end) = star_pair_end(&text, i, false)
        {
            out.push_str(&text[copied..i]);
            out.push_str(&text[i + 1..end]);
            i = end + 1;
            copied = i;
            continue;
        }
        i += 1;
    }
    out.push_str(&text[copied..]);
    STRIKE.replace_all(&out, "$1").into_owned()
}

/// Upstream's `_markdown_to_post`: the post body (`{"zh_cn": {"content": …}}`).
pub fn post_of(content: &str) -> Value {
    let paragraphs: Vec<Value> = py_strip(content)
        .split('\n')
        .map(|line| {
            let mut els = Vec::new();
            let mut last = 0;
            for m in LINK.captures_iter(line) {
                let whole = m.get(0).expect("the match");
                if whole.start() > last {
                    els.push(json!({"tag": "text", "text": &line[last..whole.start()]}));
                }
                els.push(json!({"tag": "a", "text": &m[1], "href": &m[2]}));
                last = whole.end();
            }
            if last < line.len() || els.is_empty() {
                els.push(json!({"tag": "text", "text": &line[last..]}));
            }
            Value::Array(els)
        })
        .collect();
    json!({"zh_cn": {"content": paragraphs}})
}

/// Upstream's `_build_card_elements`: the elements of the card(s) for `content`.
pub fn card_elements(content: &str) -> Vec<Value> {
    let (protected, code) = hide_fences(content);
    let mut elements = Vec::new();
    let mut last = 0;
    for m in TABLE.find_iter(&protected) {
        let before = &protected[last..m.start()];
        if !py_strip(before).is_empty() {
            elements.extend(split_headings(before));
        }
        elements.push(table_of(m.as_str()).unwrap_or_else(|| markdown(m.as_str())));
        last = m.end();
    }
    let remaining = &protected[last..];
    if !py_strip(remaining).is_empty() {
        elements.extend(split_headings(remaining));
    }
    restore_fences(&mut elements, &code);
    if elements.is_empty() {
        return vec![markdown(content)];
    }
    elements
}

/// Upstream's `_split_elements_by_table_limit` with one table per card.
pub fn by_table_limit(elements: Vec<Value>) -> Vec<Vec<Value>> {
    let mut groups = Vec::new();
    let mut current = Vec::new();
    let mut tables = 0;
    for el in elements {
        if el["tag"] == "table" {
            if tables >= 1 {
                if !current.is_empty() {
                    groups.push(std::mem::take(&mut current));
                }
                tables = 0;
            }
            tables += 1;
        }
        current.push(el);
    }
    if !current.is_empty() || groups.is_empty() {
        groups.push(current);
    }
    groups
}

fn markdown(content: &str) -> Value {
    json!({"tag": "markdown", "content": content})
}

fn hide_fences(content: &str) -> (String, Vec<String>) {
    let code: Vec<String> = FENCE
        .find_iter(content)
        .map(|m| m.as_str().to_string())
        .collect();
    let mut protected = content.to_string();
    for (i, block) in code.iter().enumerate() {
        protected = protected.replacen(block, &format!("\0CODE{i}\0"), 1);
    }
    (protected, code)
}

fn restore_fences(elements: &mut [Value], code: &[String]) {
    for (i, block) in code.iter().enumerate() {
        let mark = format!("\0CODE{i}\0");
        for el in elements.iter_mut().filter(|el| el["tag"] == "markdown") {
            if let Some(text) = el["content"].as_str() {
                el["content"] = Value::String(text.replace(&mark, block));
            }
        }
    }
}

/// Upstream's `_split_headings`: headings as bold `div` lines, the text between as markdown.
fn split_headings(content: &str) -> Vec<Value> {
    let (protected, code) = hide_fences(content);
    let mut elements = Vec::new();
    let mut last = 0;
    for m in HEADING.captures_iter(&protected) {
        let whole = m.get(0).expect("the match");
        let before = py_strip(&protected[last..whole.start()]);
        if !before.is_empty() {
            elements.push(markdown(before));
        }
        let text = strip_md_formatting(py_strip(&m[2]));
        let display = if text.is_empty() {
            String::new()
        } else {
            format!("**{text}**")
        };
        elements.push(json!({"tag": "div", "text": {"tag": "lark_md", "content": display}}));
        last = whole.end();
    }
    let remaining = py_strip(&protected[last..]);
    if !remaining.is_empty() {
        elements.push(markdown(remaining));
    }
    restore_fences(&mut elements, &code);
    if elements.is_empty() {
        return vec![markdown(content)];
    }
    elements
}

/// Upstream's `_parse_md_table`: a Feishu `table` element, or `None` under three lines.
fn table_of(table: &str) -> Option<Value> {
    let lines: Vec<&str> = py_strip(table)
        .split('\n')
        .map(py_strip)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.len() < 3 {
        return None;
    }
    let cells = |line: &str| -> Vec<String> {
        line.trim_matches('|')
            .split('|')
            .map(|c| strip_md_formatting(py_strip(c)))
            .collect()
    };
    let headers = cells(lines[0]);
    let rows: Vec<Vec<String>> = lines[2..].iter().map(|l| cells(l)).collect();
    let columns: Vec<Value> = headers
        .iter()
        .enumerate()
        .map(|(i, h)| json!({"tag": "column", "name": format!("c{i}"), "display_name": h, "width": "auto"}))
        .collect();
    let rows: Vec<Value> = rows
        .iter()
        .map(|r| {
            let row: serde_json::Map<String, Value> = (0..headers.len())
                .map(|i| {
                    (
                        format!("c{i}"),
                        json!(r.get(i).cloned().unwrap_or_default()),
                    )
                })
                .collect();
            Value::Object(row)
        })
        .collect();
    Some(json!({"tag": "table", "page_size": rows.len() + 1, "columns": columns, "rows": rows}))
}

/// Python's `str.strip()`.
fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// Upstream's `_format_tool_hint_delta`: the hint one call a line (split at top-level `, `),
/// each line after `prefix`.
pub fn tool_hint(hint: &str, prefix: &str) -> String {
    tool_hint_lines(hint)
        .iter()
        .filter(|l| !py_strip(l).is_empty())
        .map(|l| format!("{prefix} {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Upstream's `_format_tool_hint_lines`: splits at `, ` outside quotes and parentheses.
fn tool_hint_lines(hint: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut buf = String::new();
    let (mut depth, mut quote, mut escaped) = (0usize, None::<char>, false);
    let mut chars = hint.chars().peekable();
    while let Some(c) = chars.next() {
        buf.push(c);
        if let Some(q) = quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                _ if c == q => quote = None,
                _ => {}
            }
            continue;
        }
        match c {
            '"' | '\'' => quote = Some(c),
            '(' => depth += 1,
            ')' if depth > 0 => depth -= 1,
            ',' if depth == 0 && chars.peek() == Some(&' ') => {
                parts.push(
                    std::mem::take(&mut buf)
                        .trim_end_matches(is_py_space)
                        .to_string(),
                );
            }
            _ => {}
        }
    }
    if !buf.is_empty() {
        parts.push(py_strip(&buf).to_string());
    }
    parts.retain(|p| !p.is_empty());
    parts
        .into_iter()
        .flat_map(|p| p.split('\n').map(str::to_string).collect::<Vec<_>>())
        .collect()
}

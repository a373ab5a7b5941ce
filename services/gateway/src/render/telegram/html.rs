//! Markdown → Telegram HTML and the plain streaming preview, step for step as nanobot 0.3.5's
//! `_markdown_to_telegram_html` and `_strip_md_block`, so a reply reads the same as upstream's
//! (checked case by case in `tests/conformance/telegram_html.json`).
//!
//! Upstream rewrites text with regexes, not a Markdown parser, and its quirks are kept: only
//! `**`/`__` make bold and `_x_` italic (`*x*` and `2*3*4` stay as typed); only bullets and
//! numbers at the start of a line change (nested items keep their `-`); text is escaped once
//! more (`&amp;` → `&amp;amp;`); a fenced block keeps its last newline; a table becomes a
//! `<pre>` of aligned text.

use super::pattern::{
    BOLD_STARS, BOLD_UNDERSCORES, BULLET, FENCED_CODE, HEADING, INLINE_CODE, LINK, NUMBERED, QUOTE,
    STRIKE, TABLE_ROW, replace_italic, substitute,
};
use super::{escape_html, table};

/// Upstream's markers for a heading's bold, put in before escaping and replaced last.
const BOLD_OPEN: &str = "⟪B⟫";
const BOLD_CLOSE: &str = "⟪/B⟫";

/// Text set aside while the rest is rewritten, then put back behind a placeholder
/// (`\0CB0\0`, `\0IC0\0`, as upstream, so the text around it is matched the same way).
struct Stash {
    tag: &'static str,
    items: Vec<String>,
}

impl Stash {
    fn new(tag: &'static str) -> Self {
        Self {
            tag,
            items: Vec::new(),
        }
    }

    /// Keeps `text` and returns its placeholder.
    fn keep(&mut self, text: String) -> String {
        self.items.push(text);
        format!("\0{}{}\0", self.tag, self.items.len() - 1)
    }

    /// Puts each kept text back in `text`, escaped and wrapped in `open`/`close`.
    fn restore(&self, text: &mut String, open: &str, close: &str) {
        for (i, item) in self.items.iter().enumerate() {
            let placeholder = format!("\0{}{i}\0", self.tag);
            let html = format!("{open}{}{close}", escape_html(item));
            *text = text.replace(&placeholder, &html);
        }
    }
}

/// Returns `md` as Telegram HTML, exactly as 0.3.5's `_markdown_to_telegram_html`.
pub(super) fn markdown_to_html(md: &str) -> String {
    if md.is_empty() {
        return String::new();
    }
    let mut blocks = Stash::new("CB");
    let fenced = FENCED_CODE.replace_all(md, |caps: &regex::Captures<'_>| {
        blocks.keep(caps[1].to_owned())
    });
    let mut text = box_tables(&fenced, &mut blocks);
    let mut codes = Stash::new("IC");
    text = INLINE_CODE
        .replace_all(&text, |caps: &regex::Captures<'_>| {
            codes.keep(caps[1].to_owned())
        })
        .into_owned();
    substitute(
        &mut text,
        &HEADING,
        &format!("{BOLD_OPEN}${{1}}{BOLD_CLOSE}"),
    );
    substitute(&mut text, &QUOTE, "${1}");
    text = escape_html(&text);
    substitute(&mut text, &LINK, r#"<a href="${2}">${1}</a>"#);
    substitute(&mut text, &BOLD_STARS, "<b>${1}</b>");
    substitute(&mut text, &BOLD_UNDERSCORES, "<b>${1}</b>");
    text = replace_italic(&text, "<i>", "</i>");
    substitute(&mut text, &STRIKE, "<s>${1}</s>");
    substitute(&mut text, &BULLET, "• ");
    substitute(&mut text, &NUMBERED, "${1}. ");
    codes.restore(&mut text, "<code>", "</code>");
    blocks.restore(&mut text, "<pre><code>", "</code></pre>");
    text.replace(BOLD_OPEN, "<b>").replace(BOLD_CLOSE, "</b>")
}

/// Returns `md` as readable plain text for a streaming preview (sent without `parse_mode`),
/// exactly as 0.3.5's `_strip_md_block`: markers dropped, bullets as `• `, nothing escaped.
pub(super) fn strip_markdown(md: &str) -> String {
    let mut text = md.to_owned();
    for pattern in [
        &FENCED_CODE,
        &HEADING,
        &QUOTE,
        &BOLD_STARS,
        &BOLD_UNDERSCORES,
    ] {
        substitute(&mut text, pattern, "${1}");
    }
    text = replace_italic(&text, "", "");
    for pattern in [&STRIKE, &INLINE_CODE, &LINK] {
        substitute(&mut text, pattern, "${1}");
    }
    substitute(&mut text, &BULLET, "• ");
    substitute(&mut text, &NUMBERED, "${1}. ");
    text
}

/// Returns `text` with each run of table lines replaced by the placeholder of its aligned
/// box (kept in `blocks`); a run that is not a table stays as it is.
fn box_tables(text: &str, blocks: &mut Stash) -> String {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut rebuilt: Vec<String> = Vec::with_capacity(lines.len());
    let mut at = 0;
    while at < lines.len() {
        let start = at;
        while at < lines.len() && TABLE_ROW.is_match(lines[at]) {
            at += 1;
        }
        if at == start {
            rebuilt.push(lines[at].to_owned());
            at += 1;
            continue;
        }
        let run = &lines[start..at];
        let boxed = table::render_box(run);
        if boxed == run.join("\n") {
            rebuilt.extend(run.iter().map(|line| (*line).to_owned()));
        } else {
            rebuilt.push(blocks.keep(boxed));
        }
    }
    rebuilt.join("\n")
}

#[cfg(test)]
mod tests {
    //! Expected values are 0.3.5's output for the same input; the full table of cases is
    //! `tests/conformance/telegram_html.json`.

    use super::*;

    #[test]
    fn only_double_markers_and_underscores_format_text() {
        assert_eq!(
            markdown_to_html("*x* 2*3*4 **你好**世界 snake_case_name"),
            "*x* 2*3*4 <b>你好</b>世界 snake_case_name"
        );
        assert_eq!(
            markdown_to_html(
                "_👩\u{200d}👩\u{200d}👧\u{200d}👦_ [链接_a](https://x.y/a_b?c=1&d=2)"
            ),
            "<i>👩\u{200d}👩\u{200d}👧\u{200d}👦</i> <a href=\"https://x.y/a_b?c=1&amp;d=2\">链接_a</a>"
        );
    }

    #[test]
    fn every_ampersand_is_escaped_even_in_entities() {
        assert_eq!(
            markdown_to_html("&amp; <b> & 1 < 2"),
            "&amp;amp; &lt;b&gt; &amp; 1 &lt; 2"
        );
    }

    #[test]
    fn only_unindented_list_markers_change() {
        assert_eq!(
            markdown_to_html("- top\n  - nested\n1. one\n   2. inner"),
            "• top\n  - nested\n1. one\n   2. inner"
        );
    }

    #[test]
    fn a_fenced_block_keeps_its_last_newline_and_its_markup() {
        assert_eq!(
            markdown_to_html("```py\nx = 1 < **2**\n```"),
            "<pre><code>x = 1 &lt; **2**\n</code></pre>"
        );
    }

    #[test]
    fn headings_and_quotes_with_cjk_rtl_and_combining_marks() {
        assert_eq!(
            markdown_to_html("# 标题 🇨🇳\n> قال **שלום** e\u{301}"),
            "<b>标题 🇨🇳</b>\nقال <b>שלום</b> e\u{301}"
        );
    }

    #[test]
    fn a_table_becomes_aligned_preformatted_text() {
        assert_eq!(
            markdown_to_html("| 名 | 🎉 |\n|---|---|\n| e\u{301} | مرحبا |"),
            "<pre><code>名  🎉   \n──  ─────\ne\u{301}  مرحبا</code></pre>"
        );
    }

    #[test]
    fn the_preview_drops_markers_and_escapes_nothing() {
        let md = "**bold** _it_ `c<d` [l](u) # not\n# Head\n- item\n```\ncode **x**\n```";
        assert_eq!(
            strip_markdown(md),
            "bold it c<d l # not\nHead\n• item\ncode x\n"
        );
        assert_eq!(strip_markdown("Here is **bol"), "Here is **bol");
        assert_eq!(
            strip_markdown("# 标题 🇨🇳\n> قال **שלום** e\u{301} _👩\u{200d}👩\u{200d}👧\u{200d}👦_"),
            "标题 🇨🇳\nقال שלום e\u{301} 👩\u{200d}👩\u{200d}👧\u{200d}👦"
        );
    }
}

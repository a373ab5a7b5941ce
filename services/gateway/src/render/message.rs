//! Splitting a message's final text into messages, as nanobot 0.3.5's `split_message`
//! (`nanobot/utils/helpers.py`; its Slack and Discord channels use it): cut at the last newline
//! within the limit (dropping that newline, and a "\r" before it), else at the last space
//! (dropping the spaces and tabs after it, and one line break), else hard; blank pieces are
//! dropped; blank input gives one piece, cut to the limit. Lengths are counted in the limit's
//! [`Unit`](super::measure::Unit) (upstream counts Python characters).
//!
//! Deliberately safer than upstream: a hard cut falls between grapheme clusters (never halves
//! an emoji family, a flag or an accented letter), and `adjust` may move it further back
//! (Slack's `&amp;` escapes and `<url|text>` links stay whole).
//!
//! ```
//! use nanobot_gateway::render::measure::Limit;
//! use nanobot_gateway::render::message::split_message;
//! assert_eq!(split_message("ab cd\nef", Limit::code_points(5), |_, cut| cut), ["ab cd", "ef"]);
//! ```

use super::measure::Limit;

/// Returns `content` in messages within `limit`; `adjust(text, cut)` may move a hard cut
/// (a byte offset at a cluster boundary) back to an earlier boundary.
pub fn split_message(
    content: &str,
    limit: Limit,
    adjust: impl Fn(&str, usize) -> usize,
) -> Vec<String> {
    if content.is_empty() {
        return Vec::new();
    }
    if limit.max == 0 || limit.fits(content) {
        return vec![content.to_string()];
    }
    let mut chunks = Vec::new();
    let mut rest = content;
    while !rest.is_empty() {
        if limit.fits(rest) {
            keep(&mut chunks, rest);
            break;
        }
        let end = limit.prefix_end(rest);
        let cut = &rest[..end];
        if let Some(newline) = cut.rfind('\n') {
            keep(
                &mut chunks,
                cut[..newline].strip_suffix('\r').unwrap_or(&cut[..newline]),
            );
            rest = &rest[newline + 1..];
            continue;
        }
        if let Some(space) = cut.rfind(' ').filter(|&p| p > 0 && !is_blank(&cut[..p])) {
            chunks.push(rest[..space].to_string());
            rest = drop_line_break(rest[space..].trim_start_matches([' ', '\t']));
            continue;
        }
        let end = match adjust(rest, end) {
            0 => end,
            moved => moved.min(end),
        };
        let chunk = &rest[..end];
        keep(&mut chunks, chunk);
        rest = &rest[end..];
        if !is_blank(chunk) {
            rest = drop_line_break(rest.trim_start_matches([' ', '\t']));
        }
    }
    if chunks.is_empty() {
        chunks.push(limit.prefix(content).to_string());
    }
    chunks
}

fn keep(chunks: &mut Vec<String>, chunk: &str) {
    if !is_blank(chunk) {
        chunks.push(chunk.to_string());
    }
}

/// Python's `not s.strip()`: `s` holds only whitespace (Python's, with U+001C..U+001F).
pub(crate) fn is_blank(s: &str) -> bool {
    s.chars().all(is_py_space)
}

/// Python's `str.isspace` for one character.
pub(crate) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

fn drop_line_break(s: &str) -> &str {
    s.strip_prefix("\r\n")
        .or_else(|| s.strip_prefix('\n'))
        .unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str, max: usize) -> Vec<String> {
        split_message(s, Limit::code_points(max), |_, cut| cut)
    }

    #[test]
    fn cuts_at_newlines_then_spaces_then_hard_and_drops_blank_pieces() {
        assert_eq!(split("", 10), Vec::<String>::new());
        assert_eq!(split("   \n  ", 3), ["   "]);
        assert_eq!(split("第一行\r\n第二行", 5), ["第一行", "第二行"]);
        assert_eq!(split("aaa bbb\nccc", 6), ["aaa", "bbb", "ccc"]);
        assert_eq!(split("abcdefgh", 3), ["abc", "def", "gh"]);
        assert_eq!(split("    xxxxxxxx", 5), ["    x", "xxxxx", "xx"]);
    }

    #[test]
    fn a_hard_cut_never_halves_an_emoji_family() {
        let family = "👩\u{200d}👩\u{200d}👧\u{200d}👦";
        let text = family.repeat(3);
        let chunks = split(&text, 10);
        assert_eq!(chunks, [family, family, family]);
        let moved = split_message("ab&amp;cd", Limit::code_points(4), |s, cut| {
            s[..cut].rfind('&').unwrap_or(cut)
        });
        assert_eq!(moved, ["ab", "&amp", ";cd"]);
    }

    proptest::proptest! {
        #[test]
        fn every_message_fits_and_keeps_every_cluster_of_cjk_emoji_and_rtl_text(
            text in crate::render::corpus::text(120),
            max in 8usize..200,
        ) {
            let chunks = split(&text, max);
            for chunk in &chunks {
                proptest::prop_assert!(chunk.chars().count() <= max, "{chunk:?}");
            }
            crate::render::corpus::assert_clusters_kept(&text, &chunks, &[]);
        }
    }
}

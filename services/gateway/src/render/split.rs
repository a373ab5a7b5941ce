//! Splitting raw Markdown into message-sized chunks, as upstream's `_split_telegram_markdown`:
//! cut at the last newline, else the last space, else hard; a cut inside a ``` fence moves back
//! to the fence, or closes the chunk with "\n```" and reopens the next with the same fence line.
//! The input's leading whitespace and the whitespace at each cut are dropped.
//!
//! Lengths are counted in the platform's [`Unit`](super::measure::Unit) (upstream counts Python
//! characters), and every cut falls between grapheme clusters: a hard cut never halves an
//! emoji, a flag or a letter with its accent, and a newline cut never parts "\r\n". Only a
//! single cluster longer than the whole limit is cut inside (it cannot be sent whole).
//!
//! ```
//! use nanobot_gateway::render::measure::Limit;
//! use nanobot_gateway::render::split::split_markdown;
//! let chunks = split_markdown(&"👍".repeat(3000), Limit::utf16(4000));
//! assert_eq!(chunks.iter().map(|c| c.chars().count()).collect::<Vec<_>>(), [2000, 1000]);
//! ```

use unicode_segmentation::UnicodeSegmentation as _;

use super::measure::{self, Limit};

const FENCE: &str = "```";
const CLOSING: &str = "\n```";

/// Returns `content` in chunks within `limit` with balanced fences; blank input gives none.
pub fn split_markdown(content: &str, limit: Limit) -> Vec<String> {
    let mut rest = measure::trim_start(content).to_string();
    let mut chunks = Vec::new();
    while !rest.is_empty() {
        if limit.fits(&rest) {
            chunks.push(rest);
            break;
        }
        let end = limit.prefix_end(&rest);
        let mut pos = last_break(&rest, end).unwrap_or(end);
        if let Some(fence) = inside_fence(&rest, pos) {
            if fence.opening > 0 {
                pos = fence.opening;
            } else {
                let (chunk, next) = match cut_inside_code(&rest, pos, limit) {
                    Some(cut) => close_and_reopen(&rest, cut, &fence.line),
                    None => hard_cut(&rest, limit),
                };
                chunks.push(chunk);
                rest = next;
                continue;
            }
        }
        chunks.push(rest[..pos].to_string());
        rest = measure::trim_start(&rest[pos..]).to_string();
    }
    chunks
}

/// Returns the last cut in `s[..end]` that is not at the start: before the last line break,
/// else before the last space (upstream's `rfind("\n")`, then `rfind(" ")`).
fn last_break(s: &str, end: usize) -> Option<usize> {
    let (newline, space) = last_breaks(s, 0, end);
    newline.filter(|p| *p > 0).or(space.filter(|p| *p > 0))
}

/// Returns where the last line break and the last space in `s[from..end]` start. Both are
/// whole clusters (a line feed is one, or "\r\n" together), so each is a cut between clusters.
fn last_breaks(s: &str, from: usize, end: usize) -> (Option<usize>, Option<usize>) {
    let mut newline = None;
    let mut space = None;
    for (start, cluster) in s[..end].grapheme_indices(true) {
        match cluster {
            _ if start < from => {}
            "\n" | "\r\n" => newline = Some(start),
            " " => space = Some(start),
            _ => {}
        }
    }
    (newline, space)
}

/// An open ``` fence: where it opens and its line (e.g. "```python").
struct Fence {
    opening: usize,
    line: String,
}

/// When `pos` falls inside an open fence, returns that fence (its opening moved back to a
/// cluster boundary, should a mark precede it).
fn inside_fence(content: &str, pos: usize) -> Option<Fence> {
    if content[..pos].matches(FENCE).count().is_multiple_of(2) {
        return None;
    }
    let start = content[..pos].rfind(FENCE)?;
    let line_end = content[start..]
        .find('\n')
        .map_or(content.len(), |p| start + p);
    Some(Fence {
        opening: measure::floor_boundary(content, start),
        line: content[start..line_end].to_string(),
    })
}

/// Finds the cut for a chunk that starts with a fence and must be closed with "\n```" within
/// `limit`: `pos` when it leaves room for the closing, else the last newline (else space)
/// after the fence line that does, else as much code as fits. Returns `None` when the fence
/// line leaves no room for code (the caller then cuts hard).
fn cut_inside_code(content: &str, pos: usize, limit: Limit) -> Option<usize> {
    // The code starts after the fence line (upstream: the fence's length, plus its newline).
    let min_code_pos = content.find('\n').map_or(content.len(), |p| p + 1);
    let closing = limit.measure(CLOSING);
    let room = limit.max.checked_sub(closing)?;
    if pos >= min_code_pos && limit.measure(&content[..pos]) <= room {
        return (pos > min_code_pos).then_some(pos);
    }
    if room <= limit.measure(&content[..min_code_pos]) {
        return None;
    }
    let budget = limit.with_max(room).prefix_end(content);
    let (newline, space) = last_breaks(content, min_code_pos, budget);
    let cut = match newline.or(space) {
        Some(p) if p > min_code_pos => p,
        _ => budget,
    };
    (cut > min_code_pos).then_some(cut)
}

/// Returns the chunk `content[..cut]` closed with "\n```", and the rest reopened with `fence`.
fn close_and_reopen(content: &str, cut: usize, fence: &str) -> (String, String) {
    let chunk = format!("{}{CLOSING}", &content[..cut]);
    let remainder = content[cut..]
        .strip_prefix("\r\n")
        .or_else(|| content[cut..].strip_prefix('\n'))
        .unwrap_or(&content[cut..]);
    (chunk, format!("{fence}\n{remainder}"))
}

/// Returns the longest chunk within `limit` and the rest, trimmed.
fn hard_cut(content: &str, limit: Limit) -> (String, String) {
    let end = limit.prefix_end(content);
    let rest = measure::trim_start(&content[end..]);
    (content[..end].to_string(), rest.to_string())
}

#[cfg(test)]
mod tests;

//! Splitting raw Markdown into message-sized chunks, as upstream's `_split_telegram_markdown`:
//! cut at the last newline, else the last space, else hard; a cut inside a ``` fence moves back
//! to the fence, or closes the chunk with "\n```" and reopens the next with the same fence line.
//! Lengths are in characters (Unicode scalar values), as Python counts them.

const FENCE: [char; 3] = ['`', '`', '`'];
const CLOSING: &str = "\n```";

/// Returns `content` in chunks of at most `max_chars` characters with balanced fences.
pub(super) fn split(content: &str, max_chars: usize) -> Vec<String> {
    let max = max_chars.max(1);
    let mut rest: Vec<char> = content.trim_start().chars().collect();
    let mut chunks = Vec::new();
    while !rest.is_empty() {
        if rest.len() <= max {
            chunks.push(rest.iter().collect());
            break;
        }
        let mut pos = match rfind(&rest[..max], &['\n']) {
            Some(p) if p > 0 => p,
            _ => match rfind(&rest[..max], &[' ']) {
                Some(p) if p > 0 => p,
                _ => max,
            },
        };
        if let Some((opening, fence)) = inside_fence(&rest, pos) {
            if opening > 0 {
                pos = opening;
            } else {
                match cut_inside_code(&rest, pos, max, &fence) {
                    Some(cut) => {
                        let mut chunk: String = rest[..cut].iter().collect();
                        chunk.push_str(CLOSING);
                        chunks.push(chunk);
                        let mut remainder = &rest[cut..];
                        if remainder.first() == Some(&'\n') {
                            remainder = &remainder[1..];
                        }
                        let mut next: Vec<char> = fence.clone();
                        next.push('\n');
                        next.extend_from_slice(remainder);
                        rest = next;
                    }
                    None => {
                        chunks.push(rest[..max].iter().collect());
                        rest = trim_start(&rest[max..]);
                    }
                }
                continue;
            }
        }
        chunks.push(rest[..pos].iter().collect());
        rest = trim_start(&rest[pos..]);
    }
    chunks
}

/// When `pos` falls inside an open fence, returns where that fence opens and its line
/// (e.g. "```python").
fn inside_fence(content: &[char], pos: usize) -> Option<(usize, Vec<char>)> {
    if count_fences(&content[..pos]).is_multiple_of(2) {
        return None;
    }
    let opening = rfind(&content[..pos], &FENCE)?;
    let line_end = content[opening..]
        .iter()
        .position(|c| *c == '\n')
        .map_or(content.len(), |p| opening + p);
    Some((opening, content[opening..line_end].to_vec()))
}

/// Finds the cut for a chunk that starts with `fence` and must be closed with "\n```" within
/// `max`: the last newline (else space) after the fence line that leaves room for the closing.
/// Returns `None` when no such cut exists (the caller then cuts hard at `max`).
fn cut_inside_code(content: &[char], pos: usize, max: usize, fence: &[char]) -> Option<usize> {
    let closing = CLOSING.chars().count();
    let mut min_code_pos = fence.len();
    if content.len() > fence.len()
        && content[..fence.len()] == *fence
        && content[fence.len()] == '\n'
    {
        min_code_pos += 1;
    }
    let mut cut = pos;
    if pos < min_code_pos || pos + closing > max {
        if max <= min_code_pos + closing {
            return None;
        }
        let budget = max - closing;
        let window = &content[..budget];
        let adjusted = rfind_from(window, '\n', min_code_pos)
            .or_else(|| rfind_from(window, ' ', min_code_pos));
        cut = match adjusted {
            Some(p) if p > min_code_pos => p,
            _ => budget,
        };
    }
    (cut > min_code_pos).then_some(cut)
}

fn count_fences(s: &[char]) -> usize {
    let mut count = 0;
    let mut i = 0;
    while i + FENCE.len() <= s.len() {
        if s[i..i + FENCE.len()] == FENCE {
            count += 1;
            i += FENCE.len();
        } else {
            i += 1;
        }
    }
    count
}

/// Returns the start of the last occurrence of `needle` in `haystack`.
fn rfind(haystack: &[char], needle: &[char]) -> Option<usize> {
    if needle.len() > haystack.len() {
        return None;
    }
    (0..=haystack.len() - needle.len())
        .rev()
        .find(|&i| haystack[i..i + needle.len()] == *needle)
}

/// Returns the last position of `c` at or after `from`.
fn rfind_from(haystack: &[char], c: char, from: usize) -> Option<usize> {
    haystack
        .iter()
        .rposition(|x| *x == c)
        .filter(|p| *p >= from)
}

fn trim_start(s: &[char]) -> Vec<char> {
    let skip = s.iter().take_while(|c| c.is_whitespace()).count();
    s[skip..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_content_is_one_chunk_and_blank_is_none() {
        assert_eq!(split("  hello", 10), vec!["hello"]);
        assert!(split("   \n ", 10).is_empty());
    }

    #[test]
    fn cuts_prefer_newline_then_space_then_hard() {
        assert_eq!(split("aaaa bbbb\ncccc", 12), vec!["aaaa bbbb", "cccc"]);
        assert_eq!(split("aaaa bbbb cccc", 12), vec!["aaaa bbbb", "cccc"]);
        assert_eq!(split("abcdefghij", 4), vec!["abcd", "efgh", "ij"]);
    }

    #[test]
    fn a_cut_inside_code_closes_and_reopens_the_same_fence() {
        let code: String = (0..30).map(|i| format!("line {i}\n")).collect();
        let md = format!("```python\n{code}```");
        let chunks = split(&md, 60);
        assert!(chunks.len() > 2, "{chunks:?}");
        for chunk in &chunks {
            assert!(chunk.chars().count() <= 60, "{chunk:?}");
            assert!(chunk.starts_with("```python\n"), "{chunk:?}");
            assert!(chunk.ends_with("```"), "{chunk:?}");
            assert_eq!(chunk.matches("```").count(), 2, "{chunk:?}");
        }
        let rejoined: String = chunks
            .iter()
            .map(|c| c.trim_start_matches("```python\n").trim_end_matches("```"))
            .collect::<Vec<_>>()
            .join("");
        assert_eq!(rejoined.replace('\n', ""), code.replace('\n', ""));
    }

    #[test]
    fn a_cut_inside_a_later_fence_moves_back_to_the_fence() {
        let md = format!(
            "{}\n```\ncode\nmore code\n```",
            "intro ".repeat(5).trim_end()
        );
        let chunks = split(&md, 40);
        assert_eq!(chunks[0], "intro intro intro intro intro\n");
        assert_eq!(chunks[1], "```\ncode\nmore code\n```");
    }
}

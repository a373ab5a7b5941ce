//! Test text for the splitters, and the checks every splitter must pass: Chinese, Japanese and
//! Korean, emoji (ZWJ families, flags, skin tones, keycaps), combining marks, Arabic and Hebrew
//! (with a right-to-left mark), mixed with ASCII words, spaces, newlines and "\r\n".

use proptest::prelude::*;
use unicode_segmentation::UnicodeSegmentation as _;

use super::measure::{self, Limit};

/// The pieces texts are made of. Each starts with a character that begins a cluster, so the
/// clusters of a text are those of its pieces, except where pieces join in Markdown.
const PIECES: &[&str] = &[
    "中文",
    "汉字很好",
    "日本語",
    "한국어",
    "👩\u{200d}👩\u{200d}👧\u{200d}👦",
    "🧑\u{200d}💻",
    "🇨🇳",
    "🇺🇸",
    "👍🏽",
    "1\u{fe0f}\u{20e3}",
    "😀",
    "e\u{301}",
    "a\u{308}\u{323}",
    "مرحبا",
    "שָׁלוֹם",
    "\u{200f}",
    "word",
    "x",
    "&",
    "<b>",
    "**bold**",
    "_it_",
    "`code`",
    " ",
    " ",
    " ",
    "\n",
    "\n",
    "\r\n",
    "\n\n",
    "\u{3000}",
    "- ",
    "# ",
];

/// Returns texts of up to `max_pieces` pieces.
pub(crate) fn text(max_pieces: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PIECES), 0..max_pieces).prop_map(|p| p.concat())
}

/// Returns texts with ``` fences, each on a line of its own (so a reopened fence adds only
/// backticks and a newline, no language).
pub(crate) fn fenced_text(max_pieces: usize) -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        6 => prop::sample::select(PIECES),
        1 => Just("\n```\n"),
    ];
    prop::collection::vec(piece, 0..max_pieces).prop_map(|p| p.concat())
}

/// Asserts that `chunks` are `original` cut at cluster boundaries, with only whitespace
/// between them: each chunk is the next stretch of the original once the whitespace before
/// it is skipped (the splitters drop whitespace at the cuts, by design), each is within
/// `limit`, and nothing else is left.
pub(crate) fn assert_cut_whole(original: &str, chunks: &[String], limit: Limit) {
    let mut at = original.len() - measure::trim_start(original).len();
    for chunk in chunks {
        assert!(
            limit.fits(chunk),
            "{} > {limit:?}: {chunk:?}",
            limit.measure(chunk)
        );
        assert!(!chunk.is_empty());
        assert!(
            original[at..].starts_with(chunk.as_str()),
            "chunk {chunk:?} is not next in {original:?} at {at}"
        );
        let end = at + chunk.len();
        assert_eq!(
            measure::floor_boundary(original, at),
            at,
            "starts inside a cluster"
        );
        assert_eq!(
            measure::floor_boundary(original, end),
            end,
            "ends inside a cluster"
        );
        at = original.len() - measure::trim_start(&original[end..]).len();
    }
    assert_eq!(at, original.len(), "text left over after {chunks:?}");
}

/// Returns the clusters of `s` that are not whitespace, without the characters in `ignore`.
pub(crate) fn clusters(s: &str, ignore: &[char]) -> Vec<String> {
    s.graphemes(true)
        .filter(|g| !g.chars().all(char::is_whitespace))
        .map(|g| {
            g.chars()
                .filter(|c| !ignore.contains(c))
                .collect::<String>()
        })
        .filter(|g| !g.is_empty())
        .collect()
}

/// Asserts that cutting `original` into `chunks` kept every cluster whole and in order: the
/// chunks' clusters, read one chunk after the other, are the original's (whitespace and the
/// characters in `ignore`, which a splitter adds, aside). A cut inside a cluster would leave a
/// piece of it at the end of one chunk and the rest at the start of the next.
pub(crate) fn assert_clusters_kept(original: &str, chunks: &[String], ignore: &[char]) {
    let kept: Vec<String> = chunks.iter().flat_map(|c| clusters(c, ignore)).collect();
    assert_eq!(kept, clusters(original, ignore), "{chunks:?}");
}

/// Asserts that `markup` (Telegram HTML or Slack mrkdwn) holds no piece of a tag or an entity:
/// every `&` starts a whole entity and every `<` is closed by a `>` before the next `<`.
pub(crate) fn assert_whole_markup(markup: &str) {
    const ENTITIES: [&str; 4] = ["&amp;", "&lt;", "&gt;", "&quot;"];
    for (at, _) in markup.match_indices('&') {
        let rest = &markup[at..];
        assert!(
            ENTITIES.iter().any(|e| rest.starts_with(e)),
            "a cut entity at {at} in {markup:?}"
        );
    }
    let mut rest = markup;
    while let Some(lt) = rest.find('<') {
        let tag = &rest[lt + 1..];
        let gt = tag.find('>').expect("a cut tag");
        assert!(!tag[..gt].contains('<'), "a cut tag in {markup:?}");
        rest = &tag[gt + 1..];
    }
}

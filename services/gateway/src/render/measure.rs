//! Message lengths as each platform counts them, and cuts that never fall inside a character
//! a person sees: a grapheme cluster (a ZWJ family 👩‍👩‍👧‍👦, a flag 🇨🇳, "e" + a combining accent),
//! as `unicode-segmentation` finds them (extended clusters, UAX #29).
//!
//! ```
//! use nanobot_gateway::render::measure::Limit;
//! let telegram = Limit::utf16(4);
//! assert_eq!(telegram.measure("🇨🇳a"), 5); // two regional indicators, two UTF-16 units each
//! assert_eq!(telegram.prefix("a🇨🇳"), "a"); // the flag does not fit whole, so it is left out
//! assert_eq!(Limit::code_points(4).prefix("e\u{301}e\u{301}e"), "e\u{301}e\u{301}");
//! ```

use unicode_segmentation::{GraphemeCursor, UnicodeSegmentation as _};

/// How a platform counts a message's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Unicode scalar values (code points), as Python's `len` counts (Discord, Slack).
    CodePoints,
    /// UTF-16 code units, as Telegram counts message lengths and entity offsets (a character
    /// outside the Basic Multilingual Plane, such as most emoji, counts 2).
    Utf16,
    /// UTF-8 bytes, as WeCom counts (a CJK character counts 3, most emoji 4).
    Utf8Bytes,
}

/// The longest a message may be, in a platform's [`Unit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The most units a message may have.
    pub max: usize,
    /// What is counted.
    pub unit: Unit,
}

impl Limit {
    /// Returns a limit of `max` code points.
    pub const fn code_points(max: usize) -> Self {
        Self {
            max,
            unit: Unit::CodePoints,
        }
    }

    /// Returns a limit of `max` UTF-16 code units.
    pub const fn utf16(max: usize) -> Self {
        Self {
            max,
            unit: Unit::Utf16,
        }
    }

    /// Returns a limit of `max` UTF-8 bytes.
    pub const fn utf8_bytes(max: usize) -> Self {
        Self {
            max,
            unit: Unit::Utf8Bytes,
        }
    }

    /// Returns the same unit with `max` replaced.
    pub const fn with_max(self, max: usize) -> Self {
        Self {
            max,
            unit: self.unit,
        }
    }

    /// Returns the length of `s` in this limit's unit.
    pub fn measure(&self, s: &str) -> usize {
        match self.unit {
            Unit::CodePoints => s.chars().count(),
            Unit::Utf16 => s.encode_utf16().count(),
            Unit::Utf8Bytes => s.len(),
        }
    }

    /// Returns whether `s` is within the limit.
    pub fn fits(&self, s: &str) -> bool {
        self.measure(s) <= self.max
    }

    /// Returns the longest prefix of `s` that is within the limit and made of whole grapheme
    /// clusters. When not even the first cluster fits (a cluster longer than the whole limit),
    /// returns the longest prefix of whole characters instead, and at least one character so
    /// that a splitter always advances.
    pub fn prefix<'a>(&self, s: &'a str) -> &'a str {
        &s[..self.prefix_end(s)]
    }

    /// Returns the byte length of [`Limit::prefix`].
    pub fn prefix_end(&self, s: &str) -> usize {
        let mut used = 0;
        let mut end = 0;
        for (start, cluster) in s.grapheme_indices(true) {
            used += self.measure(cluster);
            if used > self.max {
                break;
            }
            end = start + cluster.len();
        }
        if end > 0 || s.is_empty() {
            return end;
        }
        let mut used = 0;
        for (start, c) in s.char_indices() {
            used += self.measure(c.encode_utf8(&mut [0; 4]));
            if used > self.max {
                return if start == 0 { c.len_utf8() } else { start };
            }
        }
        s.len()
    }
}

/// Returns `i` moved back to the nearest grapheme cluster boundary of `s` (at most `i`).
pub fn floor_boundary(s: &str, i: usize) -> usize {
    let mut cursor = GraphemeCursor::new(i.min(s.len()), s.len(), true);
    if cursor.is_boundary(s, 0).unwrap_or(true) {
        return i.min(s.len());
    }
    cursor.prev_boundary(s, 0).ok().flatten().unwrap_or(0)
}

/// Returns `s` without its leading whitespace, taken away in whole grapheme clusters only (a
/// space carrying a combining mark stays, so no chunk starts with a lone mark).
pub fn trim_start(s: &str) -> &str {
    for (start, cluster) in s.grapheme_indices(true) {
        if !cluster.chars().all(char::is_whitespace) {
            return &s[start..];
        }
    }
    ""
}

/// Returns the part of a growing text (stream deltas so far) whose grapheme clusters are
/// known to be whole: all but the last cluster, which a later delta may still extend (a ZWJ
/// sequence arriving in pieces, an accent after its letter). A final line feed is kept: no
/// character joins a cluster after it.
pub fn settled(s: &str) -> &str {
    match s.grapheme_indices(true).next_back() {
        Some((_, "\n" | "\r\n")) | None => s,
        Some((start, _)) => &s[..start],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telegram_counts_emoji_outside_the_bmp_as_two_units() {
        let family = "👩\u{200d}👩\u{200d}👧\u{200d}👦";
        assert_eq!(Limit::utf16(0).measure(family), 11);
        assert_eq!(Limit::code_points(0).measure(family), 7);
        assert_eq!(Limit::utf16(0).measure("中文"), 2);
        assert_eq!(Limit::utf16(0).measure("שלום"), 4);
    }

    #[test]
    fn wecom_counts_utf8_bytes_and_cuts_between_clusters() {
        assert_eq!(Limit::utf8_bytes(0).measure("中文😀"), 10);
        assert_eq!(Limit::utf8_bytes(8).prefix("中文😀"), "中文");
        assert_eq!(Limit::utf8_bytes(5).prefix("a🇨🇳"), "a");
    }

    #[test]
    fn a_prefix_holds_whole_clusters_only() {
        let family = "👩\u{200d}👩\u{200d}👧\u{200d}👦";
        let text = format!("ab{family}cd");
        assert_eq!(Limit::utf16(12).prefix(&text), "ab");
        assert_eq!(Limit::utf16(13).prefix(&text), format!("ab{family}"));
        assert_eq!(Limit::utf16(7).prefix("🇨🇳🇺🇸"), "🇨🇳");
        // Only a limit shorter than one cluster cuts inside it (a splitter must advance).
        assert_eq!(Limit::utf16(3).prefix("🇨🇳🇺🇸"), "\u{1F1E8}");
        assert_eq!(Limit::code_points(2).prefix("e\u{301}x"), "e\u{301}");
        assert_eq!(Limit::code_points(1).prefix("e\u{301}x"), "e");
        assert_eq!(Limit::utf16(1).prefix("😀"), "😀");
        assert_eq!(Limit::utf16(5).prefix(""), "");
    }

    #[test]
    fn boundaries_trimming_and_settled_text_respect_clusters() {
        let s = "a🇨🇳e\u{301}";
        assert_eq!(floor_boundary(s, 5), 1);
        assert_eq!(floor_boundary(s, 9), 9);
        assert_eq!(floor_boundary(s, 10), 9);
        assert_eq!(trim_start(" \n\u{3000}مرحبا"), "مرحبا");
        assert_eq!(trim_start(" \u{301}x"), " \u{301}x");
        assert_eq!(trim_start(" \t\n"), "");
        assert_eq!(settled("hi 👩\u{200d}👩"), "hi ");
        assert_eq!(settled("line\n"), "line\n");
        assert_eq!(settled("中文"), "中");
        assert_eq!(settled(""), "");
    }
}

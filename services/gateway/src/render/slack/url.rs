//! Link URLs as markdown-it writes them (`normalizeLink`, `normalizeLinkText`, `validateLink`):
//! percent-encoded outside `;/?:@&=+$,-_.!~*'()#`, letters and digits, an existing `%XX` kept;
//! an autolink's text with its escapes decoded; `javascript:`, `vbscript:`, `file:` and
//! `data:` (but images) refused. Hostnames are not converted to punycode (markdown-it does).

use std::fmt::Write as _;

const KEEP: &str = ";/?:@&=+$,-_.!~*'()#";
/// What decoding an autolink's text leaves encoded (mdurl's defaults, and `%`).
const STAY_ENCODED: &str = ";/?:@&=+$,#%";

/// markdown-it's `normalizeLink`: `url` percent-encoded.
pub fn normalize_link(url: &str) -> String {
    let bytes = url.as_bytes();
    let mut out = String::with_capacity(url.len());
    let mut i = 0;
    for (at, c) in url.char_indices() {
        if at < i {
            continue;
        }
        i = at + c.len_utf8();
        let escaped = c == '%'
            && bytes.len() > at + 2
            && bytes[at + 1].is_ascii_hexdigit()
            && bytes[at + 2].is_ascii_hexdigit();
        if escaped {
            out.push_str(&url[at..at + 3]);
            i = at + 3;
        } else if c.is_ascii_alphanumeric() || KEEP.contains(c) {
            out.push(c);
        } else {
            for b in c.encode_utf8(&mut [0; 4]).bytes() {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

/// markdown-it's `normalizeLinkText`: the escapes of `url` decoded where they make text.
pub fn normalize_link_text(url: &str) -> String {
    let bytes = url.as_bytes();
    let mut out = String::with_capacity(url.len());
    let mut i = 0;
    while i < bytes.len() {
        if let Some((text, used)) = decode_escape(&url[i..]) {
            out.push_str(&text);
            i += used;
            continue;
        }
        let c = url[i..].chars().next().expect("a char at a boundary");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Decodes the `%XX` sequence (one UTF-8 character) `s` starts with, unless it stays encoded.
fn decode_escape(s: &str) -> Option<(String, usize)> {
    let byte_at = |k: usize| {
        let hex = s.get(k * 3..k * 3 + 3)?.strip_prefix('%')?;
        u8::from_str_radix(hex, 16).ok()
    };
    let first = byte_at(0)?;
    let len = match first {
        0x00..=0x7F => 1,
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => return None,
    };
    let raw: Vec<u8> = (0..len).map(byte_at).collect::<Option<_>>()?;
    let text = String::from_utf8(raw).ok()?;
    if len == 1 && STAY_ENCODED.contains(text.as_str()) {
        return None;
    }
    Some((text, len * 3))
}

/// markdown-it's `validateLink` on a normalized URL.
pub fn valid_link(url: &str) -> bool {
    let url = url.trim().to_lowercase();
    let bad = ["vbscript:", "javascript:", "file:", "data:"]
        .iter()
        .any(|p| url.starts_with(p));
    let good_data = ["gif", "png", "jpeg", "webp"]
        .iter()
        .any(|t| url.starts_with(&format!("data:image/{t};")));
    !bad || good_data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_percent_encoded_as_markdown_it_does() {
        assert_eq!(
            normalize_link("https://example.com/文档?q=1&x=2"),
            "https://example.com/%E6%96%87%E6%A1%A3?q=1&x=2"
        );
        assert_eq!(
            normalize_link("https://x.io/a%20b/[1]/é %4"),
            "https://x.io/a%20b/%5B1%5D/%C3%A9%20%254"
        );
        assert_eq!(
            normalize_link_text("https://x.io/a%20b%2F%E7%8C%AB"),
            "https://x.io/a b%2F猫"
        );
        assert!(!valid_link("JavaScript:alert(1)"));
        assert!(valid_link("data:image/png;base64,AA"));
    }
}

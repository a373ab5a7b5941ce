//! Link URLs as markdown-it writes them (`normalizeLink`, `normalizeLinkText`, `validateLink`):
//! percent-encoded outside `;/?:@&=+$,-_.!~*'()#`, letters and digits, an existing `%XX` kept;
//! an autolink's text with its escapes decoded; `javascript:`, `vbscript:`, `file:` and
//! `data:` (but images) refused. A non-ASCII hostname of an `http`, `https` or `mailto` URL is
//! written in punycode, label by label (markdown-it's `_punycode.to_ascii`; through the `url`
//! crate's IDNA, which also lowercases: `Bücher` is `xn--bcher-kva` where markdown-it keeps
//! `xn--Bcher-kva`).

use std::fmt::Write as _;

const KEEP: &str = ";/?:@&=+$,-_.!~*'()#";
/// What decoding an autolink's text leaves encoded (mdurl's defaults, and `%`).
const STAY_ENCODED: &str = ";/?:@&=+$,#%";

/// markdown-it's `normalizeLink`: the hostname in punycode, then `url` percent-encoded.
pub fn normalize_link(url: &str) -> String {
    let url = &ascii_host(url);
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

/// Characters that end a hostname (mdurl's `NON_HOST_CHARS`).
const NON_HOST: &[char] = &[
    '%', '/', '?', ';', '#', ' ', '"', '\'', '<', '>', '`', '{', '}', '|', '\\', '^', '\t', '\r',
    '\n',
];

/// Returns `url` with a non-ASCII hostname in punycode (`http:`, `https:` and `mailto:` only).
fn ascii_host(url: &str) -> String {
    let Some(colon) = url.find(':') else {
        return url.to_string();
    };
    let scheme = url[..colon].to_ascii_lowercase();
    let rest = &url[colon + 1..];
    let (lead, rest) = match scheme.as_str() {
        "http" | "https" => match rest.strip_prefix("//") {
            Some(r) => ("//", r),
            None => return url.to_string(),
        },
        "mailto" => ("", rest),
        _ => return url.to_string(),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host_start = rest[..end].rfind('@').map_or(0, |at| at + 1);
    let after = &rest[host_start..];
    let mut host_end = after.find(NON_HOST).unwrap_or(after.len());
    if let Some(port) = after[..host_end].rfind(':')
        && after[port + 1..host_end]
            .bytes()
            .all(|b| b.is_ascii_digit())
    {
        host_end = port;
    }
    let host = &after[..host_end];
    if host.is_ascii() {
        return url.to_string();
    }
    let labels: Vec<String> = host
        .split(['.', '\u{3002}', '\u{ff0e}', '\u{ff61}'])
        .map(|label| match label.is_ascii() {
            true => label.to_string(),
            false => match url::Host::parse(label) {
                Ok(url::Host::Domain(ascii)) => ascii,
                _ => label.to_string(),
            },
        })
        .collect();
    format!(
        "{}:{lead}{}{}{}",
        &url[..colon],
        &rest[..host_start],
        labels.join("."),
        &after[host_end..]
    )
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
        assert_eq!(
            normalize_link("https://user@bücher.de:8080/x"),
            "https://user@xn--bcher-kva.de:8080/x"
        );
        assert_eq!(
            normalize_link("mailto:张@例子。cn"),
            "mailto:%E5%BC%A0@xn--fsqu00a.cn"
        );
        assert!(!valid_link("JavaScript:alert(1)"));
        assert!(valid_link("data:image/png;base64,AA"));
    }
}

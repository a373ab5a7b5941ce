//! Telegram's `parse_mode: "HTML"` rules, as the Bot API enforces them: only its tags, every
//! start tag closed in order, the four named entities plus numeric ones. Returns the plain text
//! Telegram would store, so the 4096-character limit is counted after parsing, as Telegram
//! counts it (UTF-16 code units).

/// Tags the Bot API accepts in HTML (<https://core.telegram.org/bots/api#html-style>).
const SUPPORTED_TAGS: &[&str] = &[
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "span",
    "tg-spoiler",
    "a",
    "tg-emoji",
    "code",
    "pre",
    "blockquote",
];

/// Returns the text of `html` with tags removed and entities decoded, or the text after
/// "Bad Request: can't parse entities: " that Telegram answers for it.
pub(super) fn parse(html: &str) -> Result<String, String> {
    let mut text = String::with_capacity(html.len());
    let mut open: Vec<String> = Vec::new();
    let mut rest = html;
    while let Some(c) = rest.chars().next() {
        let offset = html.len() - rest.len();
        match c {
            '<' => {
                let Some(end) = rest.find('>') else {
                    return Err(format!("Unclosed start tag at byte offset {offset}"));
                };
                let tag = &rest[1..end];
                rest = &rest[end + 1..];
                if let Some(name) = tag.strip_prefix('/') {
                    let name = name.trim().to_ascii_lowercase();
                    match open.pop() {
                        Some(top) if top == name => {}
                        Some(top) => {
                            return Err(format!(
                                "Unmatched end tag at byte offset {offset}, expected \"</{top}>\", found \"</{name}>\""
                            ));
                        }
                        None => {
                            return Err(format!("Unexpected end tag at byte offset {offset}"));
                        }
                    }
                    continue;
                }
                let name: String = tag
                    .chars()
                    .take_while(|c| !c.is_whitespace() && *c != '/')
                    .collect::<String>()
                    .to_ascii_lowercase();
                if name.is_empty() {
                    return Err(format!("Empty tag name at byte offset {offset}"));
                }
                if !SUPPORTED_TAGS.contains(&name.as_str()) {
                    return Err(format!(
                        "Unsupported start tag \"{name}\" at byte offset {offset}"
                    ));
                }
                open.push(name);
            }
            '&' => {
                let (decoded, used) = entity(rest);
                text.push_str(&decoded);
                rest = &rest[used..];
            }
            _ => {
                text.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    if let Some(top) = open.pop() {
        return Err(format!(
            "Can't find end tag corresponding to start tag \"{top}\""
        ));
    }
    Ok(text)
}

/// Decodes the entity at the start of `s` (which starts with `&`): the named `lt`, `gt`,
/// `amp`, `quot` and numeric ones; anything else stays a literal `&`, as Telegram keeps it.
fn entity(s: &str) -> (String, usize) {
    let Some(end) = s[..s.len().min(12)].find(';') else {
        return ("&".to_string(), 1);
    };
    let name = &s[1..end];
    let decoded = match name {
        "lt" => Some('<'),
        "gt" => Some('>'),
        "amp" => Some('&'),
        "quot" => Some('"'),
        _ => {
            let code = if let Some(hex) = name.strip_prefix("#x").or(name.strip_prefix("#X")) {
                u32::from_str_radix(hex, 16).ok()
            } else {
                name.strip_prefix('#').and_then(|d| d.parse().ok())
            };
            code.and_then(char::from_u32)
        }
    };
    match decoded {
        Some(c) => (c.to_string(), end + 1),
        None => ("&".to_string(), 1),
    }
}

/// Returns the length Telegram counts for `text`: UTF-16 code units.
pub(super) fn telegram_len(text: &str) -> usize {
    text.encode_utf16().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_html_yields_its_decoded_text() {
        let html = "<b>bold</b> <a href=\"https://x.y/?a=1&amp;b=2\">link</a> &lt;tag&gt; \
                    <pre><code class=\"language-rust\">fn x() {}</code></pre> a & b &#65;&#x42;\
                    <blockquote expandable>q</blockquote><span class=\"tg-spoiler\">s</span>";
        assert_eq!(parse(html).unwrap(), "bold link <tag> fn x() {} a & b ABqs");
    }

    #[test]
    fn unbalanced_unsupported_and_stray_tags_are_rejected_like_telegram() {
        assert_eq!(
            parse("<b>open").unwrap_err(),
            "Can't find end tag corresponding to start tag \"b\""
        );
        assert_eq!(
            parse("<div>x</div>").unwrap_err(),
            "Unsupported start tag \"div\" at byte offset 0"
        );
        assert!(
            parse("<b><i>x</b></i>")
                .unwrap_err()
                .starts_with("Unmatched end tag")
        );
        assert!(
            parse("x</b>")
                .unwrap_err()
                .starts_with("Unexpected end tag")
        );
        assert!(
            parse("a < b")
                .unwrap_err()
                .starts_with("Unclosed start tag")
        );
        assert!(
            parse("1 <2 and 3> 2")
                .unwrap_err()
                .starts_with("Unsupported start tag")
        );
    }

    #[test]
    fn length_counts_utf16_units() {
        assert_eq!(telegram_len("abc"), 3);
        assert_eq!(telegram_len("😀"), 2);
    }
}

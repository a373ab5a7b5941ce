//! OneBot v11 messages: a `message` is an array of segments (`{"type","data"}`, NapCat's
//! default) or a CQ-code string (`text[CQ:at,qq=1]more`). Both become segments here; a CQ
//! string's escapes (`&amp;` `&#91;` `&#93;` in text, and `&#44;` in parameters) are undone, so
//! `&[],` and CJK arrive exactly as sent. (0.3.5 took a string as one text segment, leaving its
//! CQ codes in the text.)

use serde_json::{Map, Value, json};

/// One inbound image: where to download it, its name and announced size.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Image {
    /// http(s) URL.
    pub url: String,
    /// NapCat's file name (`<md5>.png`), if any.
    pub file: Option<String>,
    /// Announced size in bytes, if any.
    pub size: Option<u64>,
}

/// What a message says, as 0.3.5's `_parse_segments`.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Parsed {
    /// Text, other users' @s as `@{qq}`, faces as `[face:{id}]`, parts joined with a space.
    pub text: String,
    /// Images with an http(s) URL.
    pub images: Vec<Image>,
    /// Whether it @s the bot.
    pub mentions_me: bool,
    /// The message it replies to.
    pub reply_to: Option<String>,
}

/// Returns the segments of a `message` field: an array as is, a CQ string parsed.
pub(super) fn of_message(message: &Value) -> Vec<Value> {
    match message {
        Value::Array(items) => items.iter().filter(|s| s.is_object()).cloned().collect(),
        Value::String(s) if !s.is_empty() => parse_cq(s),
        _ => Vec::new(),
    }
}

/// Reads segments as 0.3.5 does; `me` is the bot's QQ number.
pub(super) fn parse(segments: &[Value], me: &str) -> Parsed {
    let mut parts: Vec<String> = Vec::new();
    let mut out = Parsed::default();
    for seg in segments {
        let data = &seg["data"];
        let field = |k: &str| match &data[k] {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        };
        match seg["type"].as_str().unwrap_or_default() {
            "text" => parts.extend(field("text")),
            "image" => match field("url") {
                Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                    out.images.push(Image {
                        url,
                        file: field("file"),
                        size: field("file_size").and_then(|s| s.parse().ok()),
                    })
                }
                _ => tracing::warn!("napcat image segment without an http(s) url skipped"),
            },
            "at" => match field("qq") {
                Some(qq) if !me.is_empty() && qq == me => out.mentions_me = true,
                qq => parts.push(format!("@{}", qq.unwrap_or_default())),
            },
            "reply" => out.reply_to = field("id"),
            "face" => parts.push(format!("[face:{}]", field("id").unwrap_or_default())),
            _ => {}
        }
    }
    out.text = parts
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    out
}

/// Parses a CQ-code string into segments.
pub(super) fn parse_cq(s: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let Some(start) = rest.find("[CQ:") else {
            push_text(&mut out, rest);
            break;
        };
        let Some(len) = rest[start..].find(']') else {
            push_text(&mut out, rest);
            break;
        };
        push_text(&mut out, &rest[..start]);
        out.push(code(&rest[start + 4..start + len]));
        rest = &rest[start + len + 1..];
    }
    out
}

fn push_text(out: &mut Vec<Value>, text: &str) {
    if !text.is_empty() {
        out.push(json!({"type": "text", "data": {"text": unescape(text)}}));
    }
}

/// One code's inside (`at,qq=1`) as a segment.
fn code(inner: &str) -> Value {
    let mut fields = inner.split(',');
    let kind = fields.next().unwrap_or_default();
    let mut data = Map::new();
    for field in fields {
        let (k, v) = field.split_once('=').unwrap_or((field, ""));
        data.insert(k.to_string(), Value::String(unescape(v)));
    }
    json!({"type": unescape(kind), "data": data})
}

/// Undoes CQ escaping; `&amp;` last, so `&amp;#91;` stays `&#91;`.
pub(super) fn unescape(s: &str) -> String {
    s.replace("&#44;", ",")
        .replace("&#91;", "[")
        .replace("&#93;", "]")
        .replace("&amp;", "&")
}

/// The segments of one outbound message: its images (first message only), then its text.
pub(super) fn outbound(images: &[String], text: &str) -> Vec<Value> {
    images
        .iter()
        .map(|file| json!({"type": "image", "data": {"file": file}}))
        .chain((!text.is_empty()).then(|| json!({"type": "text", "data": {"text": text}})))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cq_strings_unescape_cjk_emoji_and_the_four_special_characters() {
        let cq = "你好&#91;世界&#93; &amp; 🙂,ok[CQ:at,qq=10001][CQ:image,file=a&#44;b.png,url=https://x/y?a=1&amp;b=2]尾&amp;#91;";
        let segs = parse_cq(cq);
        assert_eq!(segs.len(), 4, "{segs:#?}");
        assert_eq!(segs[0]["data"]["text"], "你好[世界] & 🙂,ok");
        assert_eq!(segs[1], json!({"type": "at", "data": {"qq": "10001"}}));
        assert_eq!(segs[2]["data"]["file"], "a,b.png");
        assert_eq!(segs[2]["data"]["url"], "https://x/y?a=1&b=2");
        assert_eq!(segs[3]["data"]["text"], "尾&#91;", "&amp; is undone last");
        assert_eq!(
            parse_cq("[CQ:broken"),
            vec![json!({"type": "text", "data": {"text": "[CQ:broken"}})]
        );
    }

    #[test]
    fn segments_read_as_0_3_5_with_the_bots_mention_and_reply_noted() {
        let segs = of_message(&json!([
            {"type": "reply", "data": {"id": "-2147"}},
            {"type": "at", "data": {"qq": "42"}},
            {"type": "text", "data": {"text": " 看看这个 👀 "}},
            {"type": "at", "data": {"qq": 7}},
            {"type": "face", "data": {"id": "14"}},
            {"type": "image", "data": {"url": "https://img/1", "file": "a.png", "file_size": "12"}},
            {"type": "image", "data": {"file": "local-only.png"}},
            "not a segment",
        ]));
        let parsed = parse(&segs, "42");
        assert_eq!(parsed.text, "看看这个 👀 @7 [face:14]");
        assert!(parsed.mentions_me);
        assert_eq!(parsed.reply_to.as_deref(), Some("-2147"));
        assert_eq!(
            parsed.images,
            vec![Image {
                url: "https://img/1".into(),
                file: Some("a.png".into()),
                size: Some(12),
            }]
        );
        assert!(!parse(&segs, "").mentions_me, "unknown self id: no mention");
        let cq = parse(&of_message(&json!("[CQ:at,qq=42] 在吗？")), "42");
        assert_eq!((cq.text.as_str(), cq.mentions_me), ("在吗？", true));
    }

    #[test]
    fn outbound_segments_are_images_then_text_as_json_not_cq() {
        let segs = outbound(&["base64://AAA=".into()], "a[b]&c,d 中文");
        assert_eq!(
            segs[0],
            json!({"type": "image", "data": {"file": "base64://AAA="}})
        );
        assert_eq!(
            segs[1]["data"]["text"], "a[b]&c,d 中文",
            "arrays need no escaping"
        );
        assert!(outbound(&[], "").is_empty());
    }
}

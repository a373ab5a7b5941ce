//! Reading an `im.message.receive_v1` event, as 0.3.5's `_on_message`: messages of bots
//! dropped; the chat (the sender's open id in a direct chat, the chat id in a group); whether
//! the bot is @mentioned (or `@_all`); the text with the bot's leading mention stripped and
//! other mentions named `@name (open_id)`; a rich-text post's text and images; the images and
//! files to download.

use serde_json::Value;

/// A Feishu message, as far as the fleet reads it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Parsed {
    pub message_id: String,
    pub sender_id: String,
    pub chat_id: String,
    pub is_group: bool,
    pub msg_type: String,
    pub text: String,
    /// `(kind, key)`: `image` / `file` / `audio` / `media` resources to download.
    pub resources: Vec<(String, String, String)>,
    pub mentioned: bool,
    pub root_id: Option<String>,
    pub parent_id: Option<String>,
    pub thread_id: Option<String>,
}

/// Reads a `im.message.receive_v1` event; `None` for a bot's own message or one missing its
/// ids.
pub(super) fn parse(event: &Value, me: &str) -> Option<Parsed> {
    let sender = &event["sender"];
    if matches!(sender["sender_type"].as_str(), Some("bot" | "app")) {
        return None;
    }
    let m = &event["message"];
    let s = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let message_id = s(&m["message_id"])?;
    let sender_id = s(&sender["sender_id"]["open_id"])?;
    let chat_type = s(&m["chat_type"])?;
    let msg_type = s(&m["message_type"])?;
    let is_group = chat_type != "p2p";
    let chat_id = if is_group {
        s(&m["chat_id"])?
    } else {
        sender_id.clone()
    };
    let raw = m["content"].as_str().unwrap_or_default();
    let content: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
    let mentions = m["mentions"].as_array().cloned().unwrap_or_default();
    let is_me = |mention: &Value| {
        let id = mention["id"]["open_id"].as_str().unwrap_or_default();
        !id.is_empty() && id == me
    };
    let mentioned = raw.contains("@_all") || mentions.iter().any(is_me);
    let mut resources = Vec::new();
    let text = match msg_type.as_str() {
        "text" => {
            let text = content["text"].as_str().unwrap_or_default();
            resolve_mentions(&strip_leading_mention(text, &mentions, &is_me), &mentions)
        }
        "post" => post_text(&content, &mut resources),
        "image" => {
            let key = content["image_key"].as_str().unwrap_or_default();
            resources.push(("image".into(), key.into(), format!("{key}.jpg")));
            String::new()
        }
        "file" | "audio" | "media" => {
            let key = content["file_key"].as_str().unwrap_or_default();
            let name = content["file_name"].as_str().unwrap_or(key);
            resources.push((msg_type.clone(), key.into(), name.into()));
            String::new()
        }
        other => format!("[{other}]"),
    };
    Some(Parsed {
        message_id,
        sender_id,
        chat_id,
        is_group,
        msg_type,
        text,
        resources,
        mentioned,
        root_id: s(&m["root_id"]),
        parent_id: s(&m["parent_id"]),
        thread_id: s(&m["thread_id"]),
    })
}

/// Drops the bot's own mention at the start of `text` (so `/new` routes as a command).
fn strip_leading_mention(text: &str, mentions: &[Value], is_me: &dyn Fn(&Value) -> bool) -> String {
    let candidate = text.trim_start();
    for mention in mentions.iter().filter(|m| is_me(m)) {
        let key = mention["key"].as_str().unwrap_or_default();
        if let Some(rest) = candidate.strip_prefix(key)
            && !key.is_empty()
            && !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        {
            let rest = rest.trim();
            return if rest.is_empty() {
                text.to_string()
            } else {
                rest.to_string()
            };
        }
    }
    text.to_string()
}

/// Replaces `@_user_n` placeholders with `@name (open_id)`, as 0.3.5.
fn resolve_mentions(text: &str, mentions: &[Value]) -> String {
    let mut out = text.to_string();
    for mention in mentions {
        let key = mention["key"].as_str().unwrap_or_default();
        if key.is_empty() {
            continue;
        }
        let name = mention["name"].as_str().unwrap_or(key);
        let open_id = mention["id"]["open_id"].as_str().unwrap_or_default();
        let user_id = mention["id"]["user_id"].as_str().unwrap_or_default();
        let with = match (open_id.is_empty(), user_id.is_empty()) {
            (false, false) => format!("@{name} ({open_id}, user id: {user_id})"),
            (false, true) => format!("@{name} ({open_id})"),
            _ => format!("@{name}"),
        };
        out = replace_key(&out, key, &with);
    }
    out
}

/// Replaces `key` where it is not followed by a word character (`@_user_1` not in `@_user_10`).
fn replace_key(text: &str, key: &str, with: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(key) {
        let after = &rest[at + key.len()..];
        out.push_str(&rest[..at]);
        if after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            out.push_str(key);
        } else {
            out.push_str(with);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Returns a `post`'s text (title, then each paragraph's text, links and mentions) and adds
/// its images to `resources`. The body is either `{title, content}` or keyed by language.
fn post_text(content: &Value, resources: &mut Vec<(String, String, String)>) -> String {
    let body = if content["content"].is_array() {
        content
    } else {
        content
            .as_object()
            .and_then(|o| o.values().find(|v| v["content"].is_array()))
            .unwrap_or(&Value::Null)
    };
    let mut lines = Vec::new();
    if let Some(title) = body["title"].as_str().filter(|t| !t.is_empty()) {
        lines.push(title.to_string());
    }
    for paragraph in body["content"].as_array().into_iter().flatten() {
        let mut line = String::new();
        for el in paragraph.as_array().into_iter().flatten() {
            match el["tag"].as_str().unwrap_or_default() {
                "text" | "a" | "md" => line.push_str(el["text"].as_str().unwrap_or_default()),
                "at" => {
                    let name = el["user_name"].as_str().unwrap_or("user");
                    line.push_str(&format!("@{name}"));
                }
                "code_block" => line.push_str(el["text"].as_str().unwrap_or_default()),
                "img" => {
                    let key = el["image_key"].as_str().unwrap_or_default();
                    resources.push(("image".into(), key.into(), format!("{key}.jpg")));
                }
                _ => {}
            }
        }
        if !line.trim().is_empty() {
            lines.push(line);
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(chat_type: &str, content: Value, mentions: Value) -> Value {
        json!({"sender": {"sender_id": {"open_id": "ou_alice"}, "sender_type": "user"},
            "message": {"message_id": "om_1", "chat_id": "oc_group", "chat_type": chat_type,
                "message_type": "text", "content": content.to_string(), "mentions": mentions}})
    }

    #[test]
    fn a_group_mention_of_the_bot_is_stripped_and_other_mentions_are_named() {
        let mentions = json!([
            {"key": "@_user_1", "id": {"open_id": "ou_bot"}, "name": "小助手"},
            {"key": "@_user_2", "id": {"open_id": "ou_bob"}, "name": "鲍勃"},
        ]);
        let e = event(
            "group",
            json!({"text": "@_user_1 问 @_user_2 好 👋"}),
            mentions,
        );
        let p = parse(&e, "ou_bot").unwrap();
        assert!(p.mentioned && p.is_group);
        assert_eq!(p.chat_id, "oc_group");
        assert_eq!(p.text, "问 @鲍勃 (ou_bob) 好 👋");
        let other = parse(&e, "ou_someone_else").unwrap();
        assert!(!other.mentioned, "another bot's mention is not ours");
    }

    #[test]
    fn a_direct_message_is_answered_to_the_sender_and_bots_are_ignored() {
        let e = event("p2p", json!({"text": "你好 🌏"}), json!([]));
        let p = parse(&e, "ou_bot").unwrap();
        assert_eq!((p.chat_id.as_str(), p.is_group), ("ou_alice", false));
        assert_eq!(p.text, "你好 🌏");
        let mut from_bot = e.clone();
        from_bot["sender"]["sender_type"] = json!("bot");
        assert_eq!(parse(&from_bot, "ou_bot"), None);
        let mut no_id = e;
        no_id["message"]["message_id"] = json!("");
        assert_eq!(parse(&no_id, "ou_bot"), None);
    }

    #[test]
    fn a_post_gives_its_text_and_images_and_a_placeholder_is_not_cut_from_a_longer_one() {
        let mut resources = Vec::new();
        let post = json!({"zh_cn": {"title": "标题", "content": [
            [{"tag": "text", "text": "第一行 "}, {"tag": "a", "text": "链接", "href": "https://x"}],
            [{"tag": "img", "image_key": "img_1"}],
        ]}});
        assert_eq!(post_text(&post, &mut resources), "标题\n第一行 链接");
        assert_eq!(
            resources,
            [("image".into(), "img_1".into(), "img_1.jpg".into())]
        );
        assert_eq!(
            replace_key("@_user_1 @_user_10", "@_user_1", "@A"),
            "@A @_user_10"
        );
    }
}

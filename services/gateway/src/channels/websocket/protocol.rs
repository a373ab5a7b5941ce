//! The wire protocol: JSON text frames, upstream's `event` names (`ready`, `attached`,
//! `message`, `delta`, `stream_end`, `error`) plus `accepted` and `user_message`. A frame's
//! `id` is always a log entry id (the resume cursor); `msg_id` and `reply_to` are the
//! client's own message ids.

use serde_json::{Value, json};

use super::log::{Entry, Kind};

/// Longest chat or message id (upstream's `^[A-Za-z0-9_:-]{1,64}$`).
const MAX_ID: usize = 64;

/// What a client asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Envelope {
    /// `{"type":"new_chat"}`: mint a chat id and attach it.
    NewChat,
    /// `{"type":"attach","chat_id":…,"after":…}`: receive the chat's entries after `after`
    /// (the last entry id the client saw; none: only new ones).
    Attach {
        /// The chat.
        chat_id: String,
        /// The resume cursor.
        after: Option<String>,
    },
    /// `{"type":"message","chat_id":…,"text":…,"id":…}` (also `content`/`message`; a plain
    /// string or an object without `type` and `chat_id` goes to the default chat).
    Message {
        /// The chat (none: the connection's default chat).
        chat_id: Option<String>,
        /// The text.
        text: String,
        /// The client's message id (makes a resend idempotent).
        id: Option<String>,
    },
}

/// Returns whether `id` is a valid chat or message id.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '-'))
}

/// Parses one client frame; `Err` holds the detail of a soft `error` frame.
pub fn parse(raw: &str) -> Result<Envelope, String> {
    let value: Value = match serde_json::from_str(raw) {
        Ok(value) => value,
        // As upstream: what is not JSON is plain text for the default chat.
        Err(_) => return Ok(plain(raw)),
    };
    let obj = match value {
        Value::Object(obj) => obj,
        Value::String(text) => return Ok(plain(&text)),
        _ => return Ok(plain(raw)),
    };
    let text_of = |o: &serde_json::Map<String, Value>| {
        ["content", "text", "message"]
            .iter()
            .find_map(|k| o.get(*k).and_then(Value::as_str))
            .map(str::to_string)
    };
    let string = |key: &str| obj.get(key).and_then(Value::as_str).map(str::to_string);
    let chat_id = string("chat_id");
    if let Some(chat) = &chat_id
        && !is_valid_id(chat)
    {
        return Err("invalid chat_id".into());
    }
    let id = string("id");
    if let Some(id) = &id
        && !is_valid_id(id)
    {
        return Err("invalid id".into());
    }
    match obj.get("type").and_then(Value::as_str) {
        Some("new_chat") => Ok(Envelope::NewChat),
        Some("attach") => {
            let chat_id = chat_id.ok_or("attach needs a chat_id")?;
            let after = string("after");
            if after
                .as_deref()
                .is_some_and(|a| !super::log::is_entry_id(a))
            {
                return Err("invalid after (an entry id such as 1732512345678-0)".into());
            }
            Ok(Envelope::Attach { chat_id, after })
        }
        Some("message") | None => {
            let text = text_of(&obj).ok_or("message needs content or text")?;
            Ok(Envelope::Message { chat_id, text, id })
        }
        Some(other) => Err(format!("unknown type {other:?}")),
    }
}

fn plain(text: &str) -> Envelope {
    Envelope::Message {
        chat_id: None,
        text: text.to_string(),
        id: None,
    }
}

/// `ready`: the connection's default chat, as upstream.
pub fn ready(chat_id: &str, client_id: &str) -> String {
    json!({"event": "ready", "chat_id": chat_id, "client_id": client_id}).to_string()
}

/// `attached`: the client now receives `chat_id`'s frames.
pub fn attached(chat_id: &str) -> String {
    json!({"event": "attached", "chat_id": chat_id}).to_string()
}

/// `accepted`: the client's message `msg_id` is stored as log entry `id` and on its way to
/// the agent (the connection is not sent its own entry; `id` may serve as a resume cursor).
pub fn accepted(chat_id: &str, msg_id: &str, id: &str) -> String {
    json!({"event": "accepted", "chat_id": chat_id, "msg_id": msg_id, "id": id}).to_string()
}

/// `error`: a soft error naming the chat and the client's message when it concerns one; the
/// connection stays open.
pub fn error(detail: &str, chat_id: Option<&str>, msg_id: Option<&str>) -> String {
    let mut frame = json!({"event": "error", "detail": detail});
    if let Some(chat) = chat_id {
        frame["chat_id"] = json!(chat);
    }
    if let Some(msg_id) = msg_id {
        frame["msg_id"] = json!(msg_id);
    }
    frame.to_string()
}

/// `delta`: a chunk of the reply to the client's message `stream_id`.
pub fn delta(chat_id: &str, text: &str, stream_id: &str) -> String {
    json!({"event": "delta", "chat_id": chat_id, "text": text, "stream_id": stream_id}).to_string()
}

/// `stream_end`: the end of a streamed segment.
pub fn stream_end(chat_id: &str, stream_id: &str) -> String {
    json!({"event": "stream_end", "chat_id": chat_id, "stream_id": stream_id}).to_string()
}

/// The frame of a log entry: `user_message` (a message the user sent, seen from another
/// connection or on resume) or `message` with its `kind` (`final`, `progress`, `tool_hint`,
/// `error`) and `reply_to` (the client's message id it answers).
pub fn entry(chat_id: &str, entry: &Entry) -> Value {
    match entry.kind {
        Kind::User => json!({
            "event": "user_message",
            "chat_id": chat_id,
            "id": entry.id,
            "msg_id": entry.msg,
            "text": entry.text,
        }),
        kind => json!({
            "event": "message",
            "chat_id": chat_id,
            "id": entry.id,
            "kind": kind.as_str(),
            "text": entry.text,
            "reply_to": entry.msg,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_frames_parse_as_upstream_plus_ids_and_resume_cursors() {
        assert_eq!(
            parse("hello there"),
            Ok(plain("hello there")),
            "not JSON: plain text"
        );
        assert_eq!(parse(r#""hi""#), Ok(plain("hi")));
        assert_eq!(parse(r#"{"content":"hi"}"#), Ok(plain("hi")));
        assert_eq!(
            parse(r#"{"chat_id":"c-1","text":"hi","id":"m1"}"#),
            Ok(Envelope::Message {
                chat_id: Some("c-1".into()),
                text: "hi".into(),
                id: Some("m1".into())
            })
        );
        assert_eq!(
            parse(r#"{"type":"attach","chat_id":"c-1","after":"17-0"}"#),
            Ok(Envelope::Attach {
                chat_id: "c-1".into(),
                after: Some("17-0".into())
            })
        );
        assert_eq!(parse(r#"{"type":"new_chat"}"#), Ok(Envelope::NewChat));
        assert!(parse(r#"{"type":"attach","chat_id":"c 1"}"#).is_err());
        assert!(parse(r#"{"type":"attach","chat_id":"c","after":"x"}"#).is_err());
        assert!(parse(r#"{"type":"dance"}"#).is_err());
        assert!(parse(r#"{"chat_id":"c"}"#).is_err(), "no text");
        assert!(parse(r#"{"text":"x","id":"a.b"}"#).is_err());
        assert!(is_valid_id(&"a".repeat(64)) && !is_valid_id(&"a".repeat(65)));
    }
}

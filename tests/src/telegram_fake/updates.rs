//! Builders for what a Telegram user sends: users, chats and incoming messages, rendered to
//! the Bot API's JSON (with the `mention` and `bot_command` entities Telegram computes).

use serde_json::{Value, json};

/// A Telegram user (a person, or another bot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TgUser {
    /// The user id.
    pub id: i64,
    /// The first name.
    pub first_name: String,
    /// The username, without `@`.
    pub username: Option<String>,
}

impl TgUser {
    /// Returns a user with a username; the first name is the username capitalised.
    pub fn new(id: i64, username: &str) -> Self {
        let mut first_name = username.to_string();
        if let Some(first) = first_name.get_mut(0..1) {
            first.make_ascii_uppercase();
        }
        Self {
            id,
            first_name,
            username: Some(username.to_string()),
        }
    }

    /// Returns a user without a username (sender id `"{id}"` upstream).
    pub fn anonymous(id: i64, first_name: &str) -> Self {
        Self {
            id,
            first_name: first_name.to_string(),
            username: None,
        }
    }

    /// Returns the Bot API `User` object.
    pub fn to_json(&self) -> Value {
        let mut user = json!({"id": self.id, "is_bot": false, "first_name": self.first_name,
            "language_code": "en"});
        if let Some(username) = &self.username {
            user["username"] = json!(username);
        }
        user
    }
}

/// A chat: the private chat with one user, a group or a (forum) supergroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TgChat {
    /// The chat id (positive for private chats, negative for groups).
    pub id: i64,
    json: Value,
}

impl TgChat {
    /// Returns the private chat with `user` (chat id = user id).
    pub fn private(user: &TgUser) -> Self {
        let mut chat = json!({"id": user.id, "type": "private", "first_name": user.first_name});
        if let Some(username) = &user.username {
            chat["username"] = json!(username);
        }
        Self {
            id: user.id,
            json: chat,
        }
    }

    /// Returns a basic group (`id` should be negative).
    pub fn group(id: i64, title: &str) -> Self {
        Self {
            id,
            json: json!({"id": id, "type": "group", "title": title}),
        }
    }

    /// Returns a supergroup; with `is_forum` its messages can carry topic thread ids.
    pub fn supergroup(id: i64, title: &str, is_forum: bool) -> Self {
        let mut chat = json!({"id": id, "type": "supergroup", "title": title});
        if is_forum {
            chat["is_forum"] = json!(true);
        }
        Self { id, json: chat }
    }

    /// Returns the Bot API `Chat` object.
    pub fn to_json(&self) -> Value {
        self.json.clone()
    }

    /// Returns the chat the Bot API reports for an id nobody introduced: private for positive
    /// ids, a group otherwise.
    pub(super) fn unknown(id: i64) -> Self {
        if id > 0 {
            return Self::private(&TgUser::anonymous(id, &format!("User{id}")));
        }
        Self::group(id, &format!("Group {id}"))
    }
}

/// A file known to the fake (uploaded by a test for users to send, or by the bot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRef {
    /// The `file_id` the Bot API hands out.
    pub file_id: String,
    /// The `file_unique_id`.
    pub file_unique_id: String,
    /// The `file_path` for `{base}/file/bot{token}/{file_path}`.
    pub file_path: String,
    /// Size in bytes.
    pub size: usize,
    /// The original file name.
    pub name: String,
    /// The MIME type.
    pub mime: String,
}

/// A message a user sends to a bot, built step by step and injected with
/// [`FakeBot::inject`](super::FakeBot::inject) (or its edited/media-group variants).
#[derive(Debug, Clone)]
pub struct Incoming {
    pub(super) chat: TgChat,
    pub(super) from: TgUser,
    pub(super) fields: serde_json::Map<String, Value>,
    pub(super) reply_to: Option<i64>,
}

impl Incoming {
    /// Returns a message from `from` in `chat` with no content yet.
    pub fn new(chat: &TgChat, from: &TgUser) -> Self {
        Self {
            chat: chat.clone(),
            from: from.clone(),
            fields: serde_json::Map::new(),
            reply_to: None,
        }
    }

    /// Returns a message from `from` in the private chat with them, with no content yet.
    pub fn private(from: &TgUser) -> Self {
        Self::new(&TgChat::private(from), from)
    }

    /// Returns a text message from `from` in the private chat with them.
    pub fn text_from(from: &TgUser, text: &str) -> Self {
        Self::private(from).text(text)
    }

    /// Sets the text (mentions and a leading command become entities, as Telegram does).
    pub fn text(mut self, text: &str) -> Self {
        self.fields.insert("text".into(), json!(text));
        self.fields
            .insert("entities".into(), Value::Array(entities(text)));
        self
    }

    /// Sets the caption of a media message (with its entities).
    pub fn caption(mut self, caption: &str) -> Self {
        self.fields.insert("caption".into(), json!(caption));
        self.fields
            .insert("caption_entities".into(), Value::Array(entities(caption)));
        self
    }

    /// Attaches a photo (two sizes, the larger one being `file`).
    pub fn photo(mut self, file: &FileRef) -> Self {
        let small = json!({"file_id": format!("{}-s", file.file_id),
            "file_unique_id": format!("{}-s", file.file_unique_id),
            "file_size": file.size.min(1024), "width": 90, "height": 90});
        let large = json!({"file_id": file.file_id, "file_unique_id": file.file_unique_id,
            "file_size": file.size, "width": 1280, "height": 960});
        self.fields.insert("photo".into(), json!([small, large]));
        self
    }

    /// Attaches a voice note of `duration` seconds.
    pub fn voice(mut self, file: &FileRef, duration: u32) -> Self {
        self.fields.insert(
            "voice".into(),
            json!({"file_id": file.file_id, "file_unique_id": file.file_unique_id,
                "duration": duration, "mime_type": file.mime, "file_size": file.size}),
        );
        self
    }

    /// Attaches an audio file of `duration` seconds.
    pub fn audio(mut self, file: &FileRef, duration: u32) -> Self {
        self.fields.insert(
            "audio".into(),
            json!({"file_id": file.file_id, "file_unique_id": file.file_unique_id,
                "duration": duration, "mime_type": file.mime, "file_size": file.size,
                "file_name": file.name}),
        );
        self
    }

    /// Attaches a document.
    pub fn document(mut self, file: &FileRef) -> Self {
        self.fields.insert(
            "document".into(),
            json!({"file_id": file.file_id, "file_unique_id": file.file_unique_id,
                "file_name": file.name, "mime_type": file.mime, "file_size": file.size}),
        );
        self
    }

    /// Attaches a location.
    pub fn location(mut self, latitude: f64, longitude: f64) -> Self {
        self.fields.insert(
            "location".into(),
            json!({"latitude": latitude, "longitude": longitude}),
        );
        self
    }

    /// Makes the message a reply to message `message_id` of the same chat (the fake fills
    /// `reply_to_message` from the messages it has seen or sent).
    pub fn reply_to(mut self, message_id: i64) -> Self {
        self.reply_to = Some(message_id);
        self
    }

    /// Puts the message in forum topic `thread_id`.
    pub fn topic(mut self, thread_id: i64) -> Self {
        self.fields
            .insert("message_thread_id".into(), json!(thread_id));
        self.fields.insert("is_topic_message".into(), json!(true));
        self
    }

    /// Sets any other `Message` field (raw JSON), e.g. `forward_origin`.
    pub fn field(mut self, name: &str, value: Value) -> Self {
        self.fields.insert(name.into(), value);
        self
    }
}

/// Returns the entities Telegram computes for plain text: `@username` mentions and a leading
/// `/command`, with offsets and lengths in UTF-16 code units.
fn entities(text: &str) -> Vec<Value> {
    let mut found = Vec::new();
    let mut utf16_offset = 0usize;
    let chars = text.char_indices();
    let mut prev: Option<char> = None;
    for (byte, c) in chars {
        let starts_word = prev.is_none_or(|p| !p.is_alphanumeric() && p != '_');
        let kind = match c {
            '@' if starts_word => Some("mention"),
            '/' if byte == 0 => Some("bot_command"),
            _ => None,
        };
        if let Some(kind) = kind {
            let word: String = text[byte + 1..]
                .chars()
                .take_while(|c| {
                    c.is_ascii_alphanumeric() || *c == '_' || (*c == '@' && kind == "bot_command")
                })
                .collect();
            if !word.is_empty() {
                let length = 1 + word.encode_utf16().count();
                found.push(json!({"type": kind, "offset": utf16_offset, "length": length}));
            }
        }
        utf16_offset += c.len_utf16();
        prev = Some(c);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_and_leading_commands_become_entities_in_utf16_units() {
        let found = entities("/start@my_bot hi 😀 @alice_b, mail a@b");
        assert_eq!(
            found,
            vec![
                json!({"type": "bot_command", "offset": 0, "length": 13}),
                json!({"type": "mention", "offset": 20, "length": 8}),
            ]
        );
        assert!(entities("no entities here").is_empty());
    }
}

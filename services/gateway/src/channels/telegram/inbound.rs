//! Pure translation of a Telegram message into what the fleet needs, as upstream: the sender
//! id, the session key, whether the bot is addressed (groups), the command, the reply context
//! and the attachments; and the final inbound text once media are downloaded.

use teloxide::types::{Message, MessageEntity, MessageEntityKind, User};

/// Longest reply context kept, as upstream.
const REPLY_CONTEXT_MAX: usize = 4000;
/// Most entities of a message looked at (Telegram's own limit).
const MAX_ENTITIES: usize = 100;

/// The bot's own identity (from `getMe`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Me {
    /// The bot's user id.
    pub id: u64,
    /// The bot's username, without `@`.
    pub username: String,
}

/// What kind of attachment a message carries (the tag in `[image: path]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaKind {
    /// A photo.
    Image,
    /// A voice note (transcribed).
    Voice,
    /// An audio file (transcribed).
    Audio,
    /// A document.
    File,
    /// A video.
    Video,
    /// An animation (GIF).
    Animation,
}

impl MediaKind {
    /// Returns upstream's tag.
    pub fn tag(self) -> &'static str {
        match self {
            Self::Image => "image",
            Self::Voice => "voice",
            Self::Audio => "audio",
            Self::File => "file",
            Self::Video => "video",
            Self::Animation => "animation",
        }
    }

    /// Returns whether upstream transcribes it.
    pub fn is_audio(self) -> bool {
        matches!(self, Self::Voice | Self::Audio)
    }
}

/// An attachment to download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaRef {
    /// Kind.
    pub kind: MediaKind,
    /// Telegram file id (for `getFile`).
    pub file_id: String,
    /// Stable unique id (the local file name).
    pub unique_id: String,
    /// File extension with the dot.
    pub ext: String,
    /// Size in bytes as Telegram announces it; 0 when unknown.
    pub size: u64,
}

/// A message as the channel sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// `"{id}|{username}"` or `"{id}"`.
    pub sender_id: String,
    /// The sender's first name (for `/start`).
    pub first_name: String,
    /// Chat id.
    pub chat_id: i64,
    /// The message id.
    pub message_id: i32,
    /// A private chat.
    pub is_private: bool,
    /// `telegram:{chat}` or `telegram:{chat}:topic:{thread}`.
    pub session_key: String,
    /// Text or caption, a command's `@botname` suffix stripped.
    pub text: String,
    /// The command name (lower case, no slash, no suffix), when the text is one.
    pub command: Option<String>,
    /// `[Reply to …: …]` when replying to a message.
    pub reply_context: Option<String>,
    /// `[location: lat, lon]`.
    pub location: Option<String>,
    /// Attachments.
    pub media: Vec<MediaRef>,
    /// Private chat, or the bot is mentioned or replied to.
    pub addressed: bool,
    /// The album this message belongs to.
    pub media_group: Option<String>,
}

/// Returns upstream's sender id: `"{id}|{username}"` when the user has a username.
pub fn sender_id(user: &User) -> String {
    match &user.username {
        Some(name) if !name.is_empty() => format!("{}|{name}", user.id.0),
        _ => user.id.0.to_string(),
    }
}

/// Returns the session key of a chat (and forum topic / thread).
pub fn session_key(chat_id: i64, thread_id: Option<i32>) -> String {
    match thread_id {
        Some(thread) => format!("telegram:{chat_id}:topic:{thread}"),
        None => format!("telegram:{chat_id}"),
    }
}

/// Returns the thread of a session key made by [`session_key`].
pub fn thread_of(session_key: &str) -> Option<i32> {
    session_key.rsplit_once(":topic:")?.1.parse().ok()
}

/// Parses `msg`; `None` for messages without a human sender (channel posts, service messages
/// from bots).
pub fn parse(msg: &Message, me: &Me) -> Option<Parsed> {
    let from = msg.from.as_ref()?;
    if from.is_bot {
        return None;
    }
    let is_private = msg.chat.is_private();
    let thread = msg
        .thread_id
        .filter(|_| msg.is_topic_message || is_private)
        .map(|t| t.0.0);
    let raw = msg.text().or(msg.caption()).unwrap_or("");
    let (text, command) = strip_command(raw, &me.username);
    let (entity_text, entities) = msg
        .text()
        .zip(msg.entities())
        .or_else(|| msg.caption().zip(msg.caption_entities()))
        .unwrap_or_default();
    let at_me = format!("@{}", me.username).to_lowercase();
    // Telegram sends at most 100 entities; more are not looked at (each is a scan of the text).
    let mentioned = entities.iter().take(MAX_ENTITIES).any(|e| match &e.kind {
        MessageEntityKind::Mention => {
            entity_str(entity_text, e).is_some_and(|t| t.to_lowercase() == at_me)
        }
        MessageEntityKind::TextMention { user } => user.id.0 == me.id,
        MessageEntityKind::BotCommand => {
            entity_str(entity_text, e).is_some_and(|t| t.to_lowercase().ends_with(&at_me))
        }
        _ => false,
    });
    let reply = msg.reply_to_message();
    let replied_to_me = reply
        .and_then(|r| r.from.as_ref())
        .is_some_and(|u| u.id.0 == me.id);
    Some(Parsed {
        sender_id: sender_id(from),
        first_name: from.first_name.clone(),
        chat_id: msg.chat.id.0,
        message_id: msg.id.0,
        is_private,
        session_key: session_key(msg.chat.id.0, thread),
        text,
        command,
        reply_context: reply.map(|r| reply_context(r, me)),
        location: msg
            .location()
            .map(|l| format!("[location: {}, {}]", l.latitude, l.longitude)),
        media: media_of(msg),
        addressed: is_private || mentioned || replied_to_me,
        media_group: msg.media_group_id().map(|g| g.0.clone()),
    })
}

/// Splits a leading `/cmd@botname args` into `/cmd args` and `cmd` (other bots' commands keep
/// their suffix and are no command of ours). `/dream_log` style names become `/dream-log`
/// (and `/evaluator_prompt` `/evaluator-prompt`), as upstream's Telegram aliases.
fn strip_command(text: &str, my_name: &str) -> (String, Option<String>) {
    let Some(rest) = text.strip_prefix('/') else {
        return (text.to_string(), None);
    };
    let (head, args) = match rest.find(char::is_whitespace) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let name = match head.split_once('@') {
        Some((name, bot)) if bot.eq_ignore_ascii_case(my_name) => name,
        Some(_) => return (text.to_string(), None),
        None => head,
    };
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return (text.to_string(), None);
    }
    let name = name.to_lowercase();
    let public = match name.as_str() {
        "dream_log" | "dream_restore" | "dream_prompt" | "evaluator_prompt" => {
            name.replace('_', "-")
        }
        _ => name.clone(),
    };
    (format!("/{public}{args}"), Some(name))
}

fn reply_context(reply: &Message, me: &Me) -> String {
    let text = reply.text().or(reply.caption()).unwrap_or("");
    let mut body: String = text.chars().take(REPLY_CONTEXT_MAX).collect();
    if text.chars().count() > REPLY_CONTEXT_MAX {
        body.push_str("...");
    }
    let who = match reply.from.as_ref() {
        Some(u) if u.id.0 == me.id => "Reply to bot".to_string(),
        Some(User {
            username: Some(name),
            ..
        }) => format!("Reply to @{name}"),
        Some(u) if !u.first_name.is_empty() => format!("Reply to {}", u.first_name),
        _ => "Reply to".to_string(),
    };
    format!("[{who}: {body}]")
}

/// Returns the text an entity covers, `None` when its UTF-16 offset or length falls outside
/// `text` or inside a character (a surrogate pair): the sender wrote the entities, so they are
/// checked, never trusted (teloxide's `parse_entities` panics on them).
fn entity_str<'a>(text: &'a str, entity: &MessageEntity) -> Option<&'a str> {
    let end_units = entity.offset.checked_add(entity.length)?;
    let (mut start, mut end) = (None, None);
    let mut units = 0;
    for (byte, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), '\0')))
    {
        if units == entity.offset {
            start = Some(byte);
        }
        if units == end_units {
            end = Some(byte);
            break;
        }
        if units > end_units {
            break;
        }
        units += c.len_utf16();
    }
    text.get(start?..end?)
}

fn media_of(msg: &Message) -> Vec<MediaRef> {
    let mut out = Vec::new();
    let mut push = |kind, file: &teloxide::types::FileMeta, ext: String| {
        out.push(MediaRef {
            kind,
            file_id: file.id.0.clone(),
            unique_id: file.unique_id.0.clone(),
            ext,
            // teloxide reads a missing `file_size` as u32::MAX.
            size: match file.size {
                u32::MAX => 0,
                size => u64::from(size),
            },
        });
    };
    if let Some(largest) = msg.photo().and_then(|sizes| sizes.last()) {
        push(MediaKind::Image, &largest.file, ".jpg".into());
    }
    if let Some(v) = msg.voice() {
        push(MediaKind::Voice, &v.file, ".ogg".into());
    }
    if let Some(a) = msg.audio() {
        push(
            MediaKind::Audio,
            &a.file,
            ext_of(a.file_name.as_deref(), ".mp3"),
        );
    }
    if let Some(d) = msg.document() {
        push(MediaKind::File, &d.file, ext_of(d.file_name.as_deref(), ""));
    }
    if let Some(v) = msg.video() {
        push(MediaKind::Video, &v.file, ".mp4".into());
    }
    if let Some(a) = msg.animation() {
        push(MediaKind::Animation, &a.file, ".mp4".into());
    }
    out
}

fn ext_of(file_name: Option<&str>, fallback: &str) -> String {
    let ext = file_name
        .and_then(|n| n.rsplit_once('.'))
        .map(|(_, e)| e)
        .filter(|e| !e.is_empty() && e.len() <= 8 && e.chars().all(|c| c.is_ascii_alphanumeric()));
    match ext {
        Some(e) => format!(".{}", e.to_lowercase()),
        None => fallback.to_string(),
    }
}

/// Builds the inbound text: reply context, text, location, then one line per attachment
/// (`[image: path]`, `[transcription: …]`); `[empty message]` when nothing is left.
pub fn content(parsed: &Parsed, attachments: &[String]) -> String {
    let mut lines: Vec<&str> = Vec::new();
    if let Some(ctx) = &parsed.reply_context {
        lines.push(ctx);
    }
    if !parsed.text.trim().is_empty() {
        lines.push(&parsed.text);
    }
    if let Some(loc) = &parsed.location {
        lines.push(loc);
    }
    lines.extend(attachments.iter().map(String::as_str));
    if lines.is_empty() {
        return "[empty message]".into();
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn me() -> Me {
        Me {
            id: 999,
            username: "nano_bot".into(),
        }
    }

    fn message(extra: serde_json::Value) -> Message {
        let mut base = json!({
            "message_id": 7, "date": 1_700_000_000,
            "chat": {"id": 42, "type": "private", "first_name": "Alice", "username": "alice"},
            "from": {"id": 42, "is_bot": false, "first_name": "Alice", "username": "alice"},
        });
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        serde_json::from_value(base).expect("a valid Telegram message")
    }

    fn group(extra: serde_json::Value) -> Message {
        let mut m = json!({"chat": {"id": -100, "type": "supergroup", "title": "G"}});
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        message(m)
    }

    #[test]
    fn sender_ids_and_session_keys_follow_upstream() {
        let p = parse(&message(json!({"text": "hi"})), &me()).unwrap();
        assert_eq!(p.sender_id, "42|alice");
        assert_eq!(p.session_key, "telegram:42");
        assert!(p.addressed && p.is_private);
        let anon =
            message(json!({"text": "hi", "from": {"id": 5, "is_bot": false, "first_name": "Bo"}}));
        assert_eq!(parse(&anon, &me()).unwrap().sender_id, "5");
        let topic = group(json!({"text": "x", "message_thread_id": 11, "is_topic_message": true}));
        let p = parse(&topic, &me()).unwrap();
        assert_eq!(p.session_key, "telegram:-100:topic:11");
        assert_eq!(thread_of(&p.session_key), Some(11));
        assert_eq!(thread_of("telegram:-100"), None);
        let from_bot =
            message(json!({"text": "x", "from": {"id": 1, "is_bot": true, "first_name": "B"}}));
        assert!(parse(&from_bot, &me()).is_none());
    }

    #[test]
    fn groups_address_the_bot_only_by_mention_or_reply() {
        let plain = group(json!({"text": "hello all"}));
        assert!(!parse(&plain, &me()).unwrap().addressed);
        let mention = group(json!({"text": "hey @nano_bot look",
            "entities": [{"type": "mention", "offset": 4, "length": 9}]}));
        assert!(parse(&mention, &me()).unwrap().addressed);
        let other = group(json!({"text": "hey @other_bot",
            "entities": [{"type": "mention", "offset": 4, "length": 10}]}));
        assert!(!parse(&other, &me()).unwrap().addressed);
        let reply = group(json!({"text": "and?", "reply_to_message": {
            "message_id": 3, "date": 1, "chat": {"id": -100, "type": "supergroup", "title": "G"},
            "from": {"id": 999, "is_bot": true, "first_name": "Nano", "username": "nano_bot"},
            "text": "earlier answer"}}));
        let p = parse(&reply, &me()).unwrap();
        assert!(p.addressed);
        assert_eq!(
            p.reply_context.as_deref(),
            Some("[Reply to bot: earlier answer]")
        );
    }

    #[test]
    fn entities_out_of_range_or_inside_a_surrogate_pair_are_ignored_not_a_panic() {
        // "😀" is two UTF-16 units: offset 1 falls inside it.
        let text = "😀 @nano_bot 你好";
        let bad = [(1, 3), (0, 1), (40, 9), (3, 900), (usize::MAX, 2)];
        for (offset, length) in bad {
            let msg = group(json!({"text": text,
                "entities": [{"type": "mention", "offset": offset, "length": length}]}));
            let p = parse(&msg, &me()).expect("parsed");
            assert!(!p.addressed, "{offset}+{length}");
            assert_eq!(p.text, text);
        }
        let good = group(json!({"text": text,
            "entities": [{"type": "mention", "offset": 3, "length": 9}]}));
        assert!(
            parse(&good, &me()).unwrap().addressed,
            "a valid one still counts"
        );
        let caption = group(json!({"caption": "🇨🇳 /help@nano_bot", "photo": [
            {"file_id": "f", "file_unique_id": "u", "width": 1, "height": 1}],
            "caption_entities": [{"type": "bot_command", "offset": 5, "length": 14}]}));
        assert!(parse(&caption, &me()).unwrap().addressed);
    }

    #[test]
    fn commands_lose_the_bot_suffix_and_others_commands_are_text() {
        let (text, cmd) = strip_command("/help@nano_bot", "nano_bot");
        assert_eq!((text.as_str(), cmd.as_deref()), ("/help", Some("help")));
        let (text, cmd) = strip_command("/dream_log@Nano_Bot abc", "nano_bot");
        assert_eq!(
            (text.as_str(), cmd.as_deref()),
            ("/dream-log abc", Some("dream_log"))
        );
        let (text, cmd) = strip_command("/evaluator_prompt@nano_bot init", "nano_bot");
        assert_eq!(
            (text.as_str(), cmd.as_deref()),
            ("/evaluator-prompt init", Some("evaluator_prompt"))
        );
        let (text, cmd) = strip_command("/goal 写一本书 📚 🇨🇳", "nano_bot");
        assert_eq!(
            (text.as_str(), cmd.as_deref()),
            ("/goal 写一本书 📚 🇨🇳", Some("goal"))
        );
        let (text, cmd) = strip_command("/help@someone_else", "nano_bot");
        assert_eq!((text.as_str(), cmd), ("/help@someone_else", None));
        assert_eq!(strip_command("hello", "nano_bot").1, None);
    }

    #[test]
    fn content_joins_reply_text_location_and_attachments_or_says_empty() {
        let located = message(json!({"location": {"latitude": 1.5, "longitude": -2.25}}));
        let p = parse(&located, &me()).unwrap();
        assert_eq!(content(&p, &[]), "[location: 1.5, -2.25]");
        let photo = message(json!({"caption": "look", "photo": [
            {"file_id": "small", "file_unique_id": "s", "width": 1, "height": 1},
            {"file_id": "big", "file_unique_id": "B1", "width": 9, "height": 9}]}));
        let p = parse(&photo, &me()).unwrap();
        assert_eq!(p.media.len(), 1);
        assert_eq!(
            (p.media[0].file_id.as_str(), p.media[0].ext.as_str()),
            ("big", ".jpg")
        );
        assert_eq!(
            content(&p, &["[image: /m/B1.jpg]".into()]),
            "look\n[image: /m/B1.jpg]"
        );
        let sticker_like = message(json!({}));
        assert_eq!(
            content(&parse(&sticker_like, &me()).unwrap(), &[]),
            "[empty message]"
        );
        assert_eq!(ext_of(Some("report.PDF"), ""), ".pdf");
        assert_eq!(ext_of(Some("noext"), ".bin"), ".bin");
    }
}

//! Pure translation of a Slack event (`message` or `app_mention`) into what the fleet needs,
//! as upstream: which events count, the sender, the session key (one per thread), whether the
//! bot is mentioned, the text without the mention, and the attached files.

use serde_json::Value;

/// An attached file to download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRef {
    /// Slack's file id.
    pub id: String,
    /// The file's name (or title, or id).
    pub name: String,
    /// An image (`[image: …]`) rather than a file (`[file: …]`).
    pub is_image: bool,
    /// `url_private_download` (or `url_private`), fetched with the bot token.
    pub url: String,
    /// Size in bytes as Slack announces it; 0 when unknown.
    pub size: u64,
}

/// An event as the channel sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The sender's user id (`U…`).
    pub sender_id: String,
    /// The conversation id (`D…` for DMs, `C…`/`G…` for channels).
    pub chat_id: String,
    /// A direct message (`channel_type: im`).
    pub is_dm: bool,
    /// The message's `ts` (its id in the conversation).
    pub ts: String,
    /// The thread the reply goes to: the message's thread, or (channels with `replyInThread`)
    /// a new thread under the message.
    pub thread_ts: Option<String>,
    /// `slack:{chat}` or `slack:{chat}:{thread_ts}`, as upstream.
    pub session_key: String,
    /// The text, the bot's mention removed and Slack's `&amp;`/`&lt;`/`&gt;` decoded.
    pub text: String,
    /// An `app_mention`, or the text mentions the bot.
    pub mentioned: bool,
    /// Attached files.
    pub files: Vec<FileRef>,
}

/// Returns the inbound id of a message: one per Slack message, so its `message` and
/// `app_mention` events, and any redelivery, are one inbound message.
pub fn inbound_id(chat_id: &str, ts: &str) -> String {
    format!("slack:{chat_id}:{ts}")
}

/// Returns the `ts` of the message an inbound id (from [`inbound_id`]) names.
pub fn ts_of(inbound_id: &str) -> Option<&str> {
    let (_, ts) = inbound_id.strip_prefix("slack:")?.split_once(':')?;
    Some(ts)
}

/// Returns the session key of a conversation (and thread).
pub fn session_key(chat_id: &str, thread_ts: Option<&str>) -> String {
    match thread_ts {
        Some(ts) => format!("slack:{chat_id}:{ts}"),
        None => format!("slack:{chat_id}"),
    }
}

/// Returns the thread of a session key made by [`session_key`] for conversation `chat_id`.
pub fn thread_of<'a>(session_key: &'a str, chat_id: &str) -> Option<&'a str> {
    let rest = session_key.strip_prefix("slack:")?;
    let (chat, ts) = rest.split_once(':')?;
    (chat == chat_id && !ts.is_empty()).then_some(ts)
}

/// Parses `event` for the bot whose user id is `me`; `None` for events the bot ignores (other
/// types, edits and deletions, the bot's own messages, the `message` twin of an
/// `app_mention`).
pub fn parse(event: &Value, me: &str, reply_in_thread: bool) -> Option<Parsed> {
    let kind = event["type"].as_str()?;
    if kind != "message" && kind != "app_mention" {
        return None;
    }
    if event["subtype"].as_str().is_some_and(|s| s != "file_share") {
        return None;
    }
    let sender = event["user"].as_str().filter(|s| !s.is_empty())?;
    let chat = event["channel"].as_str().filter(|s| !s.is_empty())?;
    let ts = event["ts"].as_str().filter(|s| !s.is_empty())?;
    if sender == me {
        return None;
    }
    let is_dm = match event["channel_type"].as_str() {
        Some(t) => t == "im",
        None => chat.starts_with('D'),
    };
    let raw = event["text"].as_str().unwrap_or_default();
    let mention = format!("<@{me}>");
    let mentioned = kind == "app_mention" || raw.contains(&mention);
    // Slack sends both a `message` and an `app_mention` for a mention in a channel: the
    // `app_mention` is the one kept (DMs get no `app_mention`).
    if kind == "message" && !is_dm && raw.contains(&mention) {
        return None;
    }
    let mut thread_ts = event["thread_ts"].as_str().map(str::to_string);
    if thread_ts.is_none() && reply_in_thread && !is_dm {
        thread_ts = Some(ts.to_string());
    }
    let text = strip_mention(raw, &mention);
    Some(Parsed {
        sender_id: sender.to_string(),
        chat_id: chat.to_string(),
        is_dm,
        ts: ts.to_string(),
        session_key: session_key(chat, thread_ts.as_deref()),
        thread_ts,
        text: unescape(&text),
        mentioned,
        files: files_of(event),
    })
}

fn strip_mention(text: &str, mention: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(mention) {
        out.push_str(&rest[..at]);
        rest = rest[at + mention.len()..].trim_start();
    }
    out.push_str(rest);
    out.trim().to_string()
}

/// Decodes Slack's three escapes (`&lt;`, `&gt;`, `&amp;`), as a user typed them.
fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn files_of(event: &Value) -> Vec<FileRef> {
    let Some(files) = event["files"].as_array() else {
        return Vec::new();
    };
    files
        .iter()
        .map(|f| {
            let id = f["id"].as_str().unwrap_or("file").to_string();
            let name = ["name", "title", "id"]
                .iter()
                .find_map(|k| f[*k].as_str().filter(|s| !s.is_empty()))
                .unwrap_or("slack-file")
                .to_string();
            let url = f["url_private_download"]
                .as_str()
                .or(f["url_private"].as_str())
                .unwrap_or_default()
                .to_string();
            let is_image = f["mimetype"]
                .as_str()
                .is_some_and(|m| m.starts_with("image/"));
            FileRef {
                id,
                name,
                is_image,
                url,
                size: f["size"].as_u64().unwrap_or(0),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const ME: &str = "UBOT";

    #[test]
    fn dms_keep_one_session_and_channel_messages_open_a_thread_session() {
        let dm = json!({"type": "message", "channel_type": "im", "user": "U1",
            "channel": "D1", "ts": "1.1", "text": "a &lt; b &amp;&amp; c"});
        let p = parse(&dm, ME, true).unwrap();
        assert!(p.is_dm && p.thread_ts.is_none());
        assert_eq!(p.session_key, "slack:D1");
        assert_eq!(p.text, "a < b && c");
        let mention = json!({"type": "app_mention", "user": "U1", "channel": "C1",
            "ts": "2.5", "text": "<@UBOT> hello <@U2>"});
        let p = parse(&mention, ME, true).unwrap();
        assert!(!p.is_dm && p.mentioned);
        assert_eq!(p.text, "hello <@U2>");
        assert_eq!(p.session_key, "slack:C1:2.5");
        assert_eq!(thread_of(&p.session_key, "C1"), Some("2.5"));
        assert_eq!(thread_of(&p.session_key, "C2"), None);
        assert_eq!(thread_of("slack:D1", "D1"), None);
        let in_thread = json!({"type": "app_mention", "user": "U1", "channel": "C1",
            "ts": "3.0", "thread_ts": "2.5", "text": "<@UBOT> more"});
        assert_eq!(
            parse(&in_thread, ME, false).unwrap().session_key,
            "slack:C1:2.5"
        );
        let flat = json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": "4.0"});
        assert_eq!(parse(&flat, ME, false).unwrap().session_key, "slack:C1");
        assert_eq!(ts_of(&inbound_id("C1", "4.0")), Some("4.0"));
    }

    #[test]
    fn edits_own_messages_and_the_message_twin_of_a_mention_are_ignored() {
        let edit = json!({"type": "message", "subtype": "message_changed", "channel": "C1",
            "user": "U1", "ts": "1"});
        assert!(parse(&edit, ME, true).is_none());
        let own = json!({"type": "message", "user": "UBOT", "channel": "D1", "ts": "1",
            "channel_type": "im"});
        assert!(parse(&own, ME, true).is_none());
        let twin = json!({"type": "message", "channel_type": "channel", "user": "U1",
            "channel": "C1", "ts": "1", "text": "<@UBOT> hi"});
        assert!(parse(&twin, ME, true).is_none());
        let plain = json!({"type": "message", "channel_type": "channel", "user": "U1",
            "channel": "C1", "ts": "1", "text": "hi all"});
        assert!(!parse(&plain, ME, true).unwrap().mentioned);
        let dm_mention = json!({"type": "message", "channel_type": "im", "user": "U1",
            "channel": "D1", "ts": "1", "text": "<@UBOT> hi"});
        assert_eq!(parse(&dm_mention, ME, true).unwrap().text, "hi");
        let reaction = json!({"type": "reaction_added", "user": "U1"});
        assert!(parse(&reaction, ME, true).is_none());
    }

    #[test]
    fn shared_files_are_listed_with_their_download_urls() {
        let shared = json!({"type": "message", "subtype": "file_share", "channel_type": "im",
            "user": "U1", "channel": "D1", "ts": "1", "text": "look", "files": [
                {"id": "F1", "name": "cat.png", "mimetype": "image/png",
                 "url_private_download": "https://files.slack.com/F1/cat.png"},
                {"id": "F2", "title": "notes", "url_private": "https://files.slack.com/F2"}]});
        let p = parse(&shared, ME, true).unwrap();
        assert_eq!(p.files.len(), 2);
        assert!(p.files[0].is_image && p.files[0].name == "cat.png");
        assert_eq!(p.files[1].url, "https://files.slack.com/F2");
        assert!(!p.files[1].is_image && p.files[1].name == "notes");
    }
}

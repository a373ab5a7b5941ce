//! The Bot API methods the fake answers synchronously (everything but `getUpdates`), with
//! Telegram's validation and error texts.

use serde_json::{Map, Value, json};

use super::state::{BotState, StoredMessage, Webhook, unix_now};
use super::{ApiError, Upload, html};

/// Telegram's limit on a message text, counted after entity parsing.
pub(super) const MAX_TEXT: usize = 4096;
/// Telegram's limit on a media caption.
const MAX_CAPTION: usize = 1024;
const CHAT_ACTIONS: &[&str] = &[
    "typing",
    "upload_photo",
    "record_video",
    "upload_video",
    "record_voice",
    "upload_voice",
    "upload_document",
    "choose_sticker",
    "find_location",
    "record_video_note",
    "upload_video_note",
];

/// The parameters of one call, whatever encoding they came in.
#[derive(Debug, Clone, Default)]
pub(super) struct Params(pub(super) Map<String, Value>);

impl Params {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    fn str(&self, key: &str) -> Option<String> {
        match self.get(key)? {
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }

    pub(super) fn i64(&self, key: &str) -> Option<i64> {
        match self.get(key)? {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    fn bool(&self, key: &str) -> bool {
        match self.get(key) {
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) => s == "true",
            _ => false,
        }
    }

    pub(super) fn strings(&self, key: &str) -> Option<Vec<String>> {
        let list = self.get(key)?.as_array()?;
        Some(
            list.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
        )
    }

    fn chat_id(&self) -> Result<i64, ApiError> {
        match self.get("chat_id") {
            None => Err(ApiError::bad_request("chat_id is empty")),
            Some(_) => self
                .i64("chat_id")
                .ok_or_else(|| ApiError::bad_request("chat not found")),
        }
    }
}

/// Answers `method` for `bot`, or `None` when the fake does not know the method.
pub(super) fn call(
    bot: &mut BotState,
    method: &str,
    params: &Params,
    uploads: &[Upload],
) -> Option<Result<Value, ApiError>> {
    let result = match method.to_ascii_lowercase().as_str() {
        "getme" => Ok(bot.me_json()),
        "sendmessage" => send_message(bot, params),
        "editmessagetext" => edit_message_text(bot, params),
        "deletemessage" => delete_message(bot, params),
        "sendchataction" => send_chat_action(params),
        "setmessagereaction" => set_message_reaction(bot, params),
        "setmycommands" => set_my_commands(bot, params),
        "getmycommands" => Ok(bot.commands.clone()),
        "deletemycommands" => {
            bot.commands = json!([]);
            Ok(json!(true))
        }
        "setwebhook" => set_webhook(bot, params),
        "deletewebhook" => {
            bot.webhook = None;
            if params.bool("drop_pending_updates") {
                bot.confirm(i64::MAX);
            }
            Ok(json!(true))
        }
        "getwebhookinfo" => Ok(json!({
            "url": bot.webhook.as_ref().map(|w| w.url.clone()).unwrap_or_default(),
            "has_custom_certificate": false,
            "pending_update_count": bot.pending_updates(),
        })),
        "getfile" => get_file(bot, params),
        "sendphoto" => send_media(bot, params, uploads, "photo"),
        "senddocument" => send_media(bot, params, uploads, "document"),
        "sendvoice" => send_media(bot, params, uploads, "voice"),
        "sendaudio" => send_media(bot, params, uploads, "audio"),
        "sendvideo" => send_media(bot, params, uploads, "video"),
        _ => return None,
    };
    Some(result)
}

/// Parses `text` under `parse_mode` and returns the plain text Telegram stores.
fn parse_text(text: &str, parse_mode: Option<&str>) -> Result<String, ApiError> {
    match parse_mode.map(str::to_ascii_lowercase).as_deref() {
        None | Some("") => Ok(text.to_string()),
        Some("html") => html::parse(text)
            .map_err(|e| ApiError::bad_request(&format!("can't parse entities: {e}"))),
        // MarkdownV2 and Markdown are passed through unchecked.
        Some("markdownv2" | "markdown") => Ok(text.to_string()),
        Some(_) => Err(ApiError::bad_request("unsupported parse_mode")),
    }
}

fn send_message(bot: &mut BotState, params: &Params) -> Result<Value, ApiError> {
    let chat_id = params.chat_id()?;
    let text = params.str("text").unwrap_or_default();
    let parse_mode = params.str("parse_mode");
    let plain = parse_text(&text, parse_mode.as_deref())?;
    if plain.trim().is_empty() {
        return Err(ApiError::bad_request("message text is empty"));
    }
    if html::telegram_len(&plain) > MAX_TEXT {
        return Err(ApiError::bad_request("message is too long"));
    }
    let mut fields = Map::new();
    fields.insert("text".into(), json!(plain));
    store_bot_message(bot, chat_id, params, fields, Some(text), parse_mode)
}

/// Stores a message the bot sends to `chat_id` and returns its `Message` JSON.
fn store_bot_message(
    bot: &mut BotState,
    chat_id: i64,
    params: &Params,
    fields: Map<String, Value>,
    raw: Option<String>,
    parse_mode: Option<String>,
) -> Result<Value, ApiError> {
    let from = bot.user_json();
    let chat = bot.chat_by_id(chat_id);
    let mut json = json!({"message_id": 0, "from": from, "chat": chat.chat.to_json(),
        "date": unix_now()});
    for (k, v) in fields {
        json[k] = v;
    }
    if let Some(thread) = params.i64("message_thread_id") {
        json["message_thread_id"] = json!(thread);
    }
    let reply_to = params
        .get("reply_parameters")
        .and_then(|r| r.get("message_id"))
        .and_then(Value::as_i64)
        .or_else(|| params.i64("reply_to_message_id"));
    if let Some(reply_to) = reply_to {
        match chat.reply_json(reply_to) {
            Some(original) => json["reply_to_message"] = original,
            None => {
                let lenient = params.bool("allow_sending_without_reply")
                    || params
                        .get("reply_parameters")
                        .and_then(|r| r.get("allow_sending_without_reply"))
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                if !lenient {
                    return Err(ApiError::bad_request("message to be replied not found"));
                }
            }
        }
    }
    let id = chat.store(StoredMessage {
        json,
        from_bot: true,
        raw,
        parse_mode,
        edits: 0,
        reactions: Vec::new(),
    });
    Ok(chat.messages[&id].json.clone())
}

fn edit_message_text(bot: &mut BotState, params: &Params) -> Result<Value, ApiError> {
    if params.get("inline_message_id").is_some() {
        return Err(ApiError::bad_request(
            "inline messages are not supported by the fake",
        ));
    }
    let chat_id = params.chat_id()?;
    let message_id = params
        .i64("message_id")
        .ok_or_else(|| ApiError::bad_request("message identifier is not specified"))?;
    let text = params.str("text").unwrap_or_default();
    let parse_mode = params.str("parse_mode");
    let plain = parse_text(&text, parse_mode.as_deref())?;
    if plain.trim().is_empty() {
        return Err(ApiError::bad_request("message text is empty"));
    }
    if html::telegram_len(&plain) > MAX_TEXT {
        return Err(ApiError::bad_request("MESSAGE_TOO_LONG"));
    }
    let chat = bot.chat_by_id(chat_id);
    let Some(message) = chat.messages.get_mut(&message_id) else {
        return Err(ApiError::bad_request("message to edit not found"));
    };
    if !message.from_bot || message.json.get("text").is_none() {
        return Err(ApiError::bad_request("message can't be edited"));
    }
    let same_text = message.json["text"] == json!(plain);
    let same_source = message.raw.as_deref() == Some(text.as_str())
        || (message.parse_mode.is_none() && parse_mode.is_none());
    let same_markup = message.json.get("reply_markup") == params.get("reply_markup");
    if same_text && same_source && same_markup {
        return Err(ApiError::bad_request(
            "message is not modified: specified new message content and reply markup are \
             exactly the same as a current content and reply markup of the message",
        ));
    }
    message.json["text"] = json!(plain);
    message.json["edit_date"] = json!(unix_now());
    message.raw = Some(text);
    message.parse_mode = parse_mode;
    message.edits += 1;
    Ok(message.json.clone())
}

fn delete_message(bot: &mut BotState, params: &Params) -> Result<Value, ApiError> {
    let chat_id = params.chat_id()?;
    let message_id = params.i64("message_id").unwrap_or_default();
    let chat = bot.chat_by_id(chat_id);
    match chat.messages.remove(&message_id) {
        Some(_) => Ok(json!(true)),
        None => Err(ApiError::bad_request("message to delete not found")),
    }
}

fn send_chat_action(params: &Params) -> Result<Value, ApiError> {
    params.chat_id()?;
    let action = params.str("action").unwrap_or_default();
    if !CHAT_ACTIONS.contains(&action.as_str()) {
        return Err(ApiError::bad_request("wrong parameter action in request"));
    }
    Ok(json!(true))
}

fn set_message_reaction(bot: &mut BotState, params: &Params) -> Result<Value, ApiError> {
    let chat_id = params.chat_id()?;
    let message_id = params.i64("message_id").unwrap_or_default();
    let reactions: Vec<String> = params
        .get("reaction")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("emoji").and_then(Value::as_str).map(str::to_string))
        .collect();
    let chat = bot.chat_by_id(chat_id);
    let Some(message) = chat.messages.get_mut(&message_id) else {
        return Err(ApiError::bad_request("message to react not found"));
    };
    message.reactions = reactions;
    Ok(json!(true))
}

fn set_my_commands(bot: &mut BotState, params: &Params) -> Result<Value, ApiError> {
    let commands = params.get("commands").cloned().unwrap_or(json!([]));
    let Some(list) = commands.as_array() else {
        return Err(ApiError::bad_request("can't parse commands JSON object"));
    };
    for command in list {
        let name = command.get("command").and_then(Value::as_str).unwrap_or("");
        let valid_name = (1..=32).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid_name {
            return Err(ApiError::bad_request("BOT_COMMAND_INVALID"));
        }
        let description = command
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("");
        if description.is_empty() || description.chars().count() > 256 {
            return Err(ApiError::bad_request("BOT_COMMAND_DESCRIPTION_INVALID"));
        }
    }
    bot.commands = commands;
    Ok(json!(true))
}

fn set_webhook(bot: &mut BotState, params: &Params) -> Result<Value, ApiError> {
    let url = params.str("url").unwrap_or_default();
    if url.is_empty() {
        bot.webhook = None;
        return Ok(json!(true));
    }
    let secret_token = params.str("secret_token");
    if let Some(secret) = &secret_token {
        let valid = (1..=256).contains(&secret.len())
            && secret
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(ApiError::bad_request(
                "bad webhook: secret token contains unallowed characters",
            ));
        }
    }
    if params.bool("drop_pending_updates") {
        bot.confirm(i64::MAX);
    }
    bot.webhook = Some(Webhook { url, secret_token });
    Ok(json!(true))
}

fn get_file(bot: &mut BotState, params: &Params) -> Result<Value, ApiError> {
    let file_id = params.str("file_id").unwrap_or_default();
    let Some(file) = bot.files.get(&file_id) else {
        return Err(ApiError::bad_request("invalid file id"));
    };
    let meta = &file.meta;
    Ok(
        json!({"file_id": meta.file_id, "file_unique_id": meta.file_unique_id,
        "file_size": meta.size, "file_path": meta.file_path}),
    )
}

/// `sendPhoto`, `sendDocument`, `sendVoice`, `sendAudio`, `sendVideo`: the file is an upload
/// (multipart), a known `file_id`, or a URL.
fn send_media(
    bot: &mut BotState,
    params: &Params,
    uploads: &[Upload],
    field: &str,
) -> Result<Value, ApiError> {
    let chat_id = params.chat_id()?;
    let file = match uploads.iter().find(|u| u.field == field) {
        Some(upload) => {
            let name = upload
                .file_name
                .clone()
                .unwrap_or_else(|| format!("{field}.bin"));
            let mime = upload
                .content_type
                .clone()
                .unwrap_or_else(|| "application/octet-stream".to_string());
            bot.add_file(upload.bytes.clone(), &name, &mime)
        }
        None => {
            let reference = params.str(field).unwrap_or_default();
            let attached = reference.strip_prefix("attach://").unwrap_or(&reference);
            if let Some(known) = bot.files.get(attached) {
                known.meta.clone()
            } else if reference.starts_with("http://") || reference.starts_with("https://") {
                bot.add_file(bytes::Bytes::new(), &reference, "application/octet-stream")
            } else {
                return Err(ApiError::bad_request(&format!(
                    "there is no {field} in the request"
                )));
            }
        }
    };
    let mut fields = Map::new();
    let meta = json!({"file_id": file.file_id, "file_unique_id": file.file_unique_id,
        "file_size": file.size});
    let media = match field {
        "photo" => json!([{"file_id": file.file_id, "file_unique_id": file.file_unique_id,
            "file_size": file.size, "width": 1280, "height": 960}]),
        "document" => with(
            meta,
            json!({"file_name": file.name, "mime_type": file.mime}),
        ),
        "video" => with(meta, json!({"width": 640, "height": 480, "duration": 1})),
        _ => with(meta, json!({"duration": 1, "mime_type": file.mime})),
    };
    fields.insert(field.to_string(), media);
    let caption = params.str("caption");
    let parse_mode = params.str("parse_mode");
    if let Some(caption) = &caption {
        let plain = parse_text(caption, parse_mode.as_deref())?;
        if html::telegram_len(&plain) > MAX_CAPTION {
            return Err(ApiError::bad_request("message caption is too long"));
        }
        fields.insert("caption".into(), json!(plain));
    }
    store_bot_message(bot, chat_id, params, fields, caption, parse_mode)
}

fn with(mut base: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().into_iter().flatten() {
        base[k] = v.clone();
    }
    base
}

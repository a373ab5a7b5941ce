//! The fake's state: per bot its update queue, poll bookkeeping, chats with their messages,
//! files, scripted failures and webhook; plus the shared log of every call.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot, watch};

use super::updates::{FileRef, TgChat};
use super::{ApiError, Call, Failure};

/// Update types Telegram sends when `allowed_updates` was never set (or set to `[]`).
const DEFAULT_EXCLUDED: &[&str] = &["chat_member", "message_reaction", "message_reaction_count"];

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) bots: Mutex<HashMap<String, BotState>>,
    pub(super) calls: Mutex<Vec<Call>>,
    /// Bumped on every recorded call and every poll start, for the `wait_*` helpers.
    pub(super) changed: watch::Sender<u64>,
    pub(super) http: reqwest::Client,
    /// `getUpdates` answers go out 1 to 3 bytes per write ([`crate::drip`]).
    pub(super) drip: std::sync::atomic::AtomicBool,
}

impl Shared {
    pub(super) fn new() -> Self {
        Self {
            bots: Mutex::new(HashMap::new()),
            calls: Mutex::new(Vec::new()),
            changed: watch::channel(0).0,
            http: reqwest::Client::new(),
            drip: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub(super) fn bots(&self) -> MutexGuard<'_, HashMap<String, BotState>> {
        self.bots.lock().expect("telegram fake state poisoned")
    }

    /// Runs `f` on the bot with `token`; panics for an unknown token (a test bug).
    pub(super) fn with_bot<T>(&self, token: &str, f: impl FnOnce(&mut BotState) -> T) -> T {
        let mut bots = self.bots();
        let bot = bots
            .get_mut(token)
            .unwrap_or_else(|| panic!("telegram fake: no bot with token {token}"));
        f(bot)
    }

    pub(super) fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    pub(super) fn record(&self, call: Call) {
        self.calls.lock().expect("call log poisoned").push(call);
        self.bump();
    }
}

/// One message of a chat, as the fake stores it.
#[derive(Debug, Clone)]
pub(super) struct StoredMessage {
    pub(super) json: Value,
    pub(super) from_bot: bool,
    /// The text or caption exactly as the bot sent it (HTML source when `parse_mode` is set).
    pub(super) raw: Option<String>,
    pub(super) parse_mode: Option<String>,
    pub(super) edits: u32,
    pub(super) reactions: Vec<String>,
}

#[derive(Debug)]
pub(super) struct ChatState {
    pub(super) chat: TgChat,
    next_message_id: i64,
    pub(super) messages: BTreeMap<i64, StoredMessage>,
}

#[derive(Debug, Clone)]
pub(super) struct StoredFile {
    pub(super) meta: FileRef,
    pub(super) bytes: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Webhook {
    pub(super) url: String,
    pub(super) secret_token: Option<String>,
}

#[derive(Debug)]
pub(super) struct BotState {
    pub(super) id: i64,
    pub(super) username: String,
    pub(super) first_name: String,
    updates: VecDeque<Value>,
    next_update_id: i64,
    allowed_updates: Option<Vec<String>>,
    pub(super) update_notify: Arc<Notify>,
    active_poll: Option<(u64, oneshot::Sender<()>)>,
    next_poll: u64,
    pub(super) polls_in_flight: usize,
    pub(super) peak_polls: usize,
    pub(super) conflicts: usize,
    pub(super) webhook_deliveries: usize,
    pub(super) chats: HashMap<i64, ChatState>,
    pub(super) files: HashMap<String, StoredFile>,
    next_file: u64,
    failures: HashMap<String, VecDeque<Option<Failure>>>,
    pub(super) webhook: Option<Webhook>,
    pub(super) commands: Value,
}

impl BotState {
    pub(super) fn new(id: i64, username: &str) -> Self {
        Self {
            id,
            username: username.to_string(),
            first_name: "nanobot".to_string(),
            updates: VecDeque::new(),
            next_update_id: 100_000 + id.rem_euclid(1000) * 1000,
            allowed_updates: None,
            update_notify: Arc::new(Notify::new()),
            active_poll: None,
            next_poll: 0,
            polls_in_flight: 0,
            peak_polls: 0,
            conflicts: 0,
            webhook_deliveries: 0,
            chats: HashMap::new(),
            files: HashMap::new(),
            next_file: 0,
            failures: HashMap::new(),
            webhook: None,
            commands: json!([]),
        }
    }

    /// Returns the `User` object of the bot itself.
    pub(super) fn user_json(&self) -> Value {
        json!({"id": self.id, "is_bot": true, "first_name": self.first_name,
            "username": self.username})
    }

    /// Returns the `getMe` answer: the full field set teloxide 0.17's `Me` requires.
    pub(super) fn me_json(&self) -> Value {
        let mut me = self.user_json();
        let extra = json!({"can_join_groups": true, "can_read_all_group_messages": false,
            "supports_inline_queries": false, "can_connect_to_business": false,
            "has_main_web_app": false});
        for (k, v) in extra.as_object().expect("object literal") {
            me[k] = v.clone();
        }
        me
    }

    // === updates ===

    /// Queues an update with payload `payload` under `kind` (`message`, `edited_message`, …)
    /// and returns its `update_id`.
    pub(super) fn push_update(&mut self, kind: &str, payload: Value) -> (i64, Value) {
        let update_id = self.next_update_id;
        self.next_update_id += 1;
        let update = json!({"update_id": update_id, kind: payload});
        self.updates.push_back(update.clone());
        self.update_notify.notify_waiters();
        (update_id, update)
    }

    pub(super) fn pending_updates(&self) -> usize {
        self.updates.len()
    }

    /// Returns the queued updates with their ids.
    pub(super) fn queued(&self) -> Vec<(i64, Value)> {
        let mut queued = Vec::new();
        for update in &self.updates {
            let id = update["update_id"].as_i64().unwrap_or_default();
            queued.push((id, update.clone()));
        }
        queued
    }

    /// Forgets updates the client confirmed: ids below a positive `offset`, or all but the
    /// last `-offset` for a negative one.
    pub(super) fn confirm(&mut self, offset: i64) {
        if offset > 0 {
            self.updates
                .retain(|u| u["update_id"].as_i64().is_some_and(|id| id >= offset));
        } else if offset < 0 {
            let keep = offset.unsigned_abs() as usize;
            while self.updates.len() > keep {
                self.updates.pop_front();
            }
        }
    }

    pub(super) fn confirm_one(&mut self, update_id: i64) {
        self.updates
            .retain(|u| u["update_id"].as_i64() != Some(update_id));
    }

    pub(super) fn set_allowed_updates(&mut self, allowed: Vec<String>) {
        self.allowed_updates = (!allowed.is_empty()).then_some(allowed);
    }

    /// Returns up to `limit` queued updates of allowed types; updates of other types are
    /// dropped, as Telegram never delivers them.
    pub(super) fn ready_updates(&mut self, limit: usize) -> Vec<Value> {
        let allowed = self.allowed_updates.clone();
        self.updates.retain(|u| {
            let kind = update_kind(u);
            match &allowed {
                Some(list) => list.iter().any(|k| k == kind),
                None => !DEFAULT_EXCLUDED.contains(&kind),
            }
        });
        self.updates.iter().take(limit).cloned().collect()
    }

    /// Registers a new poll, terminating the one in flight (it answers 409). Returns the poll
    /// id and the signal that a later poll terminated this one.
    pub(super) fn start_poll(&mut self) -> (u64, oneshot::Receiver<()>) {
        if let Some((_, terminate)) = self.active_poll.take() {
            let _ = terminate.send(());
        }
        self.next_poll += 1;
        let (tx, rx) = oneshot::channel();
        self.active_poll = Some((self.next_poll, tx));
        self.polls_in_flight += 1;
        self.peak_polls = self.peak_polls.max(self.polls_in_flight);
        (self.next_poll, rx)
    }

    pub(super) fn end_poll(&mut self, id: u64) {
        self.polls_in_flight -= 1;
        if self
            .active_poll
            .as_ref()
            .is_some_and(|(active, _)| *active == id)
        {
            self.active_poll = None;
        }
    }

    // === failures ===

    pub(super) fn fail_next(&mut self, method: &str, times: usize, failure: Failure) {
        self.fail_after(method, 0, times, failure);
    }

    /// Serves the next `pass` calls of `method`, then fails `times` calls with `failure`.
    pub(super) fn fail_after(&mut self, method: &str, pass: usize, times: usize, failure: Failure) {
        // Methods are matched as Telegram does: case-insensitively (teloxide sends `SendMessage`).
        let queue = self
            .failures
            .entry(method.to_ascii_lowercase())
            .or_default();
        queue.extend(std::iter::repeat_n(None, pass));
        queue.extend(std::iter::repeat_n(Some(failure), times));
    }

    /// Returns the scripted error for this call of `method`, if one is queued.
    pub(super) fn take_failure(&mut self, method: &str) -> Option<ApiError> {
        let failure = self
            .failures
            .get_mut(&method.to_ascii_lowercase())?
            .pop_front()??;
        Some(failure.into_error())
    }

    // === chats and files ===

    pub(super) fn chat(&mut self, chat: &TgChat) -> &mut ChatState {
        let state = self.chats.entry(chat.id).or_insert_with(|| ChatState {
            chat: chat.clone(),
            next_message_id: 1,
            messages: BTreeMap::new(),
        });
        // A chat introduced by a user's message replaces the guessed one.
        if state.chat != *chat && state.chat == TgChat::unknown(chat.id) {
            state.chat = chat.clone();
        }
        state
    }

    pub(super) fn chat_by_id(&mut self, id: i64) -> &mut ChatState {
        let known = self.chats.get(&id).map(|c| c.chat.clone());
        let chat = known.unwrap_or_else(|| TgChat::unknown(id));
        self.chat(&chat)
    }

    pub(super) fn add_file(&mut self, bytes: Bytes, name: &str, mime: &str) -> FileRef {
        self.next_file += 1;
        let n = self.next_file;
        let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("bin");
        let folder = match mime.split('/').next() {
            Some("image") => "photos",
            Some("audio") => "voice",
            _ => "documents",
        };
        let meta = FileRef {
            file_id: format!("F{}x{n:06}", self.id),
            file_unique_id: format!("U{}x{n:06}", self.id),
            file_path: format!("{folder}/file_{n}.{ext}"),
            size: bytes.len(),
            name: name.to_string(),
            mime: mime.to_string(),
        };
        self.files.insert(
            meta.file_id.clone(),
            StoredFile {
                meta: meta.clone(),
                bytes,
            },
        );
        meta
    }

    pub(super) fn file_by_path(&self, path: &str) -> Option<&StoredFile> {
        self.files.values().find(|f| f.meta.file_path == path)
    }
}

impl ChatState {
    /// Stores `json` (which gets the next message id of this chat) and returns the id.
    pub(super) fn store(&mut self, mut stored: StoredMessage) -> i64 {
        let id = self.next_message_id;
        self.next_message_id += 1;
        stored.json["message_id"] = json!(id);
        self.messages.insert(id, stored);
        id
    }

    /// Returns message `id` as `reply_to_message` embeds it (without its own reply).
    pub(super) fn reply_json(&self, id: i64) -> Option<Value> {
        let mut json = self.messages.get(&id)?.json.clone();
        if let Some(obj) = json.as_object_mut() {
            obj.remove("reply_to_message");
        }
        Some(json)
    }
}

/// Returns the type of an update: its one key besides `update_id`.
pub(super) fn update_kind(update: &Value) -> &str {
    let keys = update.as_object().into_iter().flat_map(|o| o.keys());
    for key in keys {
        if key != "update_id" {
            return key;
        }
    }
    ""
}

pub(super) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

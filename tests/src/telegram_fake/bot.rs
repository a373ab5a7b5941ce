//! [`FakeBot`]: one bot of the fake: what its users do, scripted failures, what it did.

use bytes::Bytes;
use serde_json::{Value, json};

use super::state::{BotState, StoredMessage, unix_now};
use super::updates::{FileRef, Incoming};
use super::{Call, ChatMessage, DEFAULT_WAIT, Failure, PollStats, TelegramFake, poll};

/// The handle of one bot of the fake.
#[derive(Debug, Clone)]
pub struct FakeBot {
    pub(super) fake: TelegramFake,
    pub(super) token: String,
}

impl FakeBot {
    /// Returns the bot's token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Returns the bot's user id.
    pub fn id(&self) -> i64 {
        self.with(|b| b.id)
    }

    /// Returns the bot's username (without `@`).
    pub fn username(&self) -> String {
        self.with(|b| b.username.clone())
    }

    fn with<T>(&self, f: impl FnOnce(&mut BotState) -> T) -> T {
        self.fake.shared.with_bot(&self.token, f)
    }

    // === injecting what users do ===

    /// Queues a user's message as a `message` update; returns its `update_id`.
    pub fn inject(&self, message: Incoming) -> i64 {
        self.inject_as("message", message)
    }

    /// Queues the messages as one album (a shared `media_group_id`), one update each.
    pub fn inject_media_group(&self, messages: Vec<Incoming>) -> Vec<i64> {
        let group = (uuid::Uuid::new_v4().as_u128() % 10u128.pow(18)).to_string();
        let mut ids = Vec::new();
        for message in messages {
            ids.push(self.inject(message.field("media_group_id", json!(group))));
        }
        ids
    }

    /// Queues an `edited_message` update: message `message_id` of `chat_id` now reads `text`.
    /// Panics if the fake never saw that message.
    pub fn inject_edit(&self, chat_id: i64, message_id: i64, text: &str) -> i64 {
        let (update_id, update) = self.with(|bot| {
            let chat = bot.chat_by_id(chat_id);
            let stored = chat
                .messages
                .get_mut(&message_id)
                .unwrap_or_else(|| panic!("telegram fake: no message {message_id} in {chat_id}"));
            stored.json["text"] = json!(text);
            stored.json["edit_date"] = json!(unix_now());
            let payload = stored.json.clone();
            bot.push_update("edited_message", payload)
        });
        poll::deliver(&self.fake.shared, &self.token, update_id, update);
        update_id
    }

    /// Queues any update (`kind` such as `callback_query`, with its raw payload).
    pub fn inject_update(&self, kind: &str, payload: Value) -> i64 {
        let (update_id, update) = self.with(|bot| bot.push_update(kind, payload));
        poll::deliver(&self.fake.shared, &self.token, update_id, update);
        update_id
    }

    fn inject_as(&self, kind: &str, message: Incoming) -> i64 {
        let (update_id, update) = self.with(|bot| {
            let chat = bot.chat(&message.chat);
            let mut json = json!({"message_id": 0, "from": message.from.to_json(),
                "chat": message.chat.to_json(), "date": unix_now()});
            for (k, v) in message.fields {
                json[k] = v;
            }
            if let Some(reply_to) = message.reply_to {
                let original = chat
                    .reply_json(reply_to)
                    .unwrap_or_else(|| panic!("telegram fake: no message {reply_to} to reply to"));
                json["reply_to_message"] = original;
            }
            let id = chat.store(StoredMessage {
                json,
                from_bot: false,
                raw: None,
                parse_mode: None,
                edits: 0,
                reactions: Vec::new(),
            });
            let payload = chat.messages[&id].json.clone();
            bot.push_update(kind, payload)
        });
        self.fake.shared.bump();
        poll::deliver(&self.fake.shared, &self.token, update_id, update);
        update_id
    }

    /// Stores a file users can send (see [`Incoming::photo`] and friends) and the bot can
    /// fetch with `getFile` and download.
    pub fn add_file(&self, bytes: impl Into<Bytes>, name: &str, mime: &str) -> FileRef {
        let bytes = bytes.into();
        self.with(|bot| bot.add_file(bytes, name, mime))
    }

    /// Returns the bytes of a file the fake stores (uploaded by the bot or added by a test).
    pub fn file_bytes(&self, file_id: &str) -> Option<Bytes> {
        self.with(|bot| bot.files.get(file_id).map(|f| f.bytes.clone()))
    }

    // === scripted failures ===

    /// Makes the next `times` calls of `method` (as spelled in the URL, e.g. `sendMessage`)
    /// answer with `failure` instead of being served.
    pub fn fail_next(&self, method: &str, times: usize, failure: Failure) {
        self.with(|bot| bot.fail_next(method, times, failure));
    }

    /// Serves the next `pass` calls of `method`, then answers `times` calls with `failure`.
    pub fn fail_after(&self, method: &str, pass: usize, times: usize, failure: Failure) {
        self.with(|bot| bot.fail_after(method, pass, times, failure));
    }

    // === inspection ===

    /// Returns this bot's calls so far.
    pub fn calls(&self) -> Vec<Call> {
        let mut calls = self.fake.calls();
        calls.retain(|c| c.token == self.token);
        calls
    }

    /// Returns this bot's calls of `method` so far.
    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        let mut calls = self.calls();
        calls.retain(|c| c.method.eq_ignore_ascii_case(method));
        calls
    }

    /// Returns what chat `chat_id` shows now, oldest first.
    pub fn messages(&self, chat_id: i64) -> Vec<ChatMessage> {
        self.with(|bot| {
            let Some(chat) = bot.chats.get(&chat_id) else {
                return Vec::new();
            };
            let mut messages = Vec::new();
            for (id, m) in &chat.messages {
                let text = m.json.get("text").or_else(|| m.json.get("caption"));
                messages.push(ChatMessage {
                    message_id: *id,
                    from_bot: m.from_bot,
                    text: text.and_then(Value::as_str).map(str::to_string),
                    raw: m.raw.clone(),
                    parse_mode: m.parse_mode.clone(),
                    edits: m.edits,
                    reactions: m.reactions.clone(),
                    json: m.json.clone(),
                });
            }
            messages
        })
    }

    /// Returns the bot's messages in chat `chat_id` now.
    pub fn bot_messages(&self, chat_id: i64) -> Vec<ChatMessage> {
        let mut messages = self.messages(chat_id);
        messages.retain(|m| m.from_bot);
        messages
    }

    /// Returns the `getUpdates` concurrency seen for this token.
    pub fn poll_stats(&self) -> PollStats {
        self.with(|bot| PollStats {
            in_flight: bot.polls_in_flight,
            peak: bot.peak_polls,
            conflicts: bot.conflicts,
        })
    }

    /// Returns how many updates are queued and not yet confirmed.
    pub fn pending_updates(&self) -> usize {
        self.with(|bot| bot.pending_updates())
    }

    /// Returns the commands set with `setMyCommands`.
    pub fn commands(&self) -> Value {
        self.with(|bot| bot.commands.clone())
    }

    /// Returns the webhook URL and secret token, if a webhook is set.
    pub fn webhook(&self) -> Option<(String, Option<String>)> {
        self.with(|bot| bot.webhook.clone().map(|w| (w.url, w.secret_token)))
    }

    /// Returns how many updates were delivered to a webhook with a 2xx answer.
    pub fn webhook_deliveries(&self) -> usize {
        self.with(|bot| bot.webhook_deliveries)
    }

    // === waiting ===

    /// Waits (up to [`DEFAULT_WAIT`]) for a call of `method` that satisfies `matches`, and
    /// returns the first one.
    pub async fn wait_for_call(
        &self,
        method: &str,
        mut matches: impl FnMut(&Call) -> bool,
    ) -> anyhow::Result<Call> {
        let what = format!("a matching {method} call of bot {}", self.username());
        self.fake
            .wait_until(&what, DEFAULT_WAIT, |_| {
                self.calls_of(method).into_iter().find(|c| matches(c))
            })
            .await
    }

    /// Waits (up to [`DEFAULT_WAIT`]) until `method` was called at least `n` times, and
    /// returns those calls.
    pub async fn wait_calls(&self, method: &str, n: usize) -> anyhow::Result<Vec<Call>> {
        let what = format!("{n} {method} calls of bot {}", self.username());
        self.fake
            .wait_until(&what, DEFAULT_WAIT, |_| {
                let calls = self.calls_of(method);
                (calls.len() >= n).then_some(calls)
            })
            .await
    }

    /// Waits (up to [`DEFAULT_WAIT`]) until a `getUpdates` poll of this bot is in flight.
    pub async fn wait_polling(&self) -> anyhow::Result<()> {
        let what = format!("a getUpdates poll of bot {}", self.username());
        self.fake
            .wait_until(&what, DEFAULT_WAIT, |_| {
                (self.poll_stats().in_flight > 0).then_some(())
            })
            .await
    }
}

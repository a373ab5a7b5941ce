//! The long connection's JSON frames, as WeCom documents them for intelligent bots (智能机器人长连接):
//! every frame is `{"cmd", "headers": {"req_id"}, "body"}`; the server answers a request with
//! `{"headers": {"req_id"}, "errcode", "errmsg"}` under the same `req_id`, and pushes
//! `aibot_msg_callback` / `aibot_event_callback` with a `req_id` the replies to it carry.

use serde::Deserialize;
use serde_json::{Value, json};

/// Authenticates the connection with the bot id and secret.
pub(super) const SUBSCRIBE: &str = "aibot_subscribe";
/// Heartbeat.
pub(super) const PING: &str = "ping";
/// A user's message to the bot (pushed by WeCom).
pub(super) const MSG_CALLBACK: &str = "aibot_msg_callback";
/// An event (enter_chat, disconnected_event, ...) pushed by WeCom.
pub(super) const EVENT_CALLBACK: &str = "aibot_event_callback";
/// A reply to a message callback (its `req_id`): stream, markdown, ...
pub(super) const RESPOND: &str = "aibot_respond_msg";
/// The welcome reply to an `enter_chat` event (its `req_id`).
pub(super) const RESPOND_WELCOME: &str = "aibot_respond_welcome_msg";
/// A message the bot sends on its own to a chat it was talked to in.
pub(super) const SEND: &str = "aibot_send_msg";

/// A frame from WeCom: a push (`cmd` set) or the answer to a request (`errcode` set).
#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct Frame {
    /// The command of a push; empty on answers.
    #[serde(default)]
    pub cmd: String,
    /// Its headers.
    #[serde(default)]
    pub headers: Headers,
    /// Its body.
    #[serde(default)]
    pub body: Value,
    /// The result of a request (0: accepted).
    pub errcode: Option<i64>,
    /// Why a request was refused.
    #[serde(default)]
    pub errmsg: String,
}

/// Frame headers.
#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct Headers {
    /// Request id: ours on requests and their answers, WeCom's on pushes.
    #[serde(default)]
    pub req_id: String,
}

impl Frame {
    /// Reads a text frame.
    pub fn parse(text: &str) -> serde_json::Result<Self> {
        serde_json::from_str(text)
    }

    /// Returns the event type of an event push (`enter_chat`, `disconnected_event`, ...).
    pub fn event_type(&self) -> Option<&str> {
        let event = &self.body["event"];
        event["eventtype"]
            .as_str()
            .or_else(|| event["event_type"].as_str())
    }
}

/// Returns the text of a request frame.
pub(super) fn request(cmd: &str, req_id: &str, body: Option<Value>) -> String {
    let mut frame = json!({"cmd": cmd, "headers": {"req_id": req_id}});
    if let Some(body) = body {
        frame["body"] = body;
    }
    frame.to_string()
}

/// Returns the subscribe body.
pub(super) fn subscribe(bot_id: &str, secret: &str) -> Value {
    json!({"bot_id": bot_id, "secret": secret})
}

/// Returns a streaming reply's body: `content` replaces what the stream `id` showed;
/// `finish` ends it.
pub(super) fn stream(id: &str, content: &str, finish: bool) -> Value {
    json!({"msgtype": "stream", "stream": {"id": id, "finish": finish, "content": content}})
}

/// Returns a text body (the welcome reply).
pub(super) fn text(content: &str) -> Value {
    json!({"msgtype": "text", "text": {"content": content}})
}

/// Returns the body of a message sent on the bot's own to `chat_id` (markdown, as 0.3.5).
pub(super) fn markdown_to(chat_id: &str, content: &str) -> Value {
    json!({"chatid": chat_id, "msgtype": "markdown", "markdown": {"content": content}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_cmd_req_id_and_body_and_answers_parse() {
        let sub: Value =
            serde_json::from_str(&request(SUBSCRIBE, "s1", Some(subscribe("b", "x")))).unwrap();
        assert_eq!(sub["cmd"], "aibot_subscribe");
        assert_eq!(sub["headers"]["req_id"], "s1");
        assert_eq!(sub["body"]["bot_id"], "b");
        let ping: Value = serde_json::from_str(&request(PING, "p1", None)).unwrap();
        assert!(ping.get("body").is_none());
        let reply = stream("st-1", "你好 👋", true);
        assert_eq!(reply["stream"]["content"], "你好 👋");
        assert_eq!(reply["stream"]["finish"], true);
        let ack = Frame::parse(r#"{"headers":{"req_id":"s1"},"errcode":0,"errmsg":"ok"}"#).unwrap();
        assert_eq!((ack.errcode, ack.headers.req_id.as_str()), (Some(0), "s1"));
        let event = Frame::parse(
            r#"{"cmd":"aibot_event_callback","headers":{"req_id":"r"},"body":{"msgtype":"event","event":{"eventtype":"enter_chat"}}}"#,
        )
        .unwrap();
        assert_eq!(event.event_type(), Some("enter_chat"));
        assert!(Frame::parse("not json").is_err());
    }
}

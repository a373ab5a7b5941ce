//! DingTalk: the Markdown a reply is sent as (`channels::dingtalk::reply_text`, upstream's
//! `DingTalkChannel.send`: trimmed, a group reply headed `# @{name}`) and the escaped sender name
//! (`escape_sender_name`, `_escape_markdown_sender_name`), against `dingtalk_text.json`.

use serde_json::Value;

use nanobot_gateway::channels::dingtalk::{escape_sender_name, reply_text};

use crate::harness::{self, Case};

const TABLE: &str = include_str!("dingtalk_text.json");

fn call(case: &Case) -> Result<Value, String> {
    match case.function.as_str() {
        "sender_name" => Ok(escape_sender_name(case.input_str()).into()),
        "text" => {
            let args = case.args.as_deref().unwrap_or_default();
            let arg = |i: usize| args.get(i).and_then(Value::as_str);
            let (Some(content), Some(chat)) = (arg(0), arg(1)) else {
                return Err(format!(
                    "case {}: args are not [content, chat, sender]",
                    case.name
                ));
            };
            Ok(reply_text(content, chat, arg(2)).into())
        }
        other => Err(format!("no Rust function for {other}")),
    }
}

#[test]
fn replies_are_headed_and_escaped_as_0_3_5() {
    harness::check(TABLE, call);
}

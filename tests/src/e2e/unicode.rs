//! Text is not ASCII and streams are not frames: with the scripted LLM dripping every body in
//! 1–3 byte writes, a reply of CJK, emoji (ZWJ sequences, skin tones, flags), combining marks
//! and RTL text reaches the CLI, the API (streamed and not), the session in Redis and
//! `memory/history.jsonl` byte-exact; so do a CJK user message, a CJK file name in a tool call
//! and a CJK `SKILL.md`. (The chat channels: `unicode_channels`.)

use serde_json::{Value, json};

use super::memory::{ARCHIVE_MARK, long_message, small_window, wait_for_history};
use super::{api_completion, ask, session_rows};
use crate::harness::Fleet;
use crate::scripted_llm::Reply;

/// A reply that breaks byte-counting code wherever a chunk boundary falls.
pub(crate) const REPLY: &str = "你好，世界！🐈 naïve café 👩‍👩‍👧‍👦 👍🏽 🇨🇳🇯🇵 e\u{301} مرحبا שלום 𠀀";
/// A user message in the same spirit.
const ASK: &str = "请用中文回答：今天天气怎么样？☔️ 🏳️‍🌈";

fn contents(rows: &[Value], role: &str) -> Vec<String> {
    rows.iter()
        .filter(|r| r["role"] == role)
        .filter_map(|r| r["content"].as_str().map(str::to_string))
        .collect()
}

async fn streamed_completion(fleet: &Fleet, session: &str, text: &str) -> String {
    let body = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .json(&json!({"stream": true, "session_id": session,
            "messages": [{"role": "user", "content": text}]}))
        .timeout(super::TURN * 2)
        .send()
        .await
        .expect("send a streamed completion")
        .text()
        .await
        .expect("read the stream");
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).expect("a JSON chunk"))
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

#[tokio::test]
async fn a_dripped_cjk_emoji_reply_is_byte_exact_on_the_cli_the_api_and_in_the_session() {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet.llm.set_drip(true);
    fleet.llm.set_fallback(Reply::text(REPLY));

    let printed = ask(&mut fleet, ASK, Some("cli:unicode")).await;
    assert_eq!(printed, REPLY);
    let whole = api_completion(&fleet, "u1", ASK).await;
    assert_eq!(whole["choices"][0]["message"]["content"], REPLY);
    assert_eq!(streamed_completion(&fleet, "u2", ASK).await, REPLY);

    for session in ["cli:unicode", "api:u1", "api:u2"] {
        let rows = session_rows(&fleet, "default", session).await;
        assert_eq!(
            contents(&rows, "assistant"),
            [REPLY],
            "{session}: {rows:#?}"
        );
        assert_eq!(contents(&rows, "user"), [ASK], "{session}: {rows:#?}");
    }
    let asked: Vec<String> = fleet
        .llm
        .requests()
        .iter()
        .filter_map(|r| r.last_user_text())
        .collect();
    assert_eq!(asked.len(), 3, "{asked:#?}");
    for text in &asked {
        assert!(
            text.ends_with(&format!("\n\n{ASK}")) || text == ASK,
            "{text}"
        );
    }
}

#[tokio::test]
async fn a_cjk_file_name_in_a_tool_call_and_a_cjk_skill_arrive_byte_exact() {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .start()
        .await
        .unwrap();
    let skill = fleet.workspace().join("skills/诗歌");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: 诗歌\ndescription: 写一首关于猫的诗 🐈‍⬛ (שיר)\n---\n\n# 诗歌\n每行七个字。\n",
    )
    .unwrap();
    fleet.llm.set_drip(true);
    let path = "笔记/日记 📔 e\u{301}.md";
    fleet.llm.push(Reply::tool_calls([(
        "write_file",
        json!({"path": path, "content": REPLY}),
    )]));
    fleet.llm.push(Reply::text("写好了 ✅"));

    assert_eq!(ask(&mut fleet, ASK, Some("cli:files")).await, "写好了 ✅");
    let written = std::fs::read_to_string(fleet.workspace().join(path)).unwrap();
    assert_eq!(written, REPLY);

    let requests = fleet.llm.requests();
    let system = requests[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        system.contains("- **诗歌** — 写一首关于猫的诗 🐈‍⬛ (שיר)"),
        "the skill is listed byte-exact: {system}"
    );
    let messages = requests[1].messages();
    let call = messages
        .iter()
        .find_map(|m| m["tool_calls"][0]["function"]["arguments"].as_str())
        .expect("the tool call is replayed");
    let args: Value = serde_json::from_str(call).unwrap();
    assert_eq!(
        (args["path"].as_str(), args["content"].as_str()),
        (Some(path), Some(REPLY))
    );
    let result = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .expect("the tool result");
    assert!(result.contains(path), "the result names the file: {result}");
}

#[tokio::test]
async fn a_dripped_cjk_summary_reaches_history_jsonl_byte_exact() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools", "memory"])
        .config(small_window())
        .start()
        .await
        .unwrap();
    fleet.llm.set_drip(true);
    let summary = format!("- [permanent] 用户喜欢猫 🐈 and {REPLY}");
    fleet
        .llm
        .when_last_user_contains(ARCHIVE_MARK, Reply::text(summary.clone()));
    fleet.llm.set_fallback(Reply::text("收到 ✅"));
    let session = "cli:long";
    // Short replies: the two user messages alone cross the 15 000-token budget.
    ask(&mut fleet, &long_message("alpha", 7000), Some(session)).await;
    ask(&mut fleet, &long_message("bravo", 7000), Some(session)).await;
    let rows = wait_for_history(&fleet, 1).await;
    assert_eq!(rows[0]["content"], summary.as_str(), "{rows:#?}");
    let raw = std::fs::read_to_string(fleet.workspace().join("memory/history.jsonl")).unwrap();
    assert!(
        raw.contains("用户喜欢猫 🐈"),
        "stored as UTF-8, not escaped: {raw}"
    );
}

//! Runner semantics end to end: the native Anthropic provider, commands, the LLM wall
//! timeout and retries, the iteration budget, malformed tool arguments; crash recovery and
//! `/stop` in `recovery`; golden transcripts and interim output in `golden`.

mod fidelity;
mod golden;
mod keep_alive;
mod models;
mod recovery;

use std::time::Duration;

use prost::Message as _;
use serde_json::{Value, json};

use nanobot_proto::{InboundMessage, keys};

use super::{TURN, ask};
use crate::harness::Fleet;
use crate::scripted_llm::{Recorded, Reply};

const BUDGET_PROMPT: &str = "The tool-call budget for this turn is exhausted. Based only on the conversation and tool results above, provide a concise final response to the user. Do not call or request tools. Do not claim the task is complete unless the evidence above clearly shows it is complete. State what was done, what remains, and the best next step if anything is incomplete.";

/// Points `providers.anthropic.apiBase` at the fleet's own scripted server by restarting
/// the agent with a config naming it.
async fn with_anthropic(roles: &[&str]) -> Fleet {
    let mut fleet = Fleet::builder().roles(&[]).start().await.unwrap();
    let base = fleet.llm.anthropic_base();
    let path = fleet.config_path().to_path_buf();
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg["agents"]["defaults"]["model"] = json!("claude-test");
    cfg["agents"]["defaults"]["provider"] = json!("auto");
    cfg["providers"] = json!({"anthropic": {"apiKey": "sk-ant-test", "apiBase": base}});
    std::fs::write(&path, cfg.to_string()).unwrap();
    for role in roles {
        fleet.add_replica(role).await.unwrap();
    }
    fleet.wait_ready().await.unwrap();
    fleet
}

fn last_tool_result_text(req: &Recorded) -> Vec<Value> {
    req.messages()
        .iter()
        .filter_map(|m| m["content"].as_array().cloned())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .collect()
}

#[tokio::test]
async fn anthropic_turn_with_a_tool_call_goes_through_the_messages_api() {
    let mut fleet = with_anthropic(&["agent", "tools"]).await;
    fleet
        .llm
        .push(Reply::tool_calls([("list_dir", json!({"path": "."}))]).with_reasoning("look first"));
    fleet.llm.push(Reply::text("Nothing much here."));
    assert_eq!(
        ask(&mut fleet, "what's in my workspace?", None).await,
        "Nothing much here."
    );

    let requests = fleet.llm.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert_eq!(first.path, "/v1/messages");
    assert_eq!(first.headers["x-api-key"], "sk-ant-test");
    assert_eq!(first.headers["anthropic-version"], "2023-06-01");
    assert_eq!(first.body["model"], "claude-test");
    let system = first.body["system"].as_array().unwrap();
    assert!(
        system[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("## Runtime\n")
    );
    assert_eq!(
        system.last().unwrap()["cache_control"],
        json!({"type": "ephemeral"})
    );
    let tools = first.body["tools"].as_array().unwrap();
    assert!(
        tools
            .iter()
            .any(|t| t["name"] == "list_dir" && t["input_schema"].is_object())
    );
    assert_eq!(
        tools.last().unwrap()["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert!(
        tools[..tools.len() - 1]
            .iter()
            .all(|t| t.get("cache_control").is_none())
    );

    let second = requests[1].messages();
    let assistant = &second[second.len() - 2];
    assert_eq!(assistant["role"], "assistant");
    let blocks = assistant["content"].as_array().unwrap();
    assert_eq!(
        blocks[0]["type"], "thinking",
        "thinking blocks are sent back: {blocks:?}"
    );
    assert_eq!(blocks[0]["signature"], "scripted-signature");
    let tool_use = blocks.iter().find(|b| b["type"] == "tool_use").unwrap();
    assert_eq!(tool_use["input"], json!({"path": "."}));
    let results = last_tool_result_text(&requests[1]);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["tool_use_id"], tool_use["id"]);
}

#[tokio::test]
async fn anthropic_replies_stream_through_the_api() {
    let fleet = with_anthropic(&["gateway", "agent", "tools"]).await;
    fleet.llm.push(Reply::text("streamed from claude"));
    let body = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .json(&json!({"stream": true, "messages": [{"role": "user", "content": "stream please"}]}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let text: String = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(text, "streamed from claude", "{body}");
    let requests = fleet.llm.requests();
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].body["stream"], true);
}

/// Publishes an inbound chat message straight onto JetStream (no CLI waiting on it).
pub(super) async fn publish_inbound(fleet: &Fleet, id: &str, session: &str, text: &str) {
    let js = async_nats::jetstream::new(fleet.nats_client().await.unwrap());
    let msg = InboundMessage {
        id: id.into(),
        bot: "default".into(),
        channel: "cli".into(),
        chat_id: "direct".into(),
        content: text.into(),
        session_key: session.into(),
        ..Default::default()
    };
    js.publish(msg.subject(), msg.encode_to_vec().into())
        .await
        .unwrap()
        .await
        .unwrap();
}

pub(super) async fn session_metadata(fleet: &Fleet, session: &str) -> Value {
    let mut conn = fleet.redis_conn().await.unwrap();
    let meta: Option<String> = redis::cmd("HGET")
        .arg(keys::session_meta("default", session))
        .arg("metadata")
        .query_async(&mut conn)
        .await
        .unwrap();
    meta.and_then(|m| serde_json::from_str(&m).ok())
        .unwrap_or(Value::Null)
}

pub(super) async fn kill_and_restart_agent(fleet: &mut Fleet) {
    let agent = fleet.service("agent");
    agent.sigkill().unwrap();
    agent
        .wait_exit(Duration::from_secs(5))
        .await
        .expect("agent dies");
    agent.restart().unwrap();
    fleet.wait_ready().await.unwrap();
}

/// Upstream's `/help` for the commands the fleet offers (`BUILTIN_COMMAND_SPECS` order).
const HELP: &str = "🐈 nanobot commands:\n/new — Reset this chat and start a fresh conversation.\n/compact — Compact this chat's context and continue the conversation.\n/stop — Cancel the active agent turn for this chat.\n/restart — Restart the bot process.\n/status — Display runtime, provider, and channel status.\n/model [preset] — Show or switch the active model preset.\n/history [n] — Print the last N persisted conversation messages.\n/goal <goal> — Tell the agent to treat the request as a long-running goal.\n/trigger <name> — Create a named CLI trigger bound to this chat session.\n/dream — Manually trigger memory consolidation.\n/dream-log — Show what the last Dream consolidation changed.\n/dream-restore — Revert memory to a previous Dream snapshot.\n/dream-prompt [init] — Tell Dream how to organize this workspace's memory.\n/evaluator-prompt [init] — Customize the heartbeat notification gate prompt for this workspace.\n/skill — List all enabled skills available to the agent.\n/help — List available slash commands.\n/pairing [list|approve <code>|deny <code>|revoke <user_id>] — List, approve, deny or revoke pairing requests.";

/// The reports that followed commands answered at once (`/dream`, `/compact`: delivery ids
/// `<message id>:<what>-report`) in `session`, oldest first.
pub(in crate::e2e) async fn reports(fleet: &Fleet, session: &str, what: &str) -> Vec<String> {
    let suffix = format!(":{what}-report");
    super::outbound_messages(fleet)
        .await
        .into_iter()
        .filter(|m| m.session_key == session && m.id.ends_with(&suffix))
        .map(|m| m.content)
        .collect()
}

/// Sends `text` in `session`, checks its immediate answer `ack`, and returns the report that
/// follows it (see [`reports`]).
pub(in crate::e2e) async fn ask_reported(
    fleet: &mut Fleet,
    text: &str,
    session: &str,
    what: &str,
    ack: &str,
) -> String {
    let before = reports(fleet, session, what).await.len();
    assert_eq!(ask(fleet, text, Some(session)).await, ack);
    let fleet = &*fleet;
    let came = || async { reports(fleet, session, what).await.len() > before };
    crate::harness::wait_until(came, TURN * 4)
        .await
        .unwrap_or_else(|_| panic!("no report after {text}"));
    reports(fleet, session, what).await.swap_remove(before)
}

#[tokio::test]
async fn history_skill_pairing_and_restart_answer_as_upstream() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({"agents": {"defaults": {"disabledSkills": ["hidden"]}}}))
        .start()
        .await
        .unwrap();
    for (name, frontmatter) in [
        (
            "greet",
            "name: greet\ndescription: >\n  Greets people\n  warmly.",
        ),
        ("hidden", "name: hidden\ndescription: Never listed."),
    ] {
        let skill = fleet.workspace().join("skills").join(name);
        std::fs::create_dir_all(&skill).unwrap();
        std::fs::write(
            skill.join("SKILL.md"),
            format!("---\n{frontmatter}\n---\nSay hello.\n"),
        )
        .unwrap();
    }
    assert_eq!(ask(&mut fleet, "/help@my_bot", None).await, HELP);
    assert_eq!(
        ask(&mut fleet, "/history", Some("cli:h")).await,
        "No conversation history yet."
    );
    fleet.llm.push(Reply::text("hi there"));
    ask(&mut fleet, "hello", Some("cli:h")).await;
    let history = ask(&mut fleet, "/history 5", Some("cli:h")).await;
    let lines: Vec<&str> = history.lines().collect();
    assert_eq!(lines[0], "Last 2 message(s):", "{history}");
    assert!(lines[1].starts_with("👤 You: hello"), "{history}");
    assert_eq!(lines[2], "🤖 Bot: hi there", "{history}");
    let skills = ask(&mut fleet, "/skill", None).await;
    assert!(skills.starts_with("Available skills ("), "{skills}");
    assert!(
        skills.contains("\n- **greet** — Greets people warmly."),
        "a folded YAML description: {skills}"
    );
    assert!(!skills.contains("hidden"), "disabledSkills: {skills}");
    assert_eq!(
        ask(&mut fleet, "/pairing", None).await,
        "No pending pairing requests."
    );
    assert_eq!(
        ask(&mut fleet, "/pairing approve NOPE1234", None).await,
        "Invalid or expired pairing code: `NOPE1234`"
    );
    assert_eq!(
        fleet.llm.request_count(),
        1,
        "commands never reach the model"
    );

    // `/restart`: the runner answers, shuts down and execs itself (same process id).
    let pid = fleet.service("agent").pid();
    let log = fleet.service("agent").log_path().to_path_buf();
    let starts = move || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.matches("connected to nats").count()
    };
    assert_eq!(starts(), 1);
    assert_eq!(ask(&mut fleet, "/restart", None).await, "Restarting...");
    crate::harness::wait_until(|| std::future::ready(starts() == 2), TURN)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the agent did not come back:\n{}",
                fleet.service("agent").log_tail(40)
            )
        });
    assert!(fleet.service("agent").exit_status().is_none());
    assert_eq!(fleet.service("agent").pid(), pid, "restarted in place");
    fleet.llm.push(Reply::text("still here"));
    assert_eq!(
        ask(&mut fleet, "are you there", Some("cli:h")).await,
        "still here"
    );
}

#[tokio::test]
async fn compact_archives_the_chat_now_and_the_conversation_goes_on() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools", "memory"])
        .start()
        .await
        .unwrap();
    fleet.llm.push(Reply::text("hi there"));
    ask(&mut fleet, "hello", Some("cli:c")).await;
    assert_eq!(super::memory::last_consolidated(&fleet, "cli:c").await, 0);
    assert_eq!(
        ask_reported(
            &mut fleet,
            "/compact",
            "cli:c",
            "compact",
            "Compressing context…"
        )
        .await,
        "Context compacted."
    );
    assert!(super::memory::last_consolidated(&fleet, "cli:c").await >= 2);
    fleet.llm.push(Reply::text("still talking"));
    assert_eq!(
        ask(&mut fleet, "and now?", Some("cli:c")).await,
        "still talking"
    );
}

#[tokio::test]
async fn commands_answer_with_upstream_strings_without_calling_the_model() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    assert_eq!(ask(&mut fleet, "/help", None).await, HELP);
    assert_eq!(
        ask(&mut fleet, "/hepl", None).await,
        "Unknown command \"/hepl\". Did you mean \"/help\"?"
    );
    assert_eq!(
        ask(&mut fleet, "/frobnicate", None).await,
        "Unknown command \"/frobnicate\". Use \"/help\" to list available commands."
    );
    assert_eq!(
        ask(&mut fleet, "/new please", None).await,
        "Command \"/new\" does not accept arguments. Did you mean \"/new\"?"
    );
    assert_eq!(fleet.llm.request_count(), 0);
    fleet.llm.push(Reply::text("hi").with_usage(1200, 30));
    ask(&mut fleet, "hello", Some("cli:st")).await;
    let status = ask(&mut fleet, "/status", Some("cli:st")).await;
    let lines: Vec<&str> = status.lines().collect();
    assert_eq!(lines.len(), 9, "{status}");
    assert!(lines[0].starts_with("🐈 nanobot v"));
    assert_eq!(lines[1], "🧠 Model: test-model");
    assert_eq!(lines[2], "📊 Tokens: 1200 in / 30 out");
    assert!(
        lines[3].starts_with("📚 Context: ") && lines[3].ends_with("% of input budget)"),
        "{status}"
    );
    assert_eq!(lines[4], "💬 Session: 2 messages");
    assert!(lines[5].starts_with("⏱ Uptime: "));
    assert_eq!(lines[6], "⚡ Tasks: 0 active");
    assert_eq!(
        lines[7..].join("\n"),
        "🔍 Web Search: duckduckgo\n   Usage tracking: not available for this provider"
    );
}

#[tokio::test]
async fn goal_starts_goal_mode_and_trigger_and_evaluator_prompt_answer_as_upstream() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    assert_eq!(
        ask(&mut fleet, "/goal", Some("cli:g")).await,
        "Usage: /goal <long-running task description>"
    );
    assert_eq!(
        ask(&mut fleet, "/trigger", Some("cli:g")).await,
        "Usage: /trigger <name>\n\nCreate a named local trigger bound to this chat session."
    );
    assert_eq!(
        ask(&mut fleet, "/evaluator-prompt", Some("cli:g")).await,
        "Heartbeat evaluator prompt: nanobot default\n\n- Editable file: `prompts/evaluator.md`\n- Run `/evaluator-prompt init` to create an editable copy."
    );
    assert!(
        ask(&mut fleet, "/evaluator-prompt init", Some("cli:g"))
            .await
            .starts_with("Created heartbeat evaluator prompt at `prompts/evaluator.md`.")
    );
    assert!(fleet.workspace().join("prompts/evaluator.md").is_file());
    assert_eq!(fleet.llm.request_count(), 0);
    fleet.llm.push(Reply::text("开始写 📚"));
    assert_eq!(
        ask(
            &mut fleet,
            "/goal 写一本书 📚 👩\u{200d}👩\u{200d}👧\u{200d}👦",
            Some("cli:g")
        )
        .await,
        "开始写 📚"
    );
    // The command's text, then the goal guidance (see `e2e::goal`).
    let asked = fleet.llm.requests().pop().and_then(|r| r.last_user_text());
    assert!(
        asked.as_deref().is_some_and(|t| t.starts_with(
            "/goal 写一本书 📚 👩\u{200d}👩\u{200d}👧\u{200d}👦\n\n[Goal Runtime Guidance"
        )),
        "{asked:?}"
    );
}

#[tokio::test]
async fn a_slow_model_hits_the_llm_wall_timeout() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({"runner": {"llmTimeoutSecs": 1}}))
        .start()
        .await
        .unwrap();
    fleet
        .llm
        .push(Reply::text("too slow").with_delay(Duration::from_secs(4)));
    assert_eq!(
        ask(&mut fleet, "hurry", None).await,
        "Error calling LLM: timed out after 1s"
    );
    let rows = super::session_rows(&fleet, "default", "cli:direct").await;
    assert_eq!(
        rows[1]["content"],
        "[Assistant reply unavailable due to model error.]"
    );
}

/// 0.3.5's `ContextWindowExceededError`: a request still over the budget after the snip is
/// never sent, and the user gets its turn error.
#[tokio::test]
async fn a_message_larger_than_the_context_window_is_answered_with_the_turn_error_unsent() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({"agents": {"defaults": {"contextWindowTokens": 17_024, "maxTokens": 1000}}}))
        .start()
        .await
        .unwrap();
    let message = "你好世界🐈".repeat(8_000);
    assert_eq!(
        ask(&mut fleet, &message, None).await,
        "Sorry, I encountered an error."
    );
    assert!(fleet.llm.requests().is_empty(), "no request was sent");
    let rows = super::session_rows(&fleet, "default", "cli:direct").await;
    assert!(
        rows.iter().all(|r| r["role"] != "assistant"),
        "no reply row: {:?}",
        rows.iter().map(|r| &r["role"]).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn an_exhausted_iteration_budget_gets_a_no_tools_finalization() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({"agents": {"defaults": {"maxToolIterations": 2}}}))
        .start()
        .await
        .unwrap();
    for _ in 0..2 {
        fleet
            .llm
            .push(Reply::tool_calls([("list_dir", json!({"path": "."}))]));
    }
    fleet
        .llm
        .push(Reply::tool_calls([("list_dir", json!({"path": "."}))]));
    let reply = ask(&mut fleet, "loop forever", None).await;
    assert_eq!(
        reply,
        "I reached the maximum number of tool call iterations (2) without completing the task. You can try breaking the task into smaller steps."
    );
    let requests = fleet.llm.requests();
    assert_eq!(requests.len(), 3);
    let last = &requests[2];
    assert!(last.tool_names().is_empty(), "finalization offers no tools");
    assert_eq!(last.messages().last().unwrap()["content"], BUDGET_PROMPT);
}

#[tokio::test]
async fn malformed_tool_arguments_are_repaired_or_reported() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet
        .llm
        .push(Reply::malformed_tool_args("list_dir", "{\"path\": \".\","));
    fleet
        .llm
        .push(Reply::malformed_tool_args("list_dir", "path is dot"));
    fleet.llm.push(Reply::text("ok"));
    assert_eq!(ask(&mut fleet, "look around", None).await, "ok");
    let messages = fleet.llm.requests()[2].messages();
    let tools: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    assert!(
        !tools[0]["content"].as_str().unwrap().starts_with("Error"),
        "repaired: {:?}",
        tools[0]
    );
    let reported = tools[1]["content"].as_str().unwrap();
    assert!(
        reported.starts_with("Error: Tool 'list_dir' parameters must be a JSON object"),
        "{reported}"
    );
    assert!(reported.ends_with("[Analyze the error above and try a different approach.]"));
}

#[tokio::test]
async fn rate_limits_are_retried_after_the_retry_after_delay() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet
        .llm
        .push(Reply::error(429, "{\"error\": {\"message\": \"slow down\"}}").with_retry_after(1));
    fleet.llm.push(Reply::error(503, "overloaded"));
    fleet.llm.push(Reply::text("third time lucky"));
    let started = std::time::Instant::now();
    assert_eq!(ask(&mut fleet, "hi", None).await, "third time lucky");
    assert_eq!(fleet.llm.request_count(), 3);
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "waited 1 s (Retry-After) then 1 s"
    );
}

/// A message naming a reply channel and chat (a subagent's announcement does) is answered
/// there, whether a turn answers it or its receiver answers a priority command at once.
#[tokio::test]
async fn a_priority_command_is_answered_on_the_reply_channel_and_chat_the_message_names() {
    let fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    let nats = fleet.nats_client().await.unwrap();
    let mut replies = nats
        .subscribe(nanobot_proto::subjects::outbound(
            "default", "telegram", "42",
        ))
        .await
        .unwrap();
    let js = async_nats::jetstream::new(nats);
    fleet.llm.push(Reply::text("answered elsewhere"));
    for (id, text) in [("m-text", "hello"), ("m-status", "/status")] {
        let msg = InboundMessage {
            id: id.into(),
            bot: "default".into(),
            channel: "cli".into(),
            chat_id: "direct".into(),
            content: text.into(),
            session_key: "cli:routed".into(),
            reply_channel: "telegram".into(),
            reply_chat_id: "42".into(),
            ..Default::default()
        };
        js.publish(msg.subject(), msg.encode_to_vec().into())
            .await
            .unwrap()
            .await
            .unwrap();
        let reply = tokio::time::timeout(super::TURN, futures::StreamExt::next(&mut replies))
            .await
            .unwrap_or_else(|_| panic!("no reply to {text} on telegram:42"))
            .unwrap();
        let reply = nanobot_proto::OutboundMessage::decode(reply.payload).unwrap();
        assert_eq!(reply.reply_to, id);
        assert_eq!(
            (reply.channel.as_str(), reply.chat_id.as_str()),
            ("telegram", "42")
        );
        if id == "m-status" {
            assert!(
                reply.content.starts_with("🐈 nanobot v"),
                "{}",
                reply.content
            );
        } else {
            assert_eq!(reply.content, "answered elsewhere");
        }
    }
}

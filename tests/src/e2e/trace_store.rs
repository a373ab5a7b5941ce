//! Traces in a real trace store: the fleet (gateway, agent, tools and memory processes, the
//! scripted LLM) exports over OTLP to Arize Phoenix ([`TraceStore`]), and the test reads the
//! stored spans back through Phoenix's REST API: a turn with two tool calls, and the
//! consolidation it starts, are one trace across four processes; a `/dream` turn's trace holds
//! Dream's two LLM calls; a channel's turn is one trace from the gateway's receive span to its
//! delivery span ([`assert_channel_turn`]).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::memory::{ARCHIVE_MARK, history_rows, long_message, small_window};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;
use crate::trace_store::{StoredSpan, TraceStore};

const SESSION: &str = "traced";

/// Sends one API turn in [`SESSION`] and returns the answer's text.
async fn api_turn(fleet: &Fleet, text: &str) -> String {
    let response = super::api_completion(fleet, SESSION, text).await;
    response["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no answer: {response}"))
        .to_string()
}

/// The spans of one trace, by name and by id.
struct Trace(Vec<StoredSpan>);

impl Trace {
    fn named(&self, name: &str) -> Vec<&StoredSpan> {
        self.0.iter().filter(|s| s.name == name).collect()
    }

    fn one(&self, name: &str) -> &StoredSpan {
        match &self.named(name)[..] {
            [span] => span,
            other => panic!("{} {name} spans in {}", other.len(), self.outline()),
        }
    }

    /// Whether `span`'s ancestry leads to `ancestor`.
    fn descends_from(&self, span: &StoredSpan, ancestor: &StoredSpan) -> bool {
        let by_id: BTreeMap<&str, &StoredSpan> =
            self.0.iter().map(|s| (s.span_id.as_str(), s)).collect();
        let mut current = span;
        for _ in 0..32 {
            if current.span_id == ancestor.span_id {
                return true;
            }
            match current.parent_id.as_deref().and_then(|p| by_id.get(p)) {
                Some(parent) => current = parent,
                None => return false,
            }
        }
        false
    }

    /// The LLM calls under `ancestor`: GenAI `chat` client spans.
    fn llm_calls_under(&self, ancestor: &StoredSpan) -> Vec<&StoredSpan> {
        self.0
            .iter()
            .filter(|s| s.attr("gen_ai.operation.name") == Some(&json!("chat")))
            .filter(|s| self.descends_from(s, ancestor))
            .collect()
    }

    /// Names and parents, for failure messages.
    fn outline(&self) -> String {
        self.0
            .iter()
            .map(|s| {
                format!(
                    "{} {} <- {:?} {}",
                    s.name, s.span_id, s.parent_id, s.attributes
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Asserts the GenAI attributes of an LLM call span with the scripted usage.
fn assert_llm_call(span: &StoredSpan, usage: (i64, i64), finish: &str) {
    assert_eq!(span.name, "chat test-model", "{span:?}");
    let has = |key: &str, want: Value| {
        assert_eq!(span.attr(key), Some(&want), "{key} of {span:?}");
    };
    has("gen_ai.provider.name", json!("custom"));
    has("gen_ai.request.model", json!("test-model"));
    has("gen_ai.usage.input_tokens", json!(usage.0));
    has("gen_ai.usage.output_tokens", json!(usage.1));
    has("gen_ai.response.finish_reasons", json!([finish]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_its_tool_calls_and_the_memory_jobs_it_starts_are_stored_as_one_trace_across_four_processes()
 {
    let store = TraceStore::shared()
        .await
        .expect("the trace store (Phoenix) runs");
    let roles = ["gateway", "agent", "tools", "memory"];
    let mut fleet = Fleet::builder()
        .roles(&roles)
        .config(small_window())
        .config(json!({"telemetry": {"otlpEndpoint": store.otlp_endpoint()}}))
        .start()
        .await
        .unwrap();
    fleet.llm.when_last_user_contains(
        ARCHIVE_MARK,
        Reply::text("- [permanent] The user talks about alpha").with_usage(900, 12),
    );
    // Turn 1 (a 4,000-word message and its echo) fills half the budget; turn 2 calls two
    // tools, answers and crosses it, which asks the memory workers to consolidate.
    let alpha = long_message("alpha", 4000);
    fleet.llm.push(Reply::text(alpha.clone()));
    assert_eq!(api_turn(&fleet, &alpha).await, alpha);
    fleet.llm.push(
        Reply::tool_calls([
            ("list_dir", json!({"path": "."})),
            ("find_files", json!({"glob": "*"})),
        ])
        .with_usage(120, 15),
    );
    fleet.llm.push(Reply::text("done").with_usage(160, 4));
    assert_eq!(api_turn(&fleet, &long_message("bravo", 4000)).await, "done");
    let ws = fleet.workspace().to_path_buf();
    if wait_until(|| async { !history_rows(&ws).is_empty() }, super::TURN)
        .await
        .is_err()
    {
        panic!(
            "no consolidation\nagent:\n{}\nmemory:\n{}",
            fleet.service("agent").logs(),
            fleet.service("memory").logs()
        );
    }
    // Dream over that history entry: the analysis, then the edit phase's answer.
    fleet
        .llm
        .push(Reply::text("ADD USER.md: talks about alpha").with_usage(300, 20));
    fleet
        .llm
        .push(Reply::text("Nothing else to change.").with_usage(400, 5));
    assert_eq!(api_turn(&fleet, "/dream").await, "Dreaming...");
    let reported = || async {
        super::outbound_messages(&fleet)
            .await
            .iter()
            .any(|m| m.id.ends_with(":dream-report"))
    };
    wait_until(reported, super::TURN * 4)
        .await
        .expect("the Dream run reported");
    for role in roles {
        let service = fleet.service(role);
        service.sigterm().unwrap();
        service
            .wait_exit(Duration::from_secs(5))
            .await
            .expect("exits after SIGTERM (flushing its spans)");
    }

    // Both memory jobs reached the store (it ingests asynchronously).
    let jobs = || async {
        store
            .spans(&[("name", "memory_job")])
            .await
            .unwrap_or_default()
    };
    wait_until(
        || async { jobs().await.len() >= 2 },
        Duration::from_secs(30),
    )
    .await
    .unwrap_or_else(|e| panic!("two memory_job spans stored: {e}\n{}", store.log()));
    let job = |kind: &str| {
        let kind = json!(kind);
        async move {
            let jobs = jobs().await;
            let job = jobs
                .into_iter()
                .find(|j| j.attr("kind") == Some(&kind))
                .unwrap_or_else(|| panic!("no {kind} job"));
            // Every process flushed at exit, but the store writes in batches: wait for the
            // whole trace (one span per process at least).
            let trace_id = job.trace_id.clone();
            wait_until(
                || async {
                    let spans = store.spans_of_trace(&trace_id).await.unwrap_or_default();
                    ["api_completion", "turn", "memory_job"]
                        .iter()
                        .all(|n| spans.iter().any(|s| s.name == *n))
                },
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|e| panic!("the {kind} job's trace is stored whole: {e}"));
            Trace(store.spans_of_trace(&trace_id).await.unwrap())
        }
    };

    // The turn with two tool calls and the consolidation it started: one trace.
    let trace = job("MEMORY_JOB_KIND_TOKENS").await;
    let outline = trace.outline();
    let api = trace.one("api_completion"); // gateway
    assert_eq!(api.parent_id, None, "the request is the root: {outline}");
    let turn = trace.one("turn"); // agent
    assert_eq!(turn.parent_id.as_deref(), Some(api.span_id.as_str()));
    let memory_job = trace.one("memory_job"); // memory
    assert!(
        trace.descends_from(memory_job, turn),
        "the consolidation is part of the turn that crossed the budget: {outline}"
    );
    // The turn's own two LLM calls (the archive call is the memory job's), found by their
    // scripted usage. Turn 2 is sent as soon as turn 1 is answered, so the runner still
    // finishing turn 1 drains it: its calls are still its own trace's.
    let own_calls: Vec<&StoredSpan> = trace
        .llm_calls_under(turn)
        .into_iter()
        .filter(|s| !trace.descends_from(s, memory_job))
        .collect();
    assert_eq!(own_calls.len(), 2, "{outline}");
    let turn_call = |input: i64| -> &StoredSpan {
        trace
            .llm_calls_under(turn)
            .into_iter()
            .find(|s| s.attr("gen_ai.usage.input_tokens") == Some(&json!(input)))
            .unwrap_or_else(|| panic!("no LLM call of {input} input tokens: {outline}"))
    };
    assert_llm_call(turn_call(120), (120, 15), "tool_calls");
    assert_llm_call(turn_call(160), (160, 4), "stop");
    assert!(!trace.descends_from(turn_call(160), memory_job));
    for tool in ["list_dir", "find_files"] {
        let with_tool = |name: &str| -> &StoredSpan {
            trace
                .named(name)
                .into_iter()
                .find(|s| s.attr("gen_ai.tool.name") == Some(&json!(tool)))
                .unwrap_or_else(|| panic!("no {name} span of {tool} in {outline}"))
        };
        let runner = with_tool(&format!("execute_tool {tool}")); // agent
        let executor = with_tool("tool_call"); // tools
        assert!(trace.descends_from(runner, turn), "{tool}: {outline}");
        assert!(trace.descends_from(executor, runner), "{tool}: {outline}");
        assert_eq!(
            runner.attr("gen_ai.tool.call.id"),
            executor.attr("gen_ai.tool.call.id")
        );
    }
    let [archive] = trace.llm_calls_under(memory_job)[..] else {
        panic!("one archive LLM call under the consolidation: {outline}");
    };
    assert_llm_call(archive, (900, 12), "stop");

    // Turn 1: its one LLM call is in its own trace (the one turn without a memory job).
    let turns = store.spans(&[("name", "turn")]).await.unwrap();
    assert_eq!(turns.len(), 3, "three turns: {turns:?}");
    let mut first = Vec::new();
    for t in &turns {
        let spans = Trace(store.spans_of_trace(&t.trace_id).await.unwrap());
        if spans.named("memory_job").is_empty() {
            first.push(spans.llm_calls_under(spans.one("turn")).len());
        }
    }
    assert_eq!(first, [1], "turn 1's trace holds its one LLM call");

    // `/dream`: Dream's two LLM calls (analysis, edit) under its job, in the command's trace.
    let trace = job("MEMORY_JOB_KIND_DREAM").await;
    let outline = trace.outline();
    let memory_job = trace.one("memory_job");
    assert!(
        trace.descends_from(memory_job, trace.one("turn")),
        "{outline}"
    );
    let mut calls = trace.llm_calls_under(memory_job);
    calls.sort_by_key(|s| s.attr("gen_ai.usage.input_tokens").and_then(Value::as_i64));
    assert_eq!(calls.len(), 2, "{outline}");
    assert_llm_call(calls[0], (300, 20), "stop");
    assert_llm_call(calls[1], (400, 5), "stop");
}

impl Trace {
    /// Waits until the store holds a whole trace whose root is a span named `root`, with a
    /// span of each of `names`.
    async fn rooted_at(store: &TraceStore, root: &str, names: &[&str]) -> Trace {
        let whole = || async {
            let roots = store.spans(&[("name", root)]).await.unwrap_or_default();
            for first in roots {
                let trace = store.spans_of_trace(&first.trace_id).await;
                let spans = trace.unwrap_or_default();
                if names.iter().all(|n| spans.iter().any(|s| s.name == *n)) {
                    return Some(spans);
                }
            }
            None
        };
        let stored = wait_until(
            || async { whole().await.is_some() },
            Duration::from_secs(30),
        )
        .await;
        if stored.is_err() {
            let named = store.spans(&[]).await.unwrap_or_default();
            let names: Vec<&str> = named.iter().map(|s| s.name.as_str()).collect();
            panic!("no whole {root} trace stored: {names:?}\n{}", store.log());
        }
        Trace(whole().await.expect("stored"))
    }
}

/// Asserts `trace` is one whole turn of `bot` from `channel`: its one root is the gateway's
/// `receive {channel}` span, every other span's parent is in the trace (no orphan), the turn
/// hangs under the root, the LLM call under the turn names the conversation (the turn's
/// session), the delivery (`deliver {channel}`) ends it under the turn, and every span
/// carries the bot and channel.
fn assert_channel_turn(trace: &Trace, channel: &str, bot: &str) {
    let outline = trace.outline();
    let ids: Vec<&str> = trace.0.iter().map(|s| s.span_id.as_str()).collect();
    let roots: Vec<&StoredSpan> = trace.0.iter().filter(|s| s.parent_id.is_none()).collect();
    let receive = trace.one(&format!("receive {channel}"));
    assert_eq!(roots.len(), 1, "one root: {outline}");
    assert_eq!(
        roots[0].span_id, receive.span_id,
        "the root is the gateway's: {outline}"
    );
    for span in &trace.0 {
        if let Some(parent) = &span.parent_id {
            assert!(
                ids.contains(&parent.as_str()),
                "orphan {}: {outline}",
                span.name
            );
        }
        assert_eq!(
            span.attr("nanobot.bot"),
            Some(&json!(bot)),
            "{}: {outline}",
            span.name
        );
        let tagged = span.attr("nanobot.channel");
        assert_eq!(tagged, Some(&json!(channel)), "{}: {outline}", span.name);
    }
    let turn = trace.one("turn");
    assert!(trace.descends_from(turn, receive), "{outline}");
    let conversation = turn.attr("session_id").expect("the turn names its session");
    assert!(
        conversation
            .as_str()
            .is_some_and(|c| c.starts_with(&format!("{channel}:"))),
        "{outline}"
    );
    let calls = trace.llm_calls_under(turn);
    assert!(!calls.is_empty(), "{outline}");
    for call in calls {
        let named = call.attr("gen_ai.conversation.id");
        assert_eq!(named, Some(conversation), "{outline}");
    }
    // One delivery per reply the turn published (its final; progress where the channel shows it).
    let deliveries = trace.named(&format!("deliver {channel}"));
    assert!(!deliveries.is_empty(), "{outline}");
    for delivery in &deliveries {
        assert!(trace.descends_from(delivery, turn), "{outline}");
    }
    let delivered = json!("delivered");
    let ended = deliveries
        .iter()
        .any(|d| d.attr("outcome") == Some(&delivered));
    assert!(ended, "{outline}");
}

/// Stops every role with SIGTERM (each flushes its spans).
async fn stop(fleet: &mut Fleet, roles: &[&str]) {
    for role in roles {
        let service = fleet.service(role);
        service.sigterm().unwrap();
        service
            .wait_exit(Duration::from_secs(5))
            .await
            .expect("exits after SIGTERM (flushing its spans)");
    }
}

/// Issue 32: a Telegram turn is one trace whose root is the gateway's receive span and whose
/// last span is the delivery to Telegram, every span tagged with the bot and the channel.
#[tokio::test(flavor = "multi_thread")]
async fn a_telegram_turn_is_one_trace_from_the_gateways_receive_span_to_its_delivery() {
    use super::telegram::{ALICE, telegram_fleet_from};
    use crate::telegram_fake::{Incoming, TgUser};
    let store = TraceStore::shared()
        .await
        .expect("the trace store (Phoenix) runs");
    let traced =
        Fleet::builder().config(json!({"telemetry": {"otlpEndpoint": store.otlp_endpoint()}}));
    let (mut fleet, _fake, bot) = telegram_fleet_from(traced, json!({})).await;
    // A stranger first: the ACL refuses them (a pairing code is the answer), in a receive span.
    const STRANGER: i64 = 666;
    let stranger = TgUser::new(STRANGER, "陌生人");
    bot.inject(Incoming::text_from(&stranger, "让我进去 🚪"));
    bot.wait_for_call("sendMessage", |c| c.chat_id() == Some(STRANGER))
        .await
        .unwrap();
    fleet.llm.push(Reply::text("你好 Alice 👋"));
    bot.inject(Incoming::text_from(
        &TgUser::new(ALICE, "alice"),
        "追踪我 🔍",
    ));
    bot.wait_for_call("sendMessage", |c| c.text() == Some("你好 Alice 👋"))
        .await
        .unwrap();
    stop(&mut fleet, &["gateway", "agent", "tools"]).await;
    let names = [
        "receive telegram",
        "turn",
        "chat test-model",
        "deliver telegram",
    ];
    let trace = Trace::rooted_at(store, "receive telegram", &names).await;
    assert_channel_turn(&trace, "telegram", "default");
    // The refused message: a receive span of its own, tagged, and no turn.
    let receives = store.spans(&[("name", "receive telegram")]).await.unwrap();
    assert_eq!(receives.len(), 2, "{receives:?}");
    let refused = receives.iter().find(|r| r.trace_id != trace.0[0].trace_id);
    let refused = refused.expect("the refused message's receive span");
    let alone = store.spans_of_trace(&refused.trace_id).await.unwrap();
    assert_eq!(alone.len(), 1, "{alone:?}");
    assert_eq!(refused.attr("nanobot.bot"), Some(&json!("default")));
    let conversation = format!("telegram:{ALICE}");
    assert_eq!(
        trace.one("turn").attr("session_id"),
        Some(&json!(conversation))
    );
}

/// The fleet config exporting to `store`.
pub(crate) fn traced(store: &TraceStore) -> crate::harness::FleetBuilder {
    Fleet::builder().config(json!({"telemetry": {"otlpEndpoint": store.otlp_endpoint()}}))
}

/// Stops the fleet's roles and asserts the stored trace rooted at `receive {channel}`, and
/// that the one message the ACL refused before the turn is a `receive {channel}` span rooting
/// a trace of its own (tagged with the bot and channel, no turn): the channel opened the
/// receive span when the platform's event arrived, before its ACL check.
pub(crate) async fn assert_stored_turn_and_refusal(
    store: &TraceStore,
    fleet: &mut Fleet,
    channel: &str,
) {
    let trace = assert_stored_turn(store, fleet, channel).await;
    let receive = format!("receive {channel}");
    let receives = store.spans(&[("name", receive.as_str())]).await.unwrap();
    assert_eq!(receives.len(), 2, "{receives:?}\n{}", trace.outline());
    let refused = receives.iter().find(|r| r.trace_id != trace.0[0].trace_id);
    let refused = refused.expect("the refused message's receive span");
    let alone = store.spans_of_trace(&refused.trace_id).await.unwrap();
    // Its trace is the receive span and what ran inside it (a pairing reply's HTTP call): one
    // root, no turn.
    let roots: Vec<&StoredSpan> = alone.iter().filter(|s| s.parent_id.is_none()).collect();
    assert_eq!(roots.len(), 1, "{alone:?}");
    assert_eq!(roots[0].span_id, refused.span_id, "{alone:?}");
    assert!(!alone.iter().any(|s| s.name == "turn"), "{alone:?}");
    assert_eq!(refused.attr("nanobot.bot"), Some(&json!("default")));
    assert_eq!(refused.attr("nanobot.channel"), Some(&json!(channel)));
}

/// Stops the fleet's roles and asserts the stored trace rooted at `receive {channel}`.
async fn assert_stored_turn(store: &TraceStore, fleet: &mut Fleet, channel: &str) -> Trace {
    stop(fleet, &["gateway", "agent", "tools"]).await;
    let (receive, deliver) = (format!("receive {channel}"), format!("deliver {channel}"));
    let names = [
        receive.as_str(),
        "turn",
        "chat test-model",
        deliver.as_str(),
    ];
    let trace = Trace::rooted_at(store, &receive, &names).await;
    assert_channel_turn(&trace, channel, "default");
    trace
}

#[tokio::test(flavor = "multi_thread")]
async fn a_websocket_turn_is_one_trace_from_the_gateways_receive_span_to_its_delivery() {
    use super::websocket::{WsClient, ws_fleet_from};
    let store = TraceStore::shared().await.expect("the trace store runs");
    let (mut fleet, port) = ws_fleet_from(traced(store), json!({})).await;
    fleet.llm.push(Reply::text("回声 🔊"));
    let mut client = WsClient::connect(port, "tracer").await;
    client.say("c1", "m1", "追踪 🔍").await;
    assert_eq!(client.final_for("m1").await["text"], "回声 🔊");
    // Another client's message to the tracer's chat: refused, in a receive span of its own.
    let mut intruder = WsClient::connect(port, "闯入者").await;
    intruder.say("c1", "m2", "让我进去 🚪").await;
    intruder.until(|f| f["event"] == "error").await;
    assert_stored_turn_and_refusal(store, &mut fleet, "websocket").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slack_turn_is_one_trace_from_the_gateways_receive_span_to_its_delivery() {
    use super::slack::{dm, slack_fleet_from};
    let store = TraceStore::shared().await.expect("the trace store runs");
    let (mut fleet, fake) = slack_fleet_from(traced(store), json!({})).await;
    // A stranger's DM first: the ACL refuses it (a pairing code), in a receive span of its own.
    let mut stranger = dm("1700000000.000100", "让我进去 🚪");
    stranger["user"] = json!("U0STRANGER");
    stranger["channel"] = json!("D0STRANGER");
    fake.send_event(stranger).unwrap();
    fake.wait_posted("D0STRANGER", |_| true).await.unwrap();
    fleet.llm.push(Reply::text("回声 🔊"));
    fake.send_event(dm("1700000001.000100", "追踪 🔍")).unwrap();
    fake.wait_posted("D0ALICE", |_| true).await.unwrap();
    assert_stored_turn_and_refusal(store, &mut fleet, "slack").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_discord_turn_is_one_trace_from_the_gateways_receive_span_to_its_delivery() {
    use super::discord::{ALICE, ALICE_DM, discord_fleet_from};
    use crate::discord_fake::{DEFAULT_WAIT, DcMessage};
    let store = TraceStore::shared().await.expect("the trace store runs");
    let (mut fleet, fake) = discord_fleet_from(traced(store), json!({})).await;
    // A stranger's DM first: the ACL refuses it (a pairing code), in a receive span of its own.
    const STRANGER: u64 = 410_000_000_000_000_777;
    const STRANGER_DM: u64 = 500_000_000_000_000_777;
    fake.inject(DcMessage::dm(STRANGER, STRANGER_DM, "让我进去 🚪"));
    fake.wait_until("the pairing code", DEFAULT_WAIT, |f| {
        (!f.sent_in(STRANGER_DM).is_empty()).then_some(())
    })
    .await
    .unwrap();
    fleet.llm.push(Reply::text("回声 🔊"));
    fake.inject(DcMessage::dm(ALICE, ALICE_DM, "追踪 🔍"));
    fake.wait_until("the reply", DEFAULT_WAIT, |f| {
        (!f.sent_in(ALICE_DM).is_empty()).then_some(())
    })
    .await
    .unwrap();
    assert_stored_turn_and_refusal(store, &mut fleet, "discord").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_email_turn_is_one_trace_from_the_gateways_receive_span_to_its_delivery() {
    use super::email::{bot_address, email_fleet_from, mail, person, wait_sent};
    let store = TraceStore::shared().await.expect("the trace store runs");
    let servers = crate::mail_servers::MailServers::shared()
        .await
        .expect("mail servers");
    let (bot, alice) = (bot_address("tracer"), person("alice"));
    let allow = json!({"allowFrom": [alice]});
    let mut fleet = email_fleet_from(traced(store), servers, &bot, allow).await;
    // A stranger's mail first: the ACL ignores it, in a receive span of its own (the poller
    // reads mail in order, so it is handled before Alice's is answered).
    let stranger = person("mallory");
    let refused = mail(
        &stranger,
        &bot,
        "<trace-0@example.test>",
        "让我进去 🚪",
        "",
        "开门",
    );
    servers.deliver(&bot, &refused).await.unwrap();
    fleet.llm.push(Reply::text("回声 🔊"));
    let asked = mail(
        &alice,
        &bot,
        "<trace-1@example.test>",
        "追踪 🔍",
        "",
        "你好",
    );
    servers.deliver(&bot, &asked).await.unwrap();
    wait_sent(servers, &alice, 1).await;
    assert_stored_turn_and_refusal(store, &mut fleet, "email").await;
}

/// Issue 32: a cron job's turn is one trace rooted at the cron leader's `cron_fire` span, every
/// span tagged with the bot and `cron`, its model calls with the job's session.
#[tokio::test(flavor = "multi_thread")]
async fn a_cron_fired_turn_is_one_trace_from_the_cron_leaders_fire_span() {
    let store = TraceStore::shared().await.expect("the trace store runs");
    let roles = ["agent", "tools", "cron"];
    let mut fleet = traced(store).roles(&roles).start().await.unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    std::fs::create_dir_all(fleet.workspace().join("cron")).unwrap();
    let jobs = json!({"version": 1, "jobs": [{
        "id": "tracejob", "name": "伸展", "enabled": true,
        "schedule": {"kind": "every", "everyMs": 3_600_000},
        "payload": {"kind": "agent_turn", "message": "伸展一下 🧘", "sessionKey": "cli:stretch",
                    "originChannel": "cli", "originChatId": "stretch"},
        "state": {"nextRunAtMs": now_ms - 1_000}
    }]});
    let path = fleet.workspace().join("cron/jobs.json");
    std::fs::write(path, jobs.to_string()).unwrap();
    fleet
        .llm
        .when_last_user_contains("伸展一下 🧘", Reply::text("伸展时间 🧘"));
    let answered = || async {
        super::outbound_messages(&fleet)
            .await
            .iter()
            .any(|m| m.content == "伸展时间 🧘")
    };
    wait_until(answered, super::TURN * 2)
        .await
        .expect("the job's turn answered");
    stop(&mut fleet, &roles).await;
    let names = ["cron_fire", "cron_turn", "chat test-model"];
    let trace = Trace::rooted_at(store, "cron_fire", &names).await;
    let outline = trace.outline();
    let ids: Vec<&str> = trace.0.iter().map(|s| s.span_id.as_str()).collect();
    let fire = trace.one("cron_fire");
    for span in &trace.0 {
        match &span.parent_id {
            Some(parent) => assert!(ids.contains(&parent.as_str()), "orphan: {outline}"),
            None => assert_eq!(span.span_id, fire.span_id, "one root: {outline}"),
        }
        assert_eq!(
            span.attr("nanobot.bot"),
            Some(&json!("default")),
            "{outline}"
        );
        assert_eq!(
            span.attr("nanobot.channel"),
            Some(&json!("cron")),
            "{outline}"
        );
    }
    let turn = trace.one("cron_turn");
    for call in trace.llm_calls_under(turn) {
        let named = call.attr("gen_ai.conversation.id");
        assert_eq!(named, Some(&json!("cli:stretch")), "{outline}");
    }
}

//! Traces leave the fleet over OTLP when `telemetry.otlpEndpoint` is set, one trace per turn
//! across the gateway, agent and tools processes, with OpenTelemetry's GenAI attributes; every
//! role serves Prometheus metrics at `/metrics` on its health port.

use std::collections::BTreeMap;
use std::time::Duration;

use fake_opentelemetry_collector::{ExportedSpan, FakeCollectorServer};
use serde_json::{Value, json};

use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;

/// A user text no span may carry unless `telemetry.captureContent` is on.
const SECRET_TEXT: &str = "the zebra sings at midnight";

/// Runs one API turn whose model calls `list_dir` and `glob` (usage 120/15), then answers
/// (usage 160/4); stops every role (SIGTERM flushes the exporters) and returns the spans.
async fn traced_turn(capture_content: bool) -> Vec<ExportedSpan> {
    let mut collector = FakeCollectorServer::start()
        .await
        .expect("start fake collector");
    let roles = ["gateway", "agent", "tools"];
    let mut fleet = Fleet::builder()
        .roles(&roles)
        .config(json!({"telemetry": {
            "otlpEndpoint": collector.endpoint(),
            "captureContent": capture_content,
        }}))
        .start()
        .await
        .unwrap();
    fleet.llm.push(
        Reply::tool_calls([
            ("list_dir", json!({"path": "."})),
            ("find_files", json!({"glob": "*"})),
        ])
        .with_usage(120, 15),
    );
    fleet.llm.push(Reply::text("done").with_usage(160, 4));
    let response: Value = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .json(&json!({"messages": [{"role": "user", "content": SECRET_TEXT}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        response["choices"][0]["message"]["content"], "done",
        "{response}"
    );
    for role in roles {
        let service = fleet.service(role);
        service.sigterm().unwrap();
        service
            .wait_exit(Duration::from_secs(5))
            .await
            .expect("exits after SIGTERM");
    }
    // Every process flushed before it exited: whatever arrived is all there is.
    collector.exported_spans(usize::MAX, Duration::ZERO).await
}

/// Returns the exported (Debug-printed) value of attribute `key`, if set.
fn attr<'a>(span: &'a ExportedSpan, key: &str) -> Option<&'a str> {
    span.attributes.get(key).map(String::as_str)
}

fn named<'a>(spans: &'a [ExportedSpan], name: &str) -> Vec<&'a ExportedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// Whether `span`'s ancestry leads to `ancestor`.
fn descends_from(spans: &[ExportedSpan], span: &ExportedSpan, ancestor: &ExportedSpan) -> bool {
    let by_id: BTreeMap<&str, &ExportedSpan> =
        spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let mut current = span;
    for _ in 0..32 {
        if current.span_id == ancestor.span_id {
            return true;
        }
        match by_id.get(current.parent_span_id.as_str()) {
            Some(parent) => current = parent,
            None => return false,
        }
    }
    false
}

/// Every attribute value of every span and span event, with where it was.
fn every_value(spans: &[ExportedSpan]) -> Vec<(String, &str)> {
    let mut out = Vec::new();
    for s in spans {
        for (k, v) in &s.attributes {
            out.push((format!("{} {k}", s.name), v.as_str()));
        }
        for e in &s.events {
            for (k, v) in &e.attributes {
                out.push((format!("{} event {:?} {k}", s.name, e.name), v.as_str()));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_turn_with_two_tool_calls_is_one_trace_with_genai_attributes_and_no_content() {
    let spans = traced_turn(false).await;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    // One span of each process: the gateway's request, the agent's turn, the executor's calls.
    let [api] = named(&spans, "api_completion")[..] else {
        panic!("one gateway request span expected in {names:?}");
    };
    let [turn] = named(&spans, "turn")[..] else {
        panic!("one turn span expected in {names:?}");
    };
    assert_eq!(
        turn.trace_id, api.trace_id,
        "the turn continues the request's trace"
    );
    assert!(
        descends_from(&spans, turn, api),
        "turn under the gateway request"
    );

    // The two LLM calls: GenAI client spans under the turn with the scripted usage.
    let llm: Vec<&ExportedSpan> = spans
        .iter()
        .filter(|s| attr(s, "gen_ai.operation.name").is_some_and(|v| v.contains("\"chat\"")))
        .collect();
    assert_eq!(llm.len(), 2, "two LLM calls in {names:?}");
    let expected = [("120", "15", "tool_calls"), ("160", "4", "stop")];
    for (span, (input, output, finish)) in llm.iter().zip(expected) {
        assert_eq!(span.name, "chat test-model");
        assert_eq!(span.kind, "SPAN_KIND_CLIENT");
        assert!(descends_from(&spans, span, turn), "LLM span under the turn");
        let has = |key: &str, want: &str| {
            let value = attr(span, key).unwrap_or_else(|| panic!("{key} missing: {span:?}"));
            assert!(value.contains(want), "{key} = {value}, want {want}");
        };
        has("gen_ai.provider.name", "\"custom\"");
        has("gen_ai.request.model", "\"test-model\"");
        has("gen_ai.response.finish_reasons", &format!("\"{finish}\""));
        has("gen_ai.usage.input_tokens", &format!("IntValue({input})"));
        has("gen_ai.usage.output_tokens", &format!("IntValue({output})"));
    }
    // The turn carries its calls' sum (issue 33).
    for (key, sum) in [
        ("gen_ai.usage.input_tokens", "IntValue(280)"),
        ("gen_ai.usage.output_tokens", "IntValue(19)"),
    ] {
        let value = attr(turn, key).unwrap_or_else(|| panic!("{key} missing on the turn"));
        assert!(value.contains(sum), "turn {key} = {value}, want {sum}");
    }

    // Each tool call: a runner-side span under the turn, the executor's span under it, both
    // naming the tool and the call id.
    for tool in ["list_dir", "find_files"] {
        let with_tool = |name: &str| -> &ExportedSpan {
            spans
                .iter()
                .find(|s| {
                    s.name == name && attr(s, "gen_ai.tool.name").is_some_and(|v| v.contains(tool))
                })
                .unwrap_or_else(|| panic!("no {name} span of {tool} in {names:?}"))
        };
        let runner = with_tool(&format!("execute_tool {tool}"));
        let executor = with_tool("tool_call");
        assert!(
            descends_from(&spans, runner, turn),
            "{tool}: runner span under the turn"
        );
        assert!(
            descends_from(&spans, executor, runner),
            "{tool}: executor under runner"
        );
        let call_id = attr(runner, "gen_ai.tool.call.id").expect("runner call id");
        assert!(call_id.contains("call_"), "{call_id}");
        assert_eq!(attr(executor, "gen_ai.tool.call.id"), Some(call_id));
    }

    for (at, value) in every_value(&spans) {
        assert!(
            !value.contains(SECRET_TEXT),
            "message content recorded without captureContent at {at}: {value}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_capture_content_llm_spans_carry_the_messages() {
    let spans = traced_turn(true).await;
    let first = spans
        .iter()
        .find(|s| attr(s, "gen_ai.usage.input_tokens").is_some_and(|v| v.contains("IntValue(120)")))
        .expect("the first LLM span");
    let input = attr(first, "gen_ai.input.messages").expect("input messages recorded");
    assert!(input.contains(SECRET_TEXT), "{input}");
    let output = attr(first, "gen_ai.output.messages").expect("output messages recorded");
    assert!(output.contains("list_dir"), "{output}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_role_serves_prometheus_metrics_that_count_the_turn() {
    let roles = ["gateway", "agent", "tools"];
    let mut fleet = Fleet::builder().roles(&roles).start().await.unwrap();
    fleet.llm.push(
        Reply::tool_calls([
            ("list_dir", json!({"path": "."})),
            ("find_files", json!({"glob": "*"})),
        ])
        .with_usage(120, 15),
    );
    fleet.llm.push(Reply::text("done").with_usage(160, 4));
    let http = reqwest::Client::new();
    let response: Value = http
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .json(&json!({"messages": [{"role": "user", "content": "count me"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(response["choices"][0]["message"]["content"], "done");

    let mut scrapes = BTreeMap::new();
    for role in roles {
        let base = fleet.health_base(role).unwrap();
        let reply = http.get(format!("{base}/metrics")).send().await.unwrap();
        assert_eq!(reply.status(), 200);
        let content_type = reply.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        let text = reply.text().await.unwrap();
        // Prometheus text format: every line is a comment (HELP, TYPE) or a sample.
        for line in text.lines() {
            let parsed = prometheus_parse::LineInfo::parse(line);
            assert!(
                !matches!(parsed, prometheus_parse::LineInfo::Ignored),
                "{role}: not Prometheus text: {line:?}"
            );
        }
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .unwrap_or_else(|e| panic!("{role}: {e}\n{text}"));
        scrapes.insert(role, (scrape, text));
    }
    let value = |role: &str, metric: &str, labels: &[(&str, &str)]| -> f64 {
        let (scrape, text) = &scrapes[role];
        let sample = scrape
            .samples
            .iter()
            .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .unwrap_or_else(|| panic!("{role}: no {metric}{labels:?} in\n{text}"));
        match sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            ref other => panic!("{metric} is {other:?}"),
        }
    };
    // The agent: one answered turn, two LLM calls with the scripted tokens, two tool calls
    // asked for, one session lease.
    let answered = [
        ("bot", "default"),
        ("channel", "api"),
        ("outcome", "answered"),
    ];
    assert_eq!(value("agent", "nanobot_turns_total", &answered), 1.0);
    let provider = [("provider", "custom")];
    assert_eq!(value("agent", "nanobot_llm_calls_total", &provider), 2.0);
    let input = [("provider", "custom"), ("type", "input")];
    let output = [("provider", "custom"), ("type", "output")];
    assert_eq!(value("agent", "nanobot_llm_tokens_total", &input), 280.0);
    assert_eq!(value("agent", "nanobot_llm_tokens_total", &output), 19.0);
    assert_eq!(value("agent", "nanobot_session_leases_total", &[]), 1.0);
    let agent_text = &scrapes["agent"].1;
    assert!(
        agent_text.contains(
            "nanobot_turn_duration_seconds_count{bot=\"default\",channel=\"api\",outcome=\"answered\"} 1\n"
        ),
        "{agent_text}"
    );
    for tool in ["list_dir", "find_files"] {
        let runner = [("tool", tool), ("side", "runner"), ("outcome", "ok")];
        assert_eq!(value("agent", "nanobot_tool_calls_total", &runner), 1.0);
        // The executor: the same calls, run.
        let executor = [("tool", tool), ("side", "executor"), ("outcome", "ok")];
        assert_eq!(value("tools", "nanobot_tool_calls_total", &executor), 1.0);
    }
    // The gateway: one reply delivered to an API client.
    let delivered = [("channel", "api"), ("outcome", "delivered")];
    assert_eq!(
        value("gateway", "nanobot_deliveries_total", &delivered),
        1.0
    );
}

/// Reads one sample of `metric` (labels `labels`) from a role's `/metrics`, if present.
async fn sample(
    http: &reqwest::Client,
    base: &str,
    metric: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).ok()?;
    scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .and_then(|s| match s.value {
            prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v)
            | prometheus_parse::Value::Counter(v) => Some(v),
            _ => None,
        })
}

#[tokio::test]
async fn the_agent_reports_the_sessions_it_leases_now_and_its_queue_lag() {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet
        .llm
        .push(Reply::text("slow").with_delay(Duration::from_secs(3)));
    let base = fleet.health_base("agent").unwrap();
    let http = reqwest::Client::new();
    let leased = |want: f64| {
        let (http, base) = (http.clone(), base.clone());
        move || {
            let (http, base) = (http.clone(), base.clone());
            async move { sample(&http, &base, "nanobot_sessions_leased", &[]).await == Some(want) }
        }
    };
    let turn = tokio::spawn({
        let (http, api) = (http.clone(), fleet.api_base());
        async move {
            http.post(format!("{api}/v1/chat/completions"))
                .json(&json!({"messages": [{"role": "user", "content": "take your time"}]}))
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    wait_until(leased(1.0), Duration::from_secs(10))
        .await
        .expect("one session leased while its turn runs");
    assert_eq!(turn.await.unwrap(), 200);
    wait_until(leased(0.0), Duration::from_secs(10))
        .await
        .expect("no session leased once the turn is answered");
    let consumer = [("consumer", nanobot_proto::subjects::INBOUND_CONSUMER)];
    wait_until(
        || async {
            sample(&http, &base, "nanobot_queue_pending", &consumer).await == Some(0.0)
                && sample(&http, &base, "nanobot_queue_ack_pending", &consumer).await == Some(0.0)
        },
        Duration::from_secs(15),
    )
    .await
    .expect("the inbound consumer's queue gauges are sampled and empty");
}

/// The `nanobot_tool_*` series of a role's `/metrics` text.
fn tool_series(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with("nanobot_tool_"))
        .collect()
}

/// Issue 30: a model calling hundreds of tool names nobody offered (and a caller sending them
/// straight to an executor) leaves `/metrics` with a bounded number of series: such calls count
/// under `tool="unknown"`, offered tools under their names.
#[tokio::test]
async fn made_up_tool_names_count_as_unknown_and_add_no_metric_series() {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .start()
        .await
        .unwrap();
    const REPLIES: usize = 5;
    let made_up = |reply: usize, i: usize| format!("工具_{reply}_{i}_🔧_{:x}", reply * 7919 + i);
    for reply in 0..REPLIES {
        let mut calls: Vec<(String, Value)> = (0..63)
            .map(|i| (made_up(reply, i), json!({"x": "💥"})))
            .collect();
        calls.push(("list_dir".into(), json!({"path": "."})));
        fleet.llm.push(Reply::tool_calls(calls));
    }
    fleet.llm.push(Reply::text("尽力了 ✅"));
    let http = reqwest::Client::new();
    let response = http
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .json(&json!({"messages": [{"role": "user", "content": "call everything"}]}))
        .timeout(super::TURN * 2)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    // The same kind of names sent straight to the executors.
    let nats = fleet.nats_client().await.unwrap();
    for i in 0..50 {
        let name = format!("直呼_{i}_tool");
        let request = nanobot_proto::ToolCallRequest {
            bot: "default".into(),
            call_id: format!("direct-{i}"),
            name: name.clone(),
            arguments_json: "{}".into(),
            ..Default::default()
        };
        let subject = nanobot_proto::subjects::tool_call("default", &name);
        let payload = prost::Message::encode_to_vec(&request);
        let reply = tokio::time::timeout(
            Duration::from_secs(10),
            nats.request(subject, payload.into()),
        )
        .await;
        assert!(matches!(reply, Ok(Ok(_))), "the executor answers {name}");
    }

    let unknown = (REPLIES * 63) as f64;
    let agent = fleet.health_base("agent").unwrap();
    let tools = fleet.health_base("tools").unwrap();
    let runner_unknown = [
        ("tool", "unknown"),
        ("side", "runner"),
        ("outcome", "error"),
    ];
    let executor_unknown = [
        ("tool", "unknown"),
        ("side", "executor"),
        ("outcome", "error"),
    ];
    let counted = || async {
        sample(&http, &agent, "nanobot_tool_calls_total", &runner_unknown).await == Some(unknown)
            && sample(&http, &tools, "nanobot_tool_calls_total", &executor_unknown).await
                == Some(50.0)
    };
    wait_until(counted, Duration::from_secs(15))
        .await
        .expect("every made-up call counted as unknown, on both sides");
    for base in [&agent, &tools] {
        let text = http
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            !text.contains("工具") && !text.contains("直呼") && !text.contains("🔧"),
            "a made-up name became a label:\n{text}"
        );
        let series = tool_series(&text);
        // Per side: calls {ok, error} and a duration histogram (18 buckets, +Inf, sum,
        // count) for `unknown` and `list_dir` at most.
        assert!(
            series.len() <= 2 * (2 + 21),
            "{} series:\n{text}",
            series.len()
        );
    }
    let listed = [("tool", "list_dir"), ("side", "runner"), ("outcome", "ok")];
    assert_eq!(
        sample(&http, &agent, "nanobot_tool_calls_total", &listed).await,
        Some(REPLIES as f64),
        "an offered tool keeps its name"
    );
}

/// The bots of [`two_bots_every_role_labels_its_counters_and_histograms_with_the_bot`].
const BOTS: [&str; 2] = ["alpha", "beta"];

/// The families of a bot's work (docs/metrics.md): every series of them names its bot. The
/// others describe a process (queue gauges, leases held now, dependency health).
const BOT_FAMILIES: [&str; 8] = [
    "nanobot_turns_total",
    "nanobot_turn_duration_seconds",
    "nanobot_queue_wait_seconds",
    "nanobot_llm_",
    "nanobot_tool_",
    "nanobot_session_leases_total",
    "nanobot_session_lease_takeovers_total",
    "nanobot_deliveries_total",
];

/// Issue 32: in a two-bot fleet every role's `/metrics` counts each bot's work under its own
/// `bot` label (turns and tokens on the agent, tool calls on the executor, deliveries on the
/// gateway), every counter and histogram series has a `bot`, and no session id is a label.
#[tokio::test]
async fn two_bots_every_role_labels_its_counters_and_histograms_with_the_bot() {
    let roles = ["gateway", "agent", "tools", "memory", "cron"];
    let mut fleet = Fleet::builder()
        .roles(&roles)
        .config(json!({"bots": {"alpha": {}, "beta": {}}}))
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    for (i, bot) in BOTS.iter().enumerate() {
        let n = i as u64 + 1;
        fleet.llm.push(
            Reply::tool_calls([("list_dir", json!({"path": "."}))]).with_usage(100 * n, 10 * n),
        );
        fleet
            .llm
            .push(Reply::text("好的 ✅").with_usage(200 * n, 20 * n));
        let response: Value = http
            .post(format!("{}/v1/chat/completions", fleet.api_base()))
            .header("x-nanobot-bot", *bot)
            .json(&json!({
                "session_id": format!("会话-{bot}-🧪"),
                "messages": [{"role": "user", "content": "数一数 🔢"}],
            }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            response["choices"][0]["message"]["content"], "好的 ✅",
            "{response}"
        );
    }
    let mut texts = BTreeMap::new();
    for role in roles {
        let base = fleet.health_base(role).unwrap();
        let text = http.get(format!("{base}/metrics")).send().await.unwrap();
        texts.insert(role, text.text().await.unwrap());
    }
    let value = |role: &str, metric: &str, labels: &[(&str, &str)]| -> Option<f64> {
        let text = &texts[role];
        let scrape =
            prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
        scrape
            .samples
            .iter()
            .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .and_then(|s| match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => {
                    Some(v)
                }
                prometheus_parse::Value::Histogram(ref buckets) => buckets.last().map(|b| b.count),
                _ => None,
            })
    };
    for (i, bot) in BOTS.iter().enumerate() {
        let n = (i + 1) as f64;
        let turn = [("bot", *bot), ("channel", "api"), ("outcome", "answered")];
        assert_eq!(
            value("agent", "nanobot_turns_total", &turn),
            Some(1.0),
            "{bot}: {}",
            texts["agent"]
        );
        let model = [
            ("bot", *bot),
            ("provider", "custom"),
            ("model", "test-model"),
        ];
        for (kind, want) in [("input", 300.0 * n), ("output", 30.0 * n)] {
            let tokens = [model.as_slice(), &[("type", kind)]].concat();
            assert_eq!(
                value("agent", "nanobot_llm_tokens_total", &tokens),
                Some(want),
                "{bot} {kind}"
            );
        }
        assert_eq!(
            value("agent", "nanobot_llm_calls_total", &model),
            Some(2.0),
            "{bot}"
        );
        let waited = [("bot", *bot), ("channel", "api")];
        assert!(
            value("agent", "nanobot_queue_wait_seconds", &waited).is_some(),
            "{bot}: no queue wait in {}",
            texts["agent"]
        );
        let leases = [("bot", *bot)];
        assert_eq!(
            value("agent", "nanobot_session_leases_total", &leases),
            Some(1.0)
        );
        for side in ["runner", "executor"] {
            let role = if side == "runner" { "agent" } else { "tools" };
            let call = [
                ("bot", *bot),
                ("tool", "list_dir"),
                ("side", side),
                ("outcome", "ok"),
            ];
            assert_eq!(
                value(role, "nanobot_tool_calls_total", &call),
                Some(1.0),
                "{bot} {side}"
            );
        }
        let delivered = [("bot", *bot), ("channel", "api"), ("outcome", "delivered")];
        assert_eq!(
            value("gateway", "nanobot_deliveries_total", &delivered),
            Some(1.0),
            "{bot}"
        );
    }
    for (role, text) in &texts {
        let bots_work = |l: &&str| BOT_FAMILIES.iter().any(|f| l.starts_with(f));
        for line in text.lines().filter(bots_work) {
            let bot_label = ["alpha", "beta", "unknown"]
                .iter()
                .any(|b| line.contains(&format!("bot=\"{b}\"")));
            assert!(bot_label, "{role}: a series without a served bot: {line}");
            assert!(
                !line.contains("会话"),
                "{role}: a session id as a label: {line}"
            );
        }
    }
}

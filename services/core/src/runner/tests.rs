//! Runner semantics against a scripted in-process model and fake tools.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::hooks::NoopHook;
use crate::provider::{ChatRequest, DeltaFn, LlmError};
use crate::tools::{Offered, ToolOutcome};
use nanobot_proto::ToolSpec;

#[derive(Default)]
struct Model {
    replies: Mutex<VecDeque<Result<ChatResponse, LlmError>>>,
    requests: Mutex<Vec<ChatRequest<'static>>>,
    delay: Option<Duration>,
}

impl Model {
    fn new(replies: Vec<ChatResponse>) -> Self {
        Self {
            replies: Mutex::new(replies.into_iter().map(Ok).collect()),
            ..Default::default()
        }
    }
    fn requests(&self) -> Vec<ChatRequest<'static>> {
        self.requests.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl ChatModel for Model {
    async fn chat(
        &self,
        req: &ChatRequest<'_>,
        _: Option<&DeltaFn<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        self.requests.lock().unwrap().push(req.to_owned_request());
        if let Some(d) = self.delay {
            tokio::time::sleep(d).await;
        }
        self.replies
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Ok(text("fallback")))
    }
}

struct Tools;

#[async_trait::async_trait]
impl ToolExecutor for Tools {
    async fn execute(&self, _: &ToolScope, _: &str, name: &str, arguments: &str) -> ToolOutcome {
        if name == "fail" {
            return ToolOutcome {
                content: json!("Error: nope"),
                is_error: true,
            };
        }
        ToolOutcome {
            content: json!(format!("{name} ran with {arguments}")),
            is_error: false,
        }
    }
}

#[derive(Default)]
struct Sink(Mutex<Vec<(String, usize)>>);

#[async_trait::async_trait]
impl CheckpointSink for Sink {
    async fn checkpoint(&self, checkpoint: Checkpoint, turn: &[Value]) {
        let phase = checkpoint.phase.as_str().to_string();
        self.0.lock().unwrap().push((phase, turn.len()));
    }
}

fn text(t: &str) -> ChatResponse {
    ChatResponse {
        content: Some(t.into()),
        finish_reason: "stop".into(),
        usage: Usage {
            prompt_tokens: 10,
            completion_tokens: 2,
            cached_tokens: 0,
        },
        ..Default::default()
    }
}

fn finish(t: &str, reason: &str) -> ChatResponse {
    ChatResponse {
        finish_reason: reason.into(),
        ..text(t)
    }
}

fn calls(names: &[&str]) -> ChatResponse {
    ChatResponse {
        content: None,
        tool_calls: names
            .iter()
            .enumerate()
            .map(|(i, n)| ToolCall {
                id: format!("c{i}"),
                name: (*n).into(),
                arguments: "{\"a\": 1,".into(),
            })
            .collect(),
        finish_reason: "tool_calls".into(),
        ..text("")
    }
}

fn spec(max_iterations: u32) -> RunSpec {
    RunSpec {
        messages: vec![
            json!({"role": "system", "content": "sys"}),
            json!({"role": "user", "content": "hi"}),
        ],
        model: "m".into(),
        max_tokens: 100,
        max_iterations,
        ..Default::default()
    }
}

fn tool_spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        parameters_json: "{\"type\":\"object\"}".into(),
        ..Default::default()
    }
}

async fn go(model: &Model, max_iterations: u32, sink: Option<&Sink>) -> RunResult {
    let specs = Offered::new(vec![tool_spec("exec"), tool_spec("fail")]);
    let deps = RunDeps {
        model,
        tools: &Tools,
        specs: &specs,
        hook: &NoopHook,
        checkpoints: sink.map(|s| s as &dyn CheckpointSink),
        injections: None,
    };
    run(deps, spec(max_iterations)).await
}

fn last_content(req: &ChatRequest<'_>) -> String {
    req.messages.last().unwrap()["content"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[tokio::test]
async fn blank_replies_are_retried_then_finalized_without_tools() {
    let model = Model::new(vec![text(""), text("  "), text("Final answer.")]);
    let r = go(&model, 10, None).await;
    assert_eq!(r.content, "Final answer.");
    assert_eq!(r.stop_reason, StopReason::Completed);
    let reqs = model.requests();
    assert_eq!(reqs.len(), 3);
    assert!(!reqs[1].tools.is_empty());
    assert!(reqs[2].tools.is_empty(), "finalization has no tools");
    assert_eq!(last_content(&reqs[2]), prompts::FINALIZATION_RETRY_PROMPT);
    assert_eq!(r.llm_calls, 3);
    assert_eq!(r.usage.prompt_tokens, 30);
}

#[tokio::test]
async fn still_blank_after_finalization_ends_with_the_empty_final_message() {
    let model = Model::new(vec![text(""), text(""), text("")]);
    let r = go(&model, 10, None).await;
    assert_eq!(r.content, EMPTY_FINAL_RESPONSE_MESSAGE);
    assert_eq!(r.stop_reason, StopReason::EmptyFinalResponse);
    assert_eq!(
        r.new_messages.last().unwrap()["content"],
        EMPTY_FINAL_RESPONSE_MESSAGE
    );
}

#[tokio::test]
async fn truncated_replies_are_continued_and_joined() {
    let model = Model::new(vec![
        finish("Hello ", "length"),
        finish("big ", "length"),
        text("world"),
    ]);
    let r = go(&model, 10, None).await;
    assert_eq!(r.content, "Hello big world");
    let reqs = model.requests();
    let second = &reqs[1].messages;
    assert_eq!(
        second[second.len() - 2],
        json!({"role": "assistant", "content": "Hello "})
    );
    assert!(last_content(&reqs[1]).starts_with(prompts::LENGTH_RECOVERY_PROMPT));
    assert!(
        last_content(&reqs[1])
            .contains("<already_delivered_tail>\nHello \n</already_delivered_tail>")
    );
}

#[tokio::test]
async fn a_capped_provider_s_truncated_reply_is_final_without_continuations() {
    let model = Model::new(vec![
        finish("Hello, I am a small ", "length"),
        text("never"),
    ]);
    let specs = Offered::new(vec![tool_spec("exec")]);
    let deps = RunDeps {
        model: &model,
        tools: &Tools,
        specs: &specs,
        hook: &NoopHook,
        checkpoints: None,
        injections: None,
    };
    let capped = RunSpec {
        capped_replies: true,
        ..spec(10)
    };
    let r = run(deps, capped).await;
    assert_eq!(r.content, "Hello, I am a small ");
    assert_eq!(r.llm_calls, 1);
    assert_eq!(model.requests().len(), 1);
    assert_eq!(r.stop_reason, StopReason::Completed);
}

#[tokio::test]
async fn all_malformed_tool_calls_get_one_corrective_retry_then_a_no_tools_request() {
    let malformed = ChatResponse {
        malformed_tool_calls: 1,
        finish_reason: "tool_calls".into(),
        ..text("Let me check.")
    };
    let model = Model::new(vec![malformed.clone(), malformed, text("Plain answer.")]);
    let r = go(&model, 10, None).await;
    assert_eq!(r.content, "Plain answer.");
    let reqs = model.requests();
    assert_eq!(reqs.len(), 3);
    assert!(last_content(&reqs[1]).starts_with(prompts::MALFORMED_TOOL_CALLS_NOTE));
    assert!(
        last_content(&reqs[1])
            .ends_with("Previous assistant text before the malformed calls:\nLet me check.")
    );
    assert!(!reqs[1].tools.is_empty());
    assert!(reqs[2].tools.is_empty());
    assert_eq!(
        r.new_messages.len(),
        1,
        "the corrective note stays out of the transcript"
    );
}

#[tokio::test]
async fn a_slow_model_hits_the_wall_timeout() {
    let model = Model {
        delay: Some(Duration::from_secs(3)),
        ..Model::new(vec![text("late")])
    };
    let specs = Offered::new(vec![tool_spec("exec")]);
    let deps = RunDeps {
        model: &model,
        tools: &Tools,
        specs: &specs,
        hook: &NoopHook,
        checkpoints: None,
        injections: None,
    };
    let r = run(
        deps,
        RunSpec {
            llm_timeout: Some(Duration::from_secs(1)),
            ..spec(5)
        },
    )
    .await;
    assert_eq!(r.content, "Error calling LLM: timed out after 1s");
    assert_eq!(r.stop_reason, StopReason::Error);
    assert_eq!(
        r.new_messages,
        vec![json!({"role": "assistant", "content": prompts::MODEL_ERROR_PLACEHOLDER})]
    );
}

#[tokio::test]
async fn provider_errors_end_the_turn_with_the_error_message() {
    let model = Model::default();
    model
        .replies
        .lock()
        .unwrap()
        .push_back(Err(LlmError::Status {
            status: 400,
            body: "bad".into(),
            retry_after: None,
        }));
    let r = go(&model, 5, None).await;
    assert_eq!(r.content, LLM_ERROR_MESSAGE);
    assert_eq!(r.error.as_deref(), Some(LLM_ERROR_MESSAGE));

    let model = Model::default();
    model
        .replies
        .lock()
        .unwrap()
        .push_back(Err(LlmError::Status {
            status: 429,
            body: "{\"error\": {\"code\": \"insufficient_quota\"}}".into(),
            retry_after: None,
        }));
    let r = go(&model, 5, None).await;
    assert_eq!(r.content, prompts::ARREARAGE_ERROR_MESSAGE);
}

#[tokio::test]
async fn an_exhausted_budget_is_finalized_without_tools_or_with_the_template() {
    let model = Model::new(vec![
        calls(&["exec"]),
        calls(&["exec"]),
        text("Did two steps; one remains."),
    ]);
    let r = go(&model, 2, None).await;
    assert_eq!(r.stop_reason, StopReason::MaxIterations);
    assert_eq!(r.content, "Did two steps; one remains.");
    let reqs = model.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs[2].tools.is_empty());
    assert_eq!(
        last_content(&reqs[2]),
        prompts::BUDGET_EXHAUSTED_FINALIZATION_PROMPT
    );

    let model = Model::new(vec![calls(&["exec"]), calls(&["exec"])]);
    let r = go(&model, 1, None).await;
    assert_eq!(r.content, max_iterations_message(1));
    assert_eq!(
        r.new_messages.last().unwrap()["content"],
        max_iterations_message(1)
    );
}

#[tokio::test]
async fn a_run_told_to_stop_at_its_budget_makes_no_finalization_request_and_has_no_text() {
    let model = Model::new(vec![calls(&["exec"]), calls(&["exec"]), text("unasked")]);
    let specs = Offered::new(vec![tool_spec("exec")]);
    let deps = RunDeps {
        model: &model,
        tools: &Tools,
        specs: &specs,
        hook: &NoopHook,
        checkpoints: None,
        injections: None,
    };
    let options = RunOptions {
        on_budget_exhausted: OnBudgetExhausted::Stop,
    };
    let r = run_with(deps, spec(2), options).await;
    assert_eq!(r.stop_reason, StopReason::MaxIterations);
    assert_eq!(r.content, "");
    assert_eq!(model.requests().len(), 2, "no finalization request");
    assert_eq!(
        crate::subagent::outcome(&r),
        (true, crate::subagent::NO_FINAL_RESPONSE.into()),
        "a subagent reports upstream's text"
    );
}

#[tokio::test]
async fn tool_batches_are_checkpointed_and_errors_counted() {
    let sink = Sink::default();
    let model = Model::new(vec![calls(&["exec", "fail"]), text("done")]);
    let r = go(&model, 5, Some(&sink)).await;
    assert_eq!(r.content, "done");
    assert_eq!(
        *sink.0.lock().unwrap(),
        vec![
            ("awaiting_tools".to_string(), 1),
            ("tools_completed".to_string(), 3)
        ]
    );
    assert_eq!(r.tool_errors, 1);
    assert_eq!(r.tools_used, vec!["exec"]);
    let roles: Vec<&str> = r
        .new_messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["assistant", "tool", "tool", "assistant"]);
    assert_eq!(
        r.new_messages[1]["content"], "exec ran with {\"a\":1}",
        "arguments repaired"
    );
}

/// Follow-ups waiting in a queue, handed out like the session mailbox does.
struct Followups(Mutex<VecDeque<&'static str>>);

#[async_trait::async_trait]
impl Injections for Followups {
    async fn drain(&self, max: usize) -> Vec<Value> {
        let mut q = self.0.lock().unwrap();
        let n = q.len().min(max);
        q.drain(..n)
            .map(|t| json!({"role": "user", "content": t}))
            .collect()
    }
}

async fn go_with(model: &Model, followups: &Followups) -> RunResult {
    let specs = Offered::new(vec![tool_spec("exec")]);
    let deps = RunDeps {
        model,
        tools: &Tools,
        specs: &specs,
        hook: &NoopHook,
        checkpoints: None,
        injections: Some(followups),
    };
    run(deps, spec(10)).await
}

#[tokio::test]
async fn follow_ups_arriving_before_the_final_reply_are_answered_in_the_same_run() {
    let followups = Followups(Mutex::new(VecDeque::from(["and also B?"])));
    let model = Model::new(vec![text("Answer A."), text("Answer B.")]);
    let r = go_with(&model, &followups).await;
    assert_eq!(r.content, "Answer B.");
    assert_eq!(r.injected, 1);
    let reqs = model.requests();
    assert_eq!(reqs.len(), 2);
    let second = &reqs[1].messages;
    assert_eq!(
        second[second.len() - 2],
        json!({"role": "assistant", "content": "Answer A."})
    );
    assert_eq!(
        second[second.len() - 1],
        json!({"role": "user", "content": "and also B?"})
    );
    let roles: Vec<_> = r.new_messages.iter().map(|m| m["role"].clone()).collect();
    assert_eq!(
        roles,
        [json!("assistant"), json!("user"), json!("assistant")]
    );
}

#[tokio::test]
async fn follow_ups_are_taken_at_most_three_per_drain_and_five_drains_per_run() {
    let many: Vec<&'static str> = (0..30).map(|_| "more").collect();
    let followups = Followups(Mutex::new(VecDeque::from(many)));
    let model = Model::new(vec![]);
    let r = go_with(&model, &followups).await;
    assert_eq!(r.injected, 15, "3 per drain × 5 drains");
    assert_eq!(
        followups.0.lock().unwrap().len(),
        15,
        "the rest stay queued"
    );
    assert_eq!(model.requests().len(), 6);
}

#[tokio::test]
async fn follow_ups_are_injected_after_a_tool_batch() {
    let followups = Followups(Mutex::new(VecDeque::from(["use B instead"])));
    let model = Model::new(vec![calls(&["exec"]), text("Done with B.")]);
    let r = go_with(&model, &followups).await;
    assert_eq!(r.content, "Done with B.");
    let reqs = model.requests();
    let second = &reqs[1].messages;
    assert_eq!(second[second.len() - 2]["role"], "tool");
    assert_eq!(
        second[second.len() - 1],
        json!({"role": "user", "content": "use B instead"})
    );
}

/// Counts calls and the most in flight at once.
#[derive(Default)]
struct Counting {
    ran: std::sync::atomic::AtomicUsize,
    in_flight: std::sync::atomic::AtomicUsize,
    peak: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl ToolExecutor for Counting {
    async fn execute(&self, _: &ToolScope, _: &str, name: &str, _: &str) -> ToolOutcome {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.in_flight.fetch_add(1, SeqCst) + 1;
        self.peak.fetch_max(now, SeqCst);
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.in_flight.fetch_sub(1, SeqCst);
        self.ran.fetch_add(1, SeqCst);
        ToolOutcome {
            content: json!(format!("{name} ok")),
            is_error: false,
        }
    }
}

#[tokio::test]
async fn a_reply_with_thousands_of_calls_runs_the_capped_number_a_few_at_a_time() {
    use std::sync::atomic::Ordering::SeqCst;
    let names = vec!["read_file"; 20_000];
    let response = calls(&names);
    let read_only: std::collections::HashSet<String> = ["read_file".to_string()].into();
    let tools = Counting::default();
    let outcomes = execute::run_calls(
        &tools,
        &ToolScope::default(),
        &read_only,
        &read_only,
        &response.tool_calls,
        &[],
        &NoopHook,
    )
    .await;
    assert_eq!(outcomes.len(), 20_000, "every call gets a result");
    assert_eq!(tools.ran.load(SeqCst), execute::MAX_CALLS_PER_REPLY);
    assert!(
        tools.peak.load(SeqCst) <= execute::MAX_IN_FLIGHT,
        "peak {} in flight",
        tools.peak.load(SeqCst)
    );
    assert!(
        tools.peak.load(SeqCst) > 1,
        "read-only calls still run in parallel"
    );
    let capped = &outcomes[execute::MAX_CALLS_PER_REPLY];
    assert!(capped.is_error);
    assert!(
        capped.content.as_str().unwrap().starts_with(
            "Error: too many tool calls in one reply (20000); only the first 64 were run."
        ),
        "{}",
        capped.content
    );
    assert!(!outcomes[execute::MAX_CALLS_PER_REPLY - 1].is_error);
}

/// Records every call it runs.
#[derive(Default)]
struct Recording(Mutex<Vec<(String, String)>>);

#[async_trait::async_trait]
impl ToolExecutor for Recording {
    async fn execute(&self, _: &ToolScope, _: &str, name: &str, arguments: &str) -> ToolOutcome {
        self.0.lock().unwrap().push((name.into(), arguments.into()));
        ToolOutcome {
            content: json!(format!("{name} ok")),
            is_error: false,
        }
    }
}

fn call(id: &str, name: &str, arguments: Value) -> ChatResponse {
    ChatResponse {
        content: None,
        tool_calls: vec![ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.to_string(),
        }],
        finish_reason: "tool_calls".into(),
        ..text("")
    }
}

#[tokio::test]
async fn a_third_identical_web_lookup_in_a_turn_is_refused_with_upstream_text() {
    let url = json!({"url": "https://example.com/a"});
    let query = json!({"query": "rust news"});
    let model = Model::new(vec![
        call("f1", "web_fetch", url.clone()),
        call("f2", "web_fetch", json!({"url": " https://EXAMPLE.com/a "})),
        call("f3", "web_fetch", url.clone()),
        call("o1", "web_fetch", json!({"url": "https://example.com/b"})),
        call("s1", "web_search", query.clone()),
        call("s2", "web_search", query.clone()),
        call("s3", "web_search", query.clone()),
        text("done"),
    ]);
    let specs = Offered::new(vec![tool_spec("web_fetch"), tool_spec("web_search")]);
    let tools = Recording::default();
    let deps = RunDeps {
        model: &model,
        tools: &tools,
        specs: &specs,
        hook: &NoopHook,
        checkpoints: None,
        injections: None,
    };
    let r = run(deps, spec(20)).await;
    assert_eq!(r.content, "done");
    let results: Vec<(String, String)> = r
        .new_messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let id = m["tool_call_id"].as_str().unwrap().to_string();
            (id, m["content"].as_str().unwrap().to_string())
        })
        .collect();
    let refused = "Error: repeated external lookup blocked. Use the results you already have \
                   to answer, or try a meaningfully different source.\n\n\
                   [Analyze the error above and try a different approach.]";
    for (id, content) in &results {
        if id == "f3" || id == "s3" {
            assert_eq!(content, refused, "{id}");
        } else {
            assert!(content.ends_with(" ok"), "{id} ran: {content}");
        }
    }
    assert_eq!(results.len(), 7);
    let ran = tools.0.lock().unwrap().clone();
    let count = |name: &str| ran.iter().filter(|(n, _)| n == name).count();
    assert_eq!(count("web_fetch"), 3, "two of /a and one of /b: {ran:?}");
    assert_eq!(count("web_search"), 2, "{ran:?}");
}

/// Records when each call starts and ends.
#[derive(Default)]
struct Timeline(Mutex<Vec<String>>);

#[async_trait::async_trait]
impl ToolExecutor for Timeline {
    async fn execute(&self, _: &ToolScope, id: &str, name: &str, _: &str) -> ToolOutcome {
        self.0.lock().unwrap().push(format!("start {name} {id}"));
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.0.lock().unwrap().push(format!("end {name} {id}"));
        ToolOutcome {
            content: json!("ok"),
            is_error: false,
        }
    }
}

#[tokio::test]
async fn web_search_never_runs_next_to_the_other_calls_of_its_batch() {
    let model = Model::new(vec![
        calls(&["read_file", "web_search", "read_file", "read_file"]),
        text("done"),
    ]);
    let read_only = |name: &str, exclusive: bool| ToolSpec {
        read_only: true,
        exclusive,
        ..tool_spec(name)
    };
    let specs = Offered::new(vec![
        read_only("read_file", false),
        read_only("web_search", true),
    ]);
    let tools = Timeline::default();
    let deps = RunDeps {
        model: &model,
        tools: &tools,
        specs: &specs,
        hook: &NoopHook,
        checkpoints: None,
        injections: None,
    };
    assert_eq!(run(deps, spec(5)).await.content, "done");
    let timeline = tools.0.lock().unwrap().clone();
    assert_eq!(
        timeline[..4],
        [
            "start read_file c0",
            "end read_file c0",
            "start web_search c1",
            "end web_search c1"
        ],
        "{timeline:?}"
    );
    assert_eq!(
        timeline[4..6],
        ["start read_file c2", "start read_file c3"],
        "read-only neighbours still run together: {timeline:?}"
    );
}

/// Answers every call with 3,000 characters.
struct Big;

#[async_trait::async_trait]
impl ToolExecutor for Big {
    async fn execute(&self, _: &ToolScope, id: &str, _: &str, _: &str) -> ToolOutcome {
        ToolOutcome {
            content: json!(format!("{id}:{}", "x".repeat(3000))),
            is_error: false,
        }
    }
}

/// Runs a turn whose three tool calls (read_file, grep, read_file) each return a large result,
/// then answers "done"; returns the result and the model with the requests it received.
async fn three_large_results(spec: RunSpec) -> (RunResult, Model) {
    let call = |name: &str, id: &str| {
        let mut response = calls(&[name]);
        response.tool_calls[0].id = id.into();
        response
    };
    let model = Model::new(vec![
        call("read_file", "r1"),
        call("grep", "g1"),
        call("read_file", "r2"),
        text("done"),
    ]);
    let specs = Offered::new(vec![tool_spec("read_file"), tool_spec("grep")]);
    let deps = RunDeps {
        model: &model,
        tools: &Big,
        specs: &specs,
        hook: &NoopHook,
        checkpoints: None,
        injections: None,
    };
    let r = run(deps, spec).await;
    (r, model)
}

#[tokio::test]
async fn large_results_of_this_turn_are_compacted_oldest_first_only_when_the_request_would_overflow()
 {
    // Input budget 3300 − 100 − 1024 = 2176 tokens: two results (about 770 each) fit, three
    // do not, and two plus a compacted one are under 85% of it.
    let (r, model) = three_large_results(RunSpec {
        context_window_tokens: 3300,
        context_block_limit: None,
        ..spec(10)
    })
    .await;
    assert_eq!(r.content, "done");
    let tool_texts = |req: &ChatRequest<'_>| -> Vec<String> {
        req.messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap().to_string())
            .collect()
    };
    let reqs = model.requests();
    assert!(
        tool_texts(&reqs[2]).iter().all(|t| t.len() > 3000),
        "under the budget nothing is compacted"
    );
    let last = tool_texts(&reqs[3]);
    assert_eq!(
        last[0],
        compact::compacted_text("read_file"),
        "oldest first"
    );
    assert!(last[1].len() > 3000 && last[2].len() > 3000, "{last:?}");
    assert!(
        r.new_messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .all(|m| m["content"].as_str().unwrap().len() > 3000),
        "the session keeps every result"
    );
}

#[tokio::test]
async fn context_block_limit_is_the_input_budget_in_place_of_the_window() {
    // A window that never overflows, and upstream's `contextBlockLimit` of 2176 tokens: the
    // same budget as the test above, so the oldest large result is compacted the same way.
    let (r, model) = three_large_results(RunSpec {
        context_window_tokens: 200_000,
        context_block_limit: Some(2176),
        ..spec(10)
    })
    .await;
    assert_eq!(r.content, "done");
    let reqs = model.requests();
    let first_tool = reqs[3]
        .messages
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string());
    assert_eq!(first_tool, Some(compact::compacted_text("read_file")));
}

/// Returns each message of a request as `role: content` (tool calls as `call <name>`).
fn outline(req: &ChatRequest<'_>) -> Vec<String> {
    req.messages
        .iter()
        .map(|m| {
            let content = match &m["content"] {
                Value::String(s) if s.len() > 40 => format!("{}…", &s[..12]),
                Value::String(s) => s.clone(),
                _ => match m["tool_calls"][0]["function"]["name"].as_str() {
                    Some(name) => format!("call {name}"),
                    None => String::new(),
                },
            };
            format!("{}: {content}", m["role"].as_str().unwrap_or(""))
        })
        .collect()
}

#[tokio::test]
async fn history_over_the_budget_is_snipped_to_the_newest_messages_from_a_user_message() {
    let model = Model::new(vec![text("done")]);
    let specs = Offered::new(Vec::new());
    let deps = RunDeps {
        model: &model,
        tools: &Tools,
        specs: &specs,
        hook: &NoopHook,
        checkpoints: None,
        injections: None,
    };
    let messages = vec![
        json!({"role": "system", "content": "sys"}),
        json!({"role": "user", "content": format!("old question {}", "y".repeat(4000))}),
        json!({"role": "assistant", "content": "old answer"}),
        json!({"role": "user", "content": "now"}),
    ];
    // Input budget 2124 − 100 − 1024 = 1000 tokens: the old question (about 1,000) does not
    // fit next to the rest; the old answer does, but a request starts at a user message.
    let r = run(
        deps,
        RunSpec {
            messages: messages.clone(),
            context_window_tokens: 2124,
            context_block_limit: None,
            ..spec(5)
        },
    )
    .await;
    assert_eq!(r.content, "done");
    assert_eq!(outline(&model.requests()[0]), ["system: sys", "user: now"]);

    // Without a context window nothing is snipped.
    let model = Model::new(vec![text("done")]);
    let deps = RunDeps {
        model: &model,
        tools: &Tools,
        specs: &specs,
        hook: &NoopHook,
        checkpoints: None,
        injections: None,
    };
    run(
        deps,
        RunSpec {
            messages,
            ..spec(5)
        },
    )
    .await;
    assert_eq!(model.requests()[0].messages.len(), 4);
}

#[tokio::test]
async fn a_snip_without_a_user_message_in_budget_keeps_the_turn_from_its_user_message() {
    let call = |id: &str| {
        let mut response = calls(&["fetch"]);
        response.tool_calls[0].id = id.into();
        response
    };
    let model = Model::new(vec![call("f1"), call("f2"), text("done")]);
    // `fetch` results are not compactable: only the snip can shorten the request.
    let specs = Offered::new(vec![tool_spec("fetch")]);
    let deps = RunDeps {
        model: &model,
        tools: &Big,
        specs: &specs,
        hook: &NoopHook,
        checkpoints: None,
        injections: None,
    };
    let r = run(
        deps,
        RunSpec {
            messages: vec![
                json!({"role": "system", "content": "sys"}),
                json!({"role": "user", "content": "earlier"}),
                json!({"role": "assistant", "content": "sure"}),
                json!({"role": "user", "content": "go"}),
            ],
            context_window_tokens: 2124,
            context_block_limit: None,
            ..spec(5)
        },
    )
    .await;
    assert_eq!(r.content, "done");
    let reqs = model.requests();
    // One result (about 770 tokens) fits the 1,000-token budget: nothing is snipped.
    assert_eq!(
        outline(&reqs[1]),
        [
            "system: sys",
            "user: earlier",
            "assistant: sure",
            "user: go",
            "assistant: call fetch",
            "tool: f1:xxxxxxxxx…",
        ]
    );
    // Two do not: the newest messages that fit hold no user message, so the request restarts
    // at the turn's own user message (over budget, as upstream) and drops what came before.
    assert_eq!(
        outline(&reqs[2]),
        [
            "system: sys",
            "user: go",
            "assistant: call fetch",
            "tool: f1:xxxxxxxxx…",
            "assistant: call fetch",
            "tool: f2:xxxxxxxxx…",
        ]
    );
    assert_eq!(
        r.new_messages.len(),
        5,
        "the session keeps every message of the turn"
    );
}

#[tokio::test]
async fn a_user_message_over_the_whole_budget_is_answered_with_the_turn_error_and_never_sent() {
    let model = Model::new(vec![text("never")]);
    let specs = Offered::new(Vec::new());
    let deps = RunDeps {
        model: &model,
        tools: &Tools,
        specs: &specs,
        hook: &NoopHook,
        checkpoints: None,
        injections: None,
    };
    let r = run(
        deps,
        RunSpec {
            messages: vec![
                json!({"role": "system", "content": "sys"}),
                json!({"role": "user", "content": "你好🐈".repeat(2000)}),
            ],
            context_window_tokens: 2124,
            context_block_limit: None,
            ..spec(5)
        },
    )
    .await;
    assert!(model.requests().is_empty());
    // 0.3.5: `ContextWindowExceededError` escapes the runner; `TurnDelivery.fail` answers.
    assert_eq!(r.content, "Sorry, I encountered an error.");
    assert!(
        r.error.as_deref().is_some_and(|e| e.starts_with(
            "Model input still exceeds the local context budget after request fitting: "
        )),
        "{:?}",
        r.error
    );
    assert_eq!(r.stop_reason, StopReason::Error);
    assert!(r.new_messages.is_empty(), "{:?}", r.new_messages);
}

/// A caller asking the run to go on while its goal is active (the loop's `_goal_continue`):
/// up to `left` times.
struct GoOn(Mutex<u32>);

#[async_trait::async_trait]
impl Injections for GoOn {
    async fn drain(&self, _: usize) -> Vec<Value> {
        Vec::new()
    }

    async fn continuation(&self) -> Option<Value> {
        let mut left = self.0.lock().unwrap();
        (*left > 0).then(|| {
            *left -= 1;
            json!({"role": "user", "content": "继续 📚"})
        })
    }
}

#[tokio::test]
async fn a_continuation_keeps_the_run_going_after_an_answer_within_the_iteration_budget() {
    let specs = Offered::new(vec![tool_spec("exec")]);
    let go_on = GoOn(Mutex::new(1));
    let model = Model::new(vec![text("第一章 📖"), text("写完了 ✅")]);
    let deps = RunDeps {
        model: &model,
        tools: &Tools,
        specs: &specs,
        hook: &NoopHook,
        checkpoints: None,
        injections: Some(&go_on),
    };
    let r = run(deps, spec(10)).await;
    assert_eq!(r.content, "写完了 ✅");
    assert_eq!(r.injected, 0, "a continuation is no follow-up");
    let second = &model.requests()[1].messages;
    assert_eq!(
        second[second.len() - 1],
        json!({"role": "user", "content": "继续 📚"})
    );
    let roles: Vec<_> = r.new_messages.iter().map(|m| m["role"].clone()).collect();
    assert_eq!(
        roles,
        [json!("assistant"), json!("user"), json!("assistant")]
    );

    // Asked to go on forever, the run stops at its iteration budget.
    let forever = GoOn(Mutex::new(u32::MAX));
    let model = Model::new(vec![]);
    let deps = RunDeps {
        injections: Some(&forever),
        model: &model,
        ..deps
    };
    let r = run(deps, spec(3)).await;
    assert_eq!(r.stop_reason, StopReason::MaxIterations);
    assert_eq!(
        model.requests().len(),
        4,
        "3 iterations and the finalization"
    );
}

#[tokio::test]
async fn a_run_told_to_end_with_the_template_makes_no_finalization_request() {
    let model = Model::new(vec![calls(&["exec"]), calls(&["exec"]), text("unasked")]);
    let specs = Offered::new(vec![tool_spec("exec")]);
    let deps = RunDeps {
        model: &model,
        tools: &Tools,
        specs: &specs,
        hook: &NoopHook,
        checkpoints: None,
        injections: None,
    };
    let options = RunOptions {
        on_budget_exhausted: OnBudgetExhausted::Template,
    };
    let r = run_with(deps, spec(2), options).await;
    assert_eq!(r.stop_reason, StopReason::MaxIterations);
    assert_eq!(r.content, max_iterations_message(2));
    assert_eq!(model.requests().len(), 2, "no finalization request");
    assert_eq!(
        r.new_messages.last().unwrap(),
        &json!({"role": "assistant", "content": max_iterations_message(2)})
    );
}

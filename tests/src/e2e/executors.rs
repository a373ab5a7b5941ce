//! Two tool executors serving one runner while one is SIGKILLed mid-call: the liveness
//! protocol notices within seconds; a read-only call (`web_fetch` of a slow local page) is
//! retried on the surviving executor, a side-effecting one (`exec`) comes back as a clear
//! error, and a load of concurrent turns loses none.

use std::collections::HashMap;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::response::Html;
use serde_json::json;

use super::TURN;
use crate::harness::{Fleet, bin_path, wait_until};
use crate::scripted_llm::Reply;

/// How long the slow page takes to answer.
const SLOW: Duration = Duration::from_secs(3);
/// How long the pages of the load test take (longer: six turns must start meanwhile).
const SLOWER: Duration = Duration::from_secs(5);
/// The tool-call deadline of these fleets; every turn must finish far below it.
const TOOL_DEADLINE_SECS: u64 = 60;
/// The runner's retry hint (`nanobot_core::tools::RETRY_HINT`; this crate does not depend
/// on nanobot-core).
const RETRY_HINT: &str = "\n\n[Analyze the error above and try a different approach.]";
/// What the log line of a finished call says.
const FINISHED: &str = "tool call finished";
/// What the log line of a starting call says (`services/tools/src/handlers/call.rs`).
const STARTED: &str = "tool call started";

/// A local page that answers after a delay, counting hits per page.
struct SlowSite {
    base: String,
    hits: Hits,
}

impl SlowSite {
    async fn start(delay: Duration) -> Self {
        let hits = Arc::new(Mutex::new(HashMap::new()));
        let app = axum::Router::new()
            .route("/page/{name}", axum::routing::get(page))
            .with_state((hits.clone(), delay));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { base, hits }
    }

    fn url(&self, name: &str) -> String {
        format!("{}/page/{name}", self.base)
    }

    fn hits(&self, name: &str) -> usize {
        self.hits.lock().unwrap().get(name).copied().unwrap_or(0)
    }
}

type Hits = Arc<Mutex<HashMap<String, usize>>>;

async fn page(
    State((hits, delay)): State<(Hits, Duration)>,
    Path(name): Path<String>,
) -> Html<String> {
    *hits.lock().unwrap().entry(name.clone()).or_default() += 1;
    tokio::time::sleep(delay).await;
    Html(format!(
        "<html><head><title>{name}</title></head><body><p>payload of {name}</p></body></html>"
    ))
}

/// Starts agent + two executors allowed to fetch from loopback.
async fn fleet_with_two_executors() -> Fleet {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({
            "bus": {"toolTimeoutSecs": TOOL_DEADLINE_SECS},
            "tools": {"ssrfWhitelist": ["127.0.0.1/32"]},
        }))
        .start()
        .await
        .unwrap();
    fleet.add_replica("tools").await.unwrap();
    fleet
}

/// Runs `nanobot agent -m text --session key` as a task of its own, so the test can kill
/// executors while the turn runs.
fn ask_in_background(fleet: &Fleet, text: &str, session: &str) -> tokio::task::JoinHandle<Output> {
    let mut command = tokio::process::Command::new(bin_path("nanobot").unwrap());
    command
        .arg("--config")
        .arg(fleet.config_path())
        .args(["agent", "-m", text, "--session", session])
        .env("NANOBOT_CONFIG", fleet.config_path())
        .kill_on_drop(true);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("NANOBOT_") {
            command.env_remove(key);
        }
    }
    tokio::spawn(async move {
        tokio::time::timeout(TURN * 2, command.output())
            .await
            .expect("the turn finishes")
            .expect("run nanobot agent")
    })
}

/// Returns how many calls of `tool` each executor has started, by their logs.
fn started_calls(fleet: &mut Fleet, tool: &str) -> Vec<usize> {
    log_count(fleet, STARTED, tool)
}

/// Returns how many log lines of each executor say `what` about `tool`.
fn log_count(fleet: &mut Fleet, what: &str, tool: &str) -> Vec<usize> {
    fleet
        .replicas("tools")
        .iter()
        .map(|p| {
            p.logs()
                .lines()
                .filter(|l| l.contains(what) && l.contains(tool))
                .count()
        })
        .collect()
}

/// Waits until an executor starts a call of `tool` and SIGKILLs it; returns its index.
async fn kill_the_executor_running(fleet: &mut Fleet, tool: &str) -> usize {
    let mut taker = None;
    let found = wait_until(
        || {
            let counts = started_calls(fleet, tool);
            taker = counts.iter().position(|c| *c > 0);
            std::future::ready(taker.is_some())
        },
        TURN,
    )
    .await;
    found.unwrap_or_else(|e| panic!("no executor started {tool}: {e}"));
    let index = taker.expect("found above");
    fleet.service_at("tools", index).sigkill().unwrap();
    index
}

fn reply_text(out: &Output) -> String {
    assert!(
        out.status.success(),
        "nanobot agent failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Returns the content of the tool rows the model saw for `session`'s user text `needle`.
fn tool_results_seen(fleet: &Fleet, needle: &str) -> Vec<String> {
    let requests = fleet.llm.requests();
    let last = requests
        .iter()
        .rev()
        .find(|r| r.last_user_text().is_some_and(|t| t.contains(needle)))
        .expect("the model was asked");
    last.messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn read_only_call_is_retried_when_its_executor_is_killed_mid_call() {
    let mut fleet = fleet_with_two_executors().await;
    let site = SlowSite::start(SLOW).await;
    fleet.llm.when_last_user_contains_seq(
        "fetch the slow page",
        vec![
            Reply::tool_calls([("web_fetch", json!({"url": site.url("one")}))]),
            Reply::text("Fetched it."),
        ],
    );
    let started = Instant::now();
    let turn = ask_in_background(&fleet, "fetch the slow page", "cli:retry");
    // Mid-call: the executor's request reached the page, which has not answered yet.
    let fetching = wait_until(|| std::future::ready(site.hits("one") == 1), TURN).await;
    fetching.expect("an executor fetches the page");
    let killed = kill_the_executor_running(&mut fleet, "web_fetch").await;
    let out = turn.await.unwrap();
    let took = started.elapsed();

    assert_eq!(reply_text(&out), "Fetched it.");
    let results = tool_results_seen(&fleet, "fetch the slow page");
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].contains("payload of one"), "{}", results[0]);
    assert_eq!(site.hits("one"), 2, "fetched once per executor");
    let survivor = 1 - killed;
    assert_eq!(started_calls(&mut fleet, "web_fetch")[survivor], 1);
    // Two slow fetches plus detection, far below the 60 s deadline.
    assert!(took < Duration::from_secs(20), "took {took:?}");
}

#[tokio::test]
async fn side_effecting_call_reports_its_killed_executor_without_rerunning() {
    let mut fleet = fleet_with_two_executors().await;
    fleet.llm.when_last_user_contains_seq(
        "run the slow script",
        vec![
            Reply::tool_calls([("exec", json!({"command": "sleep 4; echo finished"}))]),
            Reply::text("It may or may not have run."),
        ],
    );
    let started = Instant::now();
    let turn = ask_in_background(&fleet, "run the slow script", "cli:side");
    let killed = kill_the_executor_running(&mut fleet, "exec").await;
    let out = turn.await.unwrap();
    let took = started.elapsed();

    assert_eq!(reply_text(&out), "It may or may not have run.");
    let results = tool_results_seen(&fleet, "run the slow script");
    assert_eq!(
        results,
        [format!(
            "Error: the tool executor running 'exec' stopped before it finished; the call may \
             or may not have taken effect{}",
            RETRY_HINT
        )]
    );
    assert_eq!(
        started_calls(&mut fleet, "exec")[1 - killed],
        0,
        "never re-run on the survivor"
    );
    assert!(took < Duration::from_secs(15), "took {took:?}");
}

#[tokio::test]
async fn killing_one_of_two_executors_under_load_loses_no_turn() {
    let mut fleet = fleet_with_two_executors().await;
    let site = SlowSite::start(SLOWER).await;
    let turns = 6;
    let mut running = Vec::new();
    for i in 0..turns {
        let needle = format!("load page p{i}");
        fleet.llm.when_last_user_contains_seq(
            needle.clone(),
            vec![
                Reply::tool_calls([("web_fetch", json!({"url": site.url(&format!("p{i}"))}))]),
                Reply::text(format!("done p{i}")),
            ],
        );
        running.push(ask_in_background(&fleet, &needle, &format!("cli:load{i}")));
    }
    // Once every call runs (the pages answer after 5 s), kill the busier executor.
    let all_running = wait_until(
        || {
            let counts = started_calls(&mut fleet, "web_fetch");
            std::future::ready(counts.iter().sum::<usize>() >= turns)
        },
        TURN,
    )
    .await;
    all_running.expect("every turn calls web_fetch");
    let counts = started_calls(&mut fleet, "web_fetch");
    let victim = usize::from(counts[1] > counts[0]);
    fleet.service_at("tools", victim).sigkill().unwrap();
    let started_there = started_calls(&mut fleet, "web_fetch")[victim];
    let in_flight = started_there - log_count(&mut fleet, FINISHED, "web_fetch")[victim];
    assert!(in_flight >= 1, "calls were running on the killed executor");

    let started = Instant::now();
    for (i, turn) in running.into_iter().enumerate() {
        let out = turn.await.unwrap();
        assert_eq!(reply_text(&out), format!("done p{i}"));
        let results = tool_results_seen(&fleet, &format!("load page p{i}"));
        assert!(
            results.len() == 1 && results[0].contains(&format!("payload of p{i}")),
            "turn {i}: {results:?}"
        );
    }
    let fetched: usize = (0..turns).map(|i| site.hits(&format!("p{i}"))).sum();
    assert!(
        (turns..=turns + in_flight).contains(&fetched),
        "each lost call fetched again at most once: {fetched}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}

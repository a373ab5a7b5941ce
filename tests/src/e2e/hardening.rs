//! Hostile input from clients and from the model, end to end: huge replies, oversized ids,
//! attachments naming devices or host files, replies with thousands of tool calls. None may
//! crash a role, wedge a session or fail other sessions' requests.

use futures::future::join_all;
use prost::Message as _;
use serde_json::{Value, json};

use std::time::Duration;

use super::{TURN, wait_for_replies};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::{Gate, Reply};

/// Sends one non-streamed completion in `session` and returns the status and the body.
async fn complete(
    http: &reqwest::Client,
    fleet: &Fleet,
    session: &str,
    text: &str,
) -> (reqwest::StatusCode, Value) {
    let response = http
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .json(&json!({"session_id": session, "messages": [{"role": "user", "content": text}]}))
        .timeout(TURN * 2)
        .send()
        .await
        .expect("send a completion");
    let status = response.status();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

fn content(body: &Value) -> &str {
    body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test]
async fn a_five_megabyte_reply_reaches_the_client_and_the_next_message_of_its_session_is_answered()
{
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .start()
        .await
        .unwrap();
    // Five times the broker's default message limit.
    let big = "0123456789abcdef".repeat(5 * 1024 * 1024 / 16);
    fleet
        .llm
        .when_last_user_contains("huge please", Reply::text(big.clone()));
    fleet
        .llm
        .when_last_user_contains("and now?", Reply::text("after the big one"));
    let http = reqwest::Client::new();

    let (status, body) = complete(&http, &fleet, "big", "huge please").await;
    assert_eq!(status, 200, "{}", fleet.service("agent").log_tail(30));
    assert_eq!(content(&body).len(), big.len());
    assert!(content(&body) == big, "the text arrives unchanged");

    let (status, body) = complete(&http, &fleet, "big", "and now?").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(content(&body), "after the big one");
    assert!(
        fleet
            .service("agent")
            .logs()
            .contains("large reply stored in the payload store"),
        "the reply went through the payload store"
    );
}

#[tokio::test]
async fn forty_oversized_session_ids_beside_forty_ordinary_requests_all_succeed() {
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let requests = (0..80).map(|i| {
        let session = if i % 2 == 0 {
            format!("{i}-{}", "s".repeat(5_000))
        } else {
            format!("ordinary-{i}")
        };
        let (http, fleet) = (&http, &fleet);
        async move {
            let (status, body) = complete(http, fleet, &session, &format!("hello {i}")).await;
            (i, status, body)
        }
    });
    let results = join_all(requests).await;
    let failed: Vec<_> = results
        .iter()
        .filter(|(i, status, body)| *status != 200 || content(body) != format!("echo: hello {i}"))
        .collect();
    assert!(failed.is_empty(), "{} failed: {failed:#?}", failed.len());
    let long = format!("api:0-{}", "s".repeat(5_000));
    let rows = super::session_rows(&fleet, "default", &long).await;
    assert_eq!(rows.len(), 2, "the long id is the session key, unchanged");
}

#[tokio::test]
async fn attachments_naming_a_device_or_a_host_file_are_refused_and_the_turn_is_answered() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    let js = async_nats::jetstream::new(fleet.nats_client().await.unwrap());
    let msg = nanobot_proto::InboundMessage {
        id: "zero-1".into(),
        bot: "default".into(),
        channel: "cli".into(),
        chat_id: "direct".into(),
        content: "what is in these?".into(),
        session_key: "cli:zero".into(),
        media: vec!["/dev/zero".into(), "/etc/passwd".into()],
        ..Default::default()
    };
    js.publish(msg.subject(), msg.encode_to_vec().into())
        .await
        .unwrap()
        .await
        .unwrap();
    let replies = wait_for_replies(&fleet, "zero-1").await;
    assert_eq!(replies.len(), 1);
    let sent = fleet.llm.requests().last().unwrap().body.to_string();
    assert!(
        sent.contains("[attachment not read: /dev/zero (outside the workspace)]")
            && sent.contains("[attachment not read: /etc/passwd (outside the workspace)]"),
        "{sent}"
    );
    assert!(!sent.contains("root:"), "no host file reaches the model");
    assert!(fleet.service("agent").is_running(), "the agent is alive");
}

#[tokio::test]
async fn a_reply_with_twenty_thousand_tool_calls_runs_a_capped_number_and_other_sessions_are_served()
 {
    // The product's lease time, not the harness's 2 s: a 20,000-call reply costs a debug-built
    // runner seconds of CPU on a loaded machine, and a lease lost meanwhile makes the turn
    // resume (correctly) with one model call more than this script has. This test is about
    // the caps and fairness; takeovers have their own tests.
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"runner": {"sessionLeaseSecs": 10}}))
        .start()
        .await
        .unwrap();
    std::fs::write(fleet.workspace().join("note.txt"), "a note").unwrap();
    let flood = (0..20_000).map(|_| ("read_file", json!({"path": "note.txt"})));
    fleet.llm.when_last_user_contains_seq(
        "flood",
        vec![Reply::tool_calls(flood), Reply::text("flood done")],
    );
    fleet.llm.when_last_user_contains_seq(
        "one file",
        vec![
            Reply::tool_calls([("read_file", json!({"path": "note.txt"}))]),
            Reply::text("read it"),
        ],
    );
    let http = reqwest::Client::new();
    let (flood, other) = tokio::join!(complete(&http, &fleet, "flood", "flood"), async {
        fleet
            .llm
            .wait_for_requests(1, TURN)
            .await
            .expect("the flood reached the model");
        complete(&http, &fleet, "other", "one file").await
    });
    assert_eq!(other.0, 200, "{}", other.1);
    assert_eq!(content(&other.1), "read it");
    assert_eq!(flood.0, 200, "{}", flood.1);
    // 20,000 results do not fit the context window even after the snip (the turn's own user
    // message starts the request): as 0.3.5 (`ContextWindowExceededError`), that request is
    // not sent and the turn answers its error; the results stay in the session.
    assert_eq!(content(&flood.1), "Sorry, I encountered an error.");
    let rows = super::session_rows(&fleet, "default", "api:flood").await;
    let results: Vec<&Value> = rows.iter().filter(|r| r["role"] == "tool").collect();
    assert_eq!(results.len(), 20_000, "every call has a result");
    // A call that ran read the note, or (the same unchanged file again) got upstream's
    // "unchanged since last read" answer.
    let ran = results
        .iter()
        .filter(|r| {
            r["content"].as_str().is_some_and(|c| {
                c.contains("a note") || c.starts_with("[File unchanged since last read")
            })
        })
        .count();
    assert_eq!(ran, 64, "only the capped number ran");
    let refused = results[64]["content"].as_str().unwrap_or_default();
    assert!(
        refused.starts_with("Error: too many tool calls in one reply (20000)"),
        "{refused}"
    );
}

/// Reads from `stream` until the peer closes it (or resets it); returns what arrived.
async fn read_until_closed(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&seen).into_owned(),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn clients_trickling_headers_or_bodies_are_cut_off_and_others_are_still_served() {
    use tokio::io::AsyncWriteExt as _;
    let fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"api": {"readTimeoutSecs": 2}}))
        .start()
        .await
        .unwrap();
    let addr = fleet
        .api_base()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();

    // Headers that never end, and a body that never completes (it announces 100 bytes).
    let mut slow_headers = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow_headers
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut slow_body = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow_body
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
              content-length: 100\r\n\r\n{\"messages\":",
        )
        .await
        .unwrap();

    // Meanwhile an ordinary request is answered.
    let http = reqwest::Client::new();
    let (status, body) = complete(&http, &fleet, "ordinary", "hello").await;
    assert_eq!(status, 200, "{body}");

    let cut = tokio::time::timeout(TURN, read_until_closed(&mut slow_headers))
        .await
        .expect("a client trickling headers is disconnected");
    assert!(!cut.contains(" 200 "), "{cut}");
    let answered = tokio::time::timeout(TURN, read_until_closed(&mut slow_body))
        .await
        .expect("a client trickling its body gets an answer");
    assert!(answered.starts_with("HTTP/1.1 408"), "{answered}");
    assert!(
        answered.contains("Request body not received within 2s"),
        "{answered}"
    );
}

#[tokio::test]
async fn a_message_that_kills_its_runner_every_time_is_answered_with_an_error_and_its_session_goes_on()
 {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"api": {"timeout": 600}}))
        .start()
        .await
        .unwrap();
    // The model never answers this one: each attempt is still running when its runner dies.
    let never = Gate::new();
    fleet
        .llm
        .when_last_user_contains("deadly", Reply::text("unreachable").held_by(&never));
    fleet
        .llm
        .when_last_user_contains("still there?", Reply::text("yes, still here"));
    let http = reqwest::Client::new();
    let request = http
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .json(&json!({"session_id": "poison", "messages": [{"role": "user", "content": "deadly"}]}))
        .timeout(Duration::from_secs(600))
        .send();
    let answer = tokio::spawn(request);

    for attempt in 1..=5 {
        let reached_model = || std::future::ready(fleet.llm.request_count() >= attempt);
        wait_until(reached_model, Duration::from_secs(120))
            .await
            .unwrap_or_else(|_| panic!("attempt {attempt} reached the model"));
        fleet.service("agent").restart().unwrap();
    }

    let response = tokio::time::timeout(Duration::from_secs(120), answer)
        .await
        .expect("the poison message is answered")
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 500);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["message"], "Sorry, I encountered an error.");
    assert_eq!(
        fleet.llm.request_count(),
        5,
        "no sixth attempt ran the turn"
    );

    let (status, body) = complete(&http, &fleet, "poison", "still there?").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(content(&body), "yes, still here");
}

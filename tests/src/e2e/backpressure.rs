//! Backpressure and dependencies failing: a slow model makes work wait in JetStream, not in
//! runner memory; while Redis is down, inbound work waits in JetStream and is answered once
//! Redis is back.

use std::time::Duration;

use serde_json::json;

use nanobot_proto::subjects;

use super::runner::publish_inbound;
use crate::e2e::{TURN, outbound_messages, replies_to, wait_for_replies};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;

/// Messages the agent's durable consumer has not handed out yet.
async fn pending_in_jetstream(fleet: &Fleet) -> u64 {
    let js = async_nats::jetstream::new(fleet.nats_client().await.expect("nats"));
    let mut consumer: async_nats::jetstream::consumer::PullConsumer = js
        .get_consumer_from_stream(subjects::INBOUND_CONSUMER, subjects::INBOUND_STREAM)
        .await
        .expect("consumer");
    consumer.info().await.expect("consumer info").num_pending
}

/// The agent's own figures from `nanobot status` (`detail_json`).
async fn agent_detail(fleet: &Fleet) -> serde_json::Value {
    let statuses = fleet.statuses().await.expect("statuses");
    let agent = statuses
        .iter()
        .find(|s| s.role == "agent")
        .expect("an agent answers");
    serde_json::from_str(&agent.detail_json).expect("detail json")
}

#[tokio::test]
async fn a_slow_model_makes_work_wait_in_jetstream_not_in_the_runner() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({"runner": {"maxConcurrentTurns": 2, "maxWaitingMessages": 3}}))
        .start()
        .await
        .unwrap();
    fleet
        .llm
        .set_fallback(Reply::echo().with_delay(Duration::from_secs(2)));
    for i in 0..12 {
        publish_inbound(&fleet, &format!("bp-{i}"), &format!("cli:bp{i}"), "slow").await;
    }
    wait_until(
        || async { agent_detail(&fleet).await["turnsRunning"] == 2 },
        TURN,
    )
    .await
    .expect("two turns run");
    let detail = agent_detail(&fleet).await;
    assert_eq!(detail["turnsRunning"], 2, "{detail}");
    assert!(
        detail["messagesWaiting"].as_u64().unwrap() <= 1,
        "the runner holds at most 3 messages: {detail}"
    );
    assert!(
        pending_in_jetstream(&fleet).await >= 9,
        "the rest waits in JetStream"
    );
    let all = || async {
        let out = outbound_messages(&fleet).await;
        (0..12).all(|i| replies_to(&out, &format!("bp-{i}")).len() == 1)
    };
    wait_until(all, Duration::from_secs(60))
        .await
        .expect("every message answered once");
    assert!(fleet.service("agent").is_running());
}

#[tokio::test]
async fn while_redis_is_down_inbound_waits_in_jetstream_and_is_answered_after() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet.llm.set_fallback(Reply::echo());
    fleet.redis.kill().unwrap();
    publish_inbound(&fleet, "rd-1", "cli:redis-down", "are you there?").await;
    // The runner took the message and failed on the dead store at least once.
    let agent = fleet.service("agent");
    wait_until(
        || async {
            agent
                .logs()
                .lines()
                .any(|l| l.contains("WARN") && l.contains("rd-1"))
        },
        Duration::from_secs(30),
    )
    .await
    .unwrap_or_else(|_| panic!("the runner tried rd-1: {}", agent.log_tail(30)));
    assert!(
        replies_to(&outbound_messages(&fleet).await, "rd-1").is_empty(),
        "no reply (and no error reply) while the session store is down"
    );
    assert!(
        fleet.service("agent").is_running(),
        "the runner survives a dead Redis"
    );
    fleet.redis.restart().await.unwrap();
    let replies = wait_for_replies(&fleet, "rd-1").await;
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].content, "echo: are you there?");
}

#[tokio::test]
async fn an_older_inbound_stream_is_recreated_once_consumed_and_refused_while_work_is_left() {
    use async_nats::jetstream::{consumer::pull, stream};
    use futures::StreamExt as _;
    let nats = crate::harness::Nats::start().await.unwrap();
    let js = async_nats::jetstream::new(nats.client().await.unwrap());
    let old = stream::Config {
        name: subjects::INBOUND_STREAM.into(),
        subjects: vec![subjects::INBOUND_ALL.into()],
        ..Default::default()
    };
    let old_stream = js.create_stream(old).await.unwrap();
    js.publish(subjects::inbound("b", "cli", "cli:x"), "old".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let err = nanobot_runtime::bus::init_streams(&js, 1)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("nats stream rm"), "{err}");

    let consumer = old_stream
        .create_consumer(pull::Config {
            durable_name: Some("old-runners".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut batch = consumer.fetch().max_messages(1).messages().await.unwrap();
    batch
        .next()
        .await
        .unwrap()
        .unwrap()
        .double_ack()
        .await
        .unwrap();
    nanobot_runtime::bus::init_streams(&js, 1).await.unwrap();
    let mut recreated = js.get_stream(subjects::INBOUND_STREAM).await.unwrap();
    let info = recreated.info().await.unwrap();
    assert_eq!(info.config.retention, stream::RetentionPolicy::WorkQueue);
    assert!(info.config.allow_direct);
}

//! The worker loop's pieces from `nanobot_runtime::bus::work` against a real `nats-server`: one
//! message pulled at a time, and a message worked on past its ack wait kept from redelivery.

use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::pull, stream};
use tokio_util::sync::CancellationToken;

use nanobot_runtime::bus::work;
use nanobot_runtime::testsuite;

const ACK_WAIT: Duration = Duration::from_secs(1);

async fn consumer(js: &jetstream::Context) -> jetstream::consumer::PullConsumer {
    let stream = js
        .create_stream(stream::Config {
            name: "WORK".into(),
            subjects: vec!["work.>".into()],
            ..Default::default()
        })
        .await
        .expect("stream");
    stream
        .create_consumer(pull::Config {
            durable_name: Some("workers".into()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: ACK_WAIT,
            ..Default::default()
        })
        .await
        .expect("consumer")
}

#[tokio::test]
async fn a_message_worked_on_past_its_ack_wait_is_not_redelivered_and_a_cancelled_pull_ends() {
    let server = testsuite::Nats::start().await.expect("nats-server");
    let js = jetstream::new(async_nats::connect(server.url()).await.expect("connect"));
    let consumer = consumer(&js).await;
    js.publish("work.job", "整理记忆 🧠".into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    let cancel = CancellationToken::new();
    let msg = work::pull_one(&consumer, &cancel, "test jobs")
        .await
        .expect("a message");
    assert_eq!(&msg.payload[..], "整理记忆 🧠".as_bytes());
    // Worked on for 2.5 ack waits while another worker pulls: it never sees the message again.
    let every = work::progress_every(ACK_WAIT);
    let slow = work::while_in_progress(&msg, every, tokio::time::sleep(ACK_WAIT * 5 / 2));
    let other = tokio::time::timeout(
        ACK_WAIT * 5 / 2,
        work::pull_one(&consumer, &cancel, "test jobs"),
    );
    let ((), redelivered) = tokio::join!(slow, other);
    assert!(redelivered.is_err(), "redelivered while in progress");
    msg.ack_with(AckKind::Ack).await.expect("ack");
    cancel.cancel();
    assert!(
        work::pull_one(&consumer, &cancel, "test jobs")
            .await
            .is_none()
    );
}

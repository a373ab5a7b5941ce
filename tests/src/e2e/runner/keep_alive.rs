//! The agent's keep-alive: while a turn runs, its message is acked as in progress every third
//! of the ack wait (`runner.redeliverAfterSecs`, 4 s in the suite), so a turn lasting several
//! ack waits is delivered once and answered once.

use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull};
use nanobot_proto::subjects;

use super::publish_inbound;
use crate::e2e::wait_for_replies;
use crate::harness::Fleet;
use crate::scripted_llm::Reply;

#[tokio::test]
async fn a_turn_longer_than_twice_the_ack_wait_is_delivered_once_and_answered_once() {
    let fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet
        .llm
        .push(Reply::text("慢慢来 🐢").with_delay(Duration::from_secs(9)));
    publish_inbound(&fleet, "ka-1", "cli:keep-alive", "长任务 ⏳").await;
    let replies = wait_for_replies(&fleet, "ka-1").await;
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0].content, "慢慢来 🐢");
    assert_eq!(fleet.llm.request_count(), 1);
    let js = jetstream::new(fleet.nats_client().await.unwrap());
    let stream = js.get_stream(subjects::INBOUND_STREAM).await.unwrap();
    let mut consumer = stream
        .get_consumer::<pull::Config>(subjects::INBOUND_CONSUMER)
        .await
        .unwrap();
    let info = consumer.info().await.unwrap().clone();
    assert_eq!(
        (info.delivered.consumer_sequence, info.num_redelivered),
        (1, 0),
        "the message was delivered again while its turn ran: {info:?}"
    );
}

//! The channel across gateway replicas: a client is connected to one replica, the reply is
//! delivered by whichever replica's consumer takes it, and a killed replica's client resumes
//! on another.

use serde_json::json;

use super::{WsClient, ws_fleet};
use crate::harness::{Fleet, free_port};
use crate::scripted_llm::{Gate, Reply};

/// Adds a second gateway replica serving the channel on its own port; returns the port.
pub(super) async fn second_replica(fleet: &mut Fleet) -> u16 {
    let port = free_port().unwrap();
    let env = port.to_string();
    fleet
        .add_replica_with(
            "gateway",
            &[("NANOBOT_CHANNELS__WEBSOCKET__PORT", env.as_str())],
        )
        .await
        .expect("second gateway replica");
    port
}

#[tokio::test]
async fn with_two_gateway_replicas_each_reply_reaches_each_connection_exactly_once() {
    let (mut fleet, port_a) = ws_fleet(json!({"streaming": false})).await;
    let port_b = second_replica(&mut fleet).await;
    let mut on_a = WsClient::connect(port_a, "alice").await;
    let mut on_b = WsClient::connect(port_b, "alice").await;
    on_b.send(json!({"type": "attach", "chat_id": "c1"})).await;
    on_b.until(|f| f["event"] == "attached").await;
    let ids = ["m1", "m2", "m3", "m4"];
    for id in ids {
        fleet.llm.push(Reply::text(format!("reply to {id}")));
        on_a.say("c1", id, &format!("message {id}")).await;
        on_a.final_for(id).await;
        on_b.final_for(id).await;
    }
    // One of the two replicas did not deliver any given reply, yet both connections got each
    // reply once; the other connection saw the user's messages, the sender did not.
    for id in ids {
        assert_eq!(
            on_a.replies(id, "final").len(),
            1,
            "{id} on a: {:#?}",
            on_a.frames
        );
        assert_eq!(
            on_b.replies(id, "final").len(),
            1,
            "{id} on b: {:#?}",
            on_b.frames
        );
        assert_eq!(
            on_a.replies(id, "final")[0]["text"],
            format!("reply to {id}")
        );
    }
    let seen_by = |client: &WsClient| {
        client
            .frames
            .iter()
            .filter(|f| f["event"] == "user_message")
            .count()
    };
    assert_eq!((seen_by(&on_a), seen_by(&on_b)), (0, ids.len()));
}

#[tokio::test]
async fn a_client_of_a_sigkilled_replica_resumes_on_another_and_gets_the_reply_once() {
    let (mut fleet, port_a) = ws_fleet(json!({"streaming": false})).await;
    let port_b = second_replica(&mut fleet).await;
    let gate = Gate::new();
    fleet
        .llm
        .push(Reply::text("survived the crash").held_by(&gate));
    let mut on_b = WsClient::connect(port_b, "alice").await;
    on_b.say("c1", "m1", "answer after the crash").await;
    let cursor = on_b.until(|f| f["event"] == "accepted").await["id"]
        .as_str()
        .unwrap()
        .to_string();
    fleet
        .service_at("gateway", 1)
        .sigkill()
        .expect("sigkill replica b");
    gate.open();

    let mut on_a = WsClient::connect(port_a, "alice").await;
    on_a.send(json!({"type": "attach", "chat_id": "c1", "after": cursor}))
        .await;
    assert_eq!(on_a.final_for("m1").await["text"], "survived the crash");
    // A later turn's reply comes after it, and the first one never again.
    fleet.llm.push(Reply::text("and the next one"));
    on_a.say("c1", "m2", "next").await;
    on_a.final_for("m2").await;
    assert_eq!(on_a.replies("m1", "final").len(), 1, "{:#?}", on_a.frames);
}

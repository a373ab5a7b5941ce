//! JetStream streams are created by one explicit, idempotent step (`nanobot bus init`, also run
//! by `nanobot up`); roles only check that they exist.

use std::time::Duration;

use futures::StreamExt as _;

use nanobot_proto::subjects;

use crate::harness::Fleet;

#[tokio::test]
async fn a_role_refuses_to_start_without_the_streams_and_bus_init_creates_them_idempotently() {
    let mut fleet = Fleet::builder().start().await.unwrap();
    let js = async_nats::jetstream::new(fleet.nats_client().await.unwrap());
    for name in [
        subjects::INBOUND_STREAM,
        subjects::OUTBOUND_STREAM,
        subjects::JOBS_STREAM,
    ] {
        js.delete_stream(name).await.unwrap();
    }
    js.delete_object_store(subjects::PAYLOADS_BUCKET)
        .await
        .unwrap();
    js.delete_key_value(subjects::BOTS_BUCKET).await.unwrap();

    fleet.spawn_role("cron").unwrap();
    let cron = fleet.service("cron");
    let status = cron
        .wait_exit(Duration::from_secs(20))
        .await
        .expect("the role exits instead of creating streams");
    assert!(!status.success());
    let log = cron.logs();
    assert!(
        log.contains("nanobot bus init"),
        "says how to fix it: {log}"
    );
    assert_eq!(
        js.stream_names().count().await,
        0,
        "a role never creates streams"
    );

    for _ in 0..2 {
        let out = fleet.cli(&["bus", "init"]).await.unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("streams ready"));
    }
    let mut names: Vec<String> = js
        .stream_names()
        .map(|n| n.unwrap())
        .collect::<Vec<_>>()
        .await;
    names.sort();
    assert_eq!(
        names,
        [
            // The bot registry (a KV bucket).
            &format!("KV_{}", subjects::BOTS_BUCKET),
            subjects::INBOUND_STREAM,
            subjects::JOBS_STREAM,
            subjects::OUTBOUND_STREAM,
            // The payload store of replies over the broker's message limit.
            &format!("OBJ_{}", subjects::PAYLOADS_BUCKET),
        ]
    );
    let mut inbound = js.get_stream(subjects::INBOUND_STREAM).await.unwrap();
    assert_eq!(inbound.info().await.unwrap().config.num_replicas, 1);

    fleet.service("cron").restart().unwrap();
    fleet
        .wait_ready()
        .await
        .expect("the role starts once the streams exist");
}

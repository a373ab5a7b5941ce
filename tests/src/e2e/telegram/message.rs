//! The `message` tool (issue 12 item 6): the agent sends to the current chat, with a workspace
//! file, or to another chat of the channel; a message to the current chat replaces the final
//! reply, as upstream.

use serde_json::json;

use super::{ALICE, telegram_fleet, wait_shown};
use crate::scripted_llm::Reply;
use crate::telegram_fake::{Incoming, TgUser};

const BOB: i64 = 77;

#[tokio::test]
async fn the_message_tool_sends_to_this_chat_with_a_file_or_to_another_chat_and_no_reply_is_doubled()
 {
    let (fleet, fake, bot) =
        telegram_fleet(json!({"allowFrom": [ALICE.to_string(), BOB.to_string()]})).await;
    std::fs::write(
        fleet.workspace().join("chart.png"),
        b"\x89PNG\r\n\x1a\nnot really",
    )
    .unwrap();
    fleet.llm.push(Reply::tool_calls([
        (
            "message",
            json!({"content": "Here is the chart", "media": ["chart.png"]}),
        ),
        (
            "message",
            json!({"content": "Alice says hi", "chat_id": BOB.to_string()}),
        ),
        (
            "message",
            json!({"content": "secret", "media": ["/etc/passwd"]}),
        ),
    ]));
    fleet.llm.push(Reply::text("Sent you the chart."));
    bot.inject(Incoming::text_from(
        &TgUser::new(ALICE, "alice"),
        "send me the chart",
    ));

    wait_shown(&fake, &bot, ALICE, "Here is the chart").await;
    wait_shown(&fake, &bot, BOB, "Alice says hi").await;
    let photo = bot
        .wait_for_call("sendPhoto", |c| c.chat_id() == Some(ALICE))
        .await
        .unwrap();
    assert!(photo.is_ok());
    // The turn ends (its rows are saved) without sending its final text.
    let rows = || async {
        super::super::session_rows(&fleet, "default", &format!("telegram:{ALICE}"))
            .await
            .iter()
            .any(|r| r["content"] == "Sent you the chart.")
    };
    crate::harness::wait_until(rows, super::super::TURN)
        .await
        .unwrap();
    let results = fleet.llm.requests()[1].body.to_string();
    assert!(
        results.contains("Message sent to telegram:42 with 1 attachments"),
        "{results}"
    );
    assert!(results.contains("Message sent to telegram:77"), "{results}");
    assert!(
        results.contains("Media file must be a file inside the workspace: /etc/passwd"),
        "{results}"
    );
    let shown: Vec<_> = bot
        .bot_messages(ALICE)
        .into_iter()
        .filter_map(|m| m.text)
        .collect();
    assert!(
        !shown.iter().any(|t| t.contains("Sent you the chart")),
        "{shown:?}"
    );
    assert!(!shown.iter().any(|t| t.contains("secret")), "{shown:?}");
}

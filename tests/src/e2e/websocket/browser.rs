//! The web chat page in a real headless browser: typed into, sent, the streamed Markdown
//! answer rendered safely, and the conversation still there after a reload.

use std::time::Duration;

use serde_json::json;

use super::cdp::Page;
use super::{TOKEN, ws_fleet};
use crate::e2e::TURN;
use crate::scripted_llm::Reply;

#[tokio::test]
async fn the_web_chat_streams_a_safe_markdown_answer_and_keeps_the_conversation_across_a_reload() {
    let (fleet, port) = ws_fleet(json!({})).await;
    let answer = "Hello **there**, see `x < y` and <img src=x onerror=alert(1)>\n\n- one\n- two";
    fleet
        .llm
        .push(Reply::text(answer).with_stream_pace(Duration::from_millis(60)));
    let mut page = Page::open(&format!("http://127.0.0.1:{port}/#token={TOKEN}"))
        .await
        .expect("open the web chat");
    page.wait_for(
        "document.getElementById('status').textContent === 'connected'",
        TURN,
    )
    .await
    .unwrap();
    assert_eq!(
        page.eval("location.hash").await.unwrap(),
        "",
        "the token leaves the address bar"
    );

    page.type_into("#input", "hi from the browser")
        .await
        .unwrap();
    page.click("#send").await.unwrap();
    let rendered = "(() => { const m = document.querySelector('.msg.assistant:not(.streaming)'); \
                    return !!m && m.querySelector('strong')?.textContent === 'there'; })()";
    page.wait_for(rendered, TURN).await.unwrap();

    let shown = page
        .eval(
            "(() => { const m = document.querySelector('.msg.assistant'); return { \
               streamed: m.dataset.streamed === 'true', code: m.querySelector('code')?.textContent, \
               items: m.querySelectorAll('li').length, imgs: document.querySelectorAll('img').length, \
               text: m.textContent, user: document.querySelector('.msg.user')?.textContent }; })()",
        )
        .await
        .unwrap();
    assert_eq!(
        shown["streamed"], true,
        "deltas were shown before the final: {shown}"
    );
    assert_eq!(shown["code"], "x < y", "{shown}");
    assert_eq!(shown["items"], 2, "{shown}");
    assert_eq!(
        shown["imgs"], 0,
        "model HTML is text, never markup: {shown}"
    );
    assert!(
        shown["text"]
            .as_str()
            .unwrap()
            .contains("<img src=x onerror=alert(1)>"),
        "{shown}"
    );
    assert_eq!(shown["user"], "hi from the browser");

    page.reload().await.unwrap();
    let restored = "(() => { const u = document.querySelector('.msg.user'); \
                    const a = document.querySelector('.msg.assistant strong'); \
                    return document.getElementById('status').textContent === 'connected' \
                      && u?.textContent === 'hi from the browser' && a?.textContent === 'there' \
                      && document.querySelectorAll('.msg.user').length === 1 \
                      && document.querySelectorAll('.msg.assistant').length === 1; })()";
    page.wait_for(restored, TURN).await.unwrap();
    assert_eq!(
        fleet.llm.request_count(),
        1,
        "the reload asked the model nothing"
    );
    page.close().await;
}

//! Telegram: Markdown → HTML (`render::telegram::markdown_to_html`, upstream's
//! `_markdown_to_telegram_html`) and the streaming preview (`strip_markdown`, upstream's
//! `_strip_md_block`), against `telegram_html.json`: upstream's own tests from
//! `nanobot/channels/telegram/tests/test_telegram_channel.py`, then a corpus of model replies.

use serde_json::Value;

use nanobot_gateway::render::telegram::{markdown_to_html, strip_markdown};

use crate::harness::{self, Case};

const TABLE: &str = include_str!("telegram_html.json");

fn call(case: &Case) -> Result<Value, String> {
    match case.function.as_str() {
        "markdown_to_html" => Ok(markdown_to_html(case.input_str()).into()),
        "strip_markdown" => Ok(strip_markdown(case.input_str()).into()),
        other => Err(format!("no Rust function for {other}")),
    }
}

#[test]
fn replies_render_and_preview_exactly_as_0_3_5() {
    harness::check(TABLE, call);
}

#[test]
fn the_table_holds_upstreams_tests_and_a_corpus_of_sixty_replies() {
    let table = harness::parse(TABLE);
    let corpus = table
        .cases
        .iter()
        .filter(|case| case.source == harness::CORPUS_SOURCE && case.function == "markdown_to_html")
        .count();
    let upstream = table
        .cases
        .iter()
        .filter(|case| case.source.starts_with(harness::UPSTREAM_PREFIX))
        .count();
    assert!(corpus >= 60, "{corpus} corpus replies");
    assert!(upstream >= 10, "{upstream} upstream cases");
}

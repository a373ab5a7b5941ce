//! Reasoning tags (`nanobot_core::provider::strip_think`) against 0.3.5's `extract_think` and
//! `strip_think` (`nanobot/utils/helpers.py`, through `adapters_reasoning.py`), in
//! `reasoning.json`: closed blocks of each tag, nesting, unclosed blocks at the start and
//! mid-text, malformed opening tags run into CJK and emoji, self-closing markers, orphan
//! closing tags, channel markers and partial tags at the edges (also before a final newline,
//! where Python's `$` matches), and the reasoning text joined from closed blocks.

use serde_json::{Value, json};

use nanobot_core::provider::strip_think;

use crate::harness::{self, Case};

const TABLE: &str = include_str!("reasoning.json");

fn call(case: &Case) -> Result<Value, String> {
    let (cleaned, thinking) = strip_think(case.input_str());
    match case.function.as_str() {
        "extract_think" => Ok(json!([thinking, cleaned])),
        "strip_think" => Ok(json!(cleaned)),
        other => Err(format!("no Rust function for {other}")),
    }
}

#[test]
fn replies_lose_their_reasoning_tags_exactly_as_0_3_5() {
    harness::check(TABLE, call);
}

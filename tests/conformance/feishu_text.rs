//! Feishu: the message type a reply goes as (`channels::feishu::format::format_of`, upstream's
//! `_detect_msg_format`), its post body (`post_of`, `_markdown_to_post`), the elements of its
//! cards (`card_elements` + `by_table_limit`, `_build_card_elements` +
//! `_split_elements_by_table_limit`) and the tool-hint card (`tool_hint`,
//! `_format_tool_hint_delta`), against `feishu_text.json`: the corpus of `telegram_html.json`
//! and Feishu's own cases (tables, headings, links, CJK, emoji, RTL).

use serde_json::Value;

use nanobot_gateway::channels::feishu::format::{
    by_table_limit, card_elements, format_of, post_of, tool_hint,
};

use crate::harness::{self, Case};

const TABLE: &str = include_str!("feishu_text.json");

fn call(case: &Case) -> Result<Value, String> {
    let text = case.input_str();
    match case.function.as_str() {
        "format" => Ok(format_of(text).into()),
        "post" => Ok(post_of(text)),
        "cards" => Ok(by_table_limit(card_elements(text)).into()),
        "tool_hint" => Ok(tool_hint(text.trim(), "🔧").into()),
        other => Err(format!("no Rust function for {other}")),
    }
}

#[test]
fn replies_take_the_type_post_and_cards_0_3_5_gives_them() {
    harness::check(TABLE, call);
}

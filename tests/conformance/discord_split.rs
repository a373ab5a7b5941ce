//! Discord: a reply split into messages of at most 2,000 characters
//! (`render::message::split_message`, upstream's `split_message` in `nanobot/utils/helpers.py`,
//! which its Discord channel calls with `MAX_MESSAGE_LEN`), against `discord_split.json`: long
//! CJK, RTL, emoji, indented, CRLF and fenced-code replies at small limits.
//!
//! Where 0.3.5 cuts inside an emoji family the case is marked
//! `"deliberate": "cuts between clusters"`: ours cut between grapheme clusters and lose no text.

use serde_json::Value;
use unicode_segmentation::UnicodeSegmentation as _;

use nanobot_gateway::render::measure::Limit;
use nanobot_gateway::render::message::split_message;

use crate::harness::{self, Case};

const TABLE: &str = include_str!("discord_split.json");

fn split(text: &str, limit: usize) -> Vec<String> {
    split_message(text, Limit::code_points(limit), |_, cut| cut)
}

fn call(case: &Case) -> Result<Value, String> {
    match case.function.as_str() {
        "split" => {
            let (text, limit) = case.text_and_limit();
            Ok(split(text, limit).into())
        }
        other => Err(format!("no Rust function for {other}")),
    }
}

#[test]
fn replies_split_into_discord_messages_exactly_as_0_3_5() {
    harness::check(TABLE, call);
}

#[test]
fn where_0_3_5_cuts_inside_an_emoji_family_ours_keep_it_whole() {
    let table = harness::parse(TABLE);
    let deliberate: Vec<&Case> = table
        .cases
        .iter()
        .filter(|case| case.deliberate.as_deref() == Some("cuts between clusters"))
        .collect();
    assert!(!deliberate.is_empty(), "no deliberate cases");
    for case in deliberate {
        let (text, limit) = case.text_and_limit();
        let theirs: Vec<String> = serde_json::from_value(case.expected.clone()).expect("chunks");
        let ours = split(text, limit);
        let clusters: Vec<&str> = text.graphemes(true).collect();
        assert_ne!(ours, theirs, "{}: not a difference any more", case.name);
        assert_eq!(ours.concat(), theirs.concat(), "{}: text lost", case.name);
        for chunk in &ours {
            assert!(chunk.chars().count() <= limit, "{}: {chunk}", case.name);
            assert!(
                chunk.graphemes(true).all(|g| clusters.contains(&g)),
                "{}: {chunk}",
                case.name
            );
        }
    }
}

//! Slack: Markdown → mrkdwn (`render::slack::markdown_to_mrkdwn`, upstream's
//! `SlackChannel._to_mrkdwn`: tables to lines, slackify-markdown, fix-ups) and the messages a
//! reply becomes (`render::slack::split_mrkdwn`, upstream's `split_message` of the mrkdwn),
//! against `slack_mrkdwn.json`: the corpus of `telegram_html.json`, then mentions, links,
//! lists, quotes, code and tables, and long CJK, emoji and code replies split at small limits.
//!
//! Where 0.3.5 cuts a message inside an emoji family, a `&amp;` or a `<url|text>` link, the
//! case is marked `"deliberate": "cuts between clusters"` and checked here: ours cut between
//! grapheme clusters, outside escapes and links, and lose no text. A run of three tildes
//! (`~~~x~~~`) is text to pulldown-cmark and a strike inside two tildes to markdown-it:
//! `"deliberate": "a run of three tildes is text"`, checked to keep the text.

use serde_json::Value;
use unicode_segmentation::UnicodeSegmentation as _;

use nanobot_gateway::render::slack::{markdown_to_mrkdwn, split_mrkdwn};

use crate::harness::{self, Case};

const TABLE: &str = include_str!("slack_mrkdwn.json");

fn call(case: &Case) -> Result<Value, String> {
    match case.function.as_str() {
        "to_mrkdwn" => Ok(markdown_to_mrkdwn(case.input_str()).into()),
        "chunks" => {
            let (text, limit) = case.text_and_limit();
            Ok(split_mrkdwn(text, limit).into())
        }
        other => Err(format!("no Rust function for {other}")),
    }
}

#[test]
fn replies_render_as_mrkdwn_and_split_exactly_as_0_3_5() {
    harness::check(TABLE, call);
}

#[test]
fn where_0_3_5_cuts_inside_a_cluster_our_messages_keep_it_whole() {
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
        let ours = split_mrkdwn(text, limit);
        let whole = markdown_to_mrkdwn(text);
        let clusters: Vec<&str> = whole.graphemes(true).collect();
        assert_ne!(ours, theirs, "{}: not a difference any more", case.name);
        assert_eq!(ours.concat(), theirs.concat(), "{}: text lost", case.name);
        for chunk in &ours {
            assert!(chunk.chars().count() <= limit, "{}: {chunk}", case.name);
            let first = chunk.graphemes(true).next().expect("a non-empty chunk");
            assert!(
                clusters.contains(&first),
                "{}: starts mid-cluster: {chunk}",
                case.name
            );
        }
    }
}

#[test]
fn a_run_of_three_tildes_stays_as_written() {
    let table = harness::parse(TABLE);
    let case = table
        .cases
        .iter()
        .find(|case| case.deliberate.as_deref() == Some("a run of three tildes is text"))
        .expect("the tilde case");
    assert_eq!(case.expected, "~one~ ~two~ ~~three~~");
    assert_eq!(
        markdown_to_mrkdwn(case.input_str()),
        "~one~ ~two~ ~~~three~~~"
    );
}

#[test]
fn the_table_holds_the_shared_corpus_and_slacks_own_cases() {
    let table = harness::parse(TABLE);
    let rendered = table
        .cases
        .iter()
        .filter(|c| c.function == "to_mrkdwn")
        .count();
    let split = table
        .cases
        .iter()
        .filter(|c| c.function == "chunks")
        .count();
    assert!(rendered >= 120, "{rendered} rendered replies");
    assert!(split >= 8, "{split} split replies");
}

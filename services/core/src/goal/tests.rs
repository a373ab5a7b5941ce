use serde_json::{Map, Value, json};

use super::*;

/// Strings nanobot 0.3.5 produced for the same metadata (`upstream_035.json`, written by
/// 0.3.5's own `goal_state`, `turn_continuation` and `render_template`).
fn upstream(key: &str) -> Value {
    let all: Value = serde_json::from_str(include_str!("upstream_035.json")).unwrap();
    all[key].clone()
}

fn meta(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

fn cjk_goal() -> Map<String, Value> {
    meta(json!({"goal_state": {
        "status": "active",
        "objective": "写一本书 📚\n第一章：👩‍👩‍👧‍👦 e\u{301}",
        "ui_summary": "书 📚"
    }}))
}

#[test]
fn the_runtime_block_is_upstreams_guidance_then_the_active_goal() {
    let goal = cjk_goal();
    assert_eq!(
        runtime_block(&Map::new(), true).unwrap(),
        upstream("block_start_no_goal")
    );
    assert_eq!(
        runtime_block(&goal, false).unwrap(),
        upstream("block_active")
    );
    assert_eq!(runtime_block(&goal, true).unwrap(), upstream("block_both"));
    assert_eq!(runtime_block(&Map::new(), false), None);
    let done = meta(json!({"goal_state": {"status": "completed", "objective": "书"}}));
    assert_eq!(runtime_block(&done, false), None);
}

#[test]
fn runtime_lines_truncate_long_objectives_and_read_the_legacy_json_key() {
    let long = format!("{}  ", "书".repeat(4001));
    let legacy = meta(json!({"thread_goal":
        json!({"status": "active", "objective": long}).to_string()}));
    assert_eq!(json!(runtime_lines(&legacy)), upstream("lines_long"));
    let empty = meta(json!({"goal_state": {"status": "active", "objective": "  "}}));
    assert_eq!(json!(runtime_lines(&empty)), upstream("lines_empty"));
    let broken = meta(json!({"goal_state": "{not json 📚"}));
    assert!(runtime_lines(&broken).is_empty());
    assert!(!is_active(&broken));
}

#[test]
fn continuation_prompts_are_upstreams() {
    let goal = cjk_goal();
    assert_eq!(budget_continuation(&goal), upstream("budget"));
    assert_eq!(budget_continuation(&Map::new()), upstream("budget_none"));
    assert_eq!(answer_continuation(&goal).unwrap(), upstream("answer"));
    assert_eq!(answer_continuation(&Map::new()), None);
}

#[test]
fn budget_continuations_stop_after_twelve_rounds_and_reset_with_the_goal() {
    let mut goal = cjk_goal();
    for _ in 0..11 {
        count_continuation(&mut goal);
    }
    assert_eq!(
        json!(budget_continuation_available(&goal)),
        upstream("available_11")
    );
    count_continuation(&mut goal);
    assert_eq!(goal[CONTINUATION_ROUNDS_KEY], 12);
    assert_eq!(
        json!(budget_continuation_available(&goal)),
        upstream("available_12")
    );
    clear_rounds_if_inactive(&mut goal);
    assert_eq!(
        goal[CONTINUATION_ROUNDS_KEY], 12,
        "kept while the goal is active"
    );
    let blob = goal[GOAL_STATE_KEY].as_object().unwrap().clone();
    store(&mut goal, blob.clone(), true);
    assert!(
        goal.get(CONTINUATION_ROUNDS_KEY).is_none(),
        "a new goal starts afresh"
    );
    count_continuation(&mut goal);
    let mut ended = blob;
    ended.insert("status".into(), json!("completed"));
    store(&mut goal, ended, false);
    clear_rounds_if_inactive(&mut goal);
    assert!(goal.get(CONTINUATION_ROUNDS_KEY).is_none());
    assert!(!budget_continuation_available(&goal));
}

//! The goal tools against nanobot 0.3.5's results for the same calls (its `ToolRegistry`
//! running `CreateGoalTool` / `UpdateGoalTool` on a real `SessionManager`).

use serde_json::{Map, Value, json};

use super::*;

const HINT: &str = "\n\n[Analyze the error above and try a different approach.]";

fn run(metadata: &mut Map<String, Value>, allowed: &mut bool, name: &str, args: Value) -> String {
    let outcome = call(metadata, allowed, name, &args.to_string());
    let text = outcome.content.as_str().unwrap().to_string();
    assert_eq!(outcome.is_error, text.ends_with(HINT), "{text}");
    text
}

#[test]
fn the_specs_are_upstreams_definitions() {
    let defs = nanobot_core::tools::ToolClient::definitions(&specs());
    assert_eq!(
        defs[0]["function"]["description"],
        "Create one sustained goal for the current session when Goal Runtime Guidance asks you \
         to record it. Consolidate relevant prior discussion into a durable objective that is \
         self-contained, bounded, safe under repetition, and explicit about completion \
         criteria. Do not retry after a successful creation."
    );
    assert_eq!(
        defs[0]["function"]["parameters"]["required"],
        json!(["objective"])
    );
    assert_eq!(
        defs[1]["function"]["parameters"]["properties"]["action"]["enum"],
        json!(["complete", "cancel", "block", "replace"])
    );
    assert_eq!(
        defs[1]["function"]["parameters"]["additionalProperties"],
        false
    );
}

#[test]
fn create_needs_a_users_goal_turn_and_validates_as_upstream() {
    let mut m = Map::new();
    let mut denied = false;
    assert_eq!(
        run(
            &mut m,
            &mut denied,
            CREATE_GOAL,
            json!({"objective": "写一本书 📚"})
        ),
        format!(
            "Error: create_goal is unavailable for this turn. Ask the user to submit the \
             complete objective as `/goal <task>`.{HINT}"
        )
    );
    assert!(m.is_empty(), "nothing written when refused");
    let mut allowed = true;
    let invalid =
        |why: &str, tool: &str| format!("Error: Invalid parameters for tool '{tool}': {why}{HINT}");
    assert_eq!(
        run(&mut m, &mut allowed, CREATE_GOAL, json!({})),
        invalid("missing required objective", CREATE_GOAL)
    );
    assert_eq!(
        run(
            &mut m,
            &mut allowed,
            CREATE_GOAL,
            json!({"objective": "书".repeat(4001)})
        ),
        invalid("objective must be at most 4000 chars", CREATE_GOAL)
    );
    assert_eq!(
        run(
            &mut m,
            &mut allowed,
            CREATE_GOAL,
            json!({"objective": "a", "笔记": 1})
        ),
        invalid("unexpected parameter 笔记", CREATE_GOAL)
    );
    assert_eq!(
        run(&mut m, &mut allowed, UPDATE_GOAL, json!({"action": "完成"})),
        invalid(
            "action must be one of ['complete', 'cancel', 'block', 'replace']",
            UPDATE_GOAL
        )
    );
    assert_eq!(
        run(
            &mut m,
            &mut allowed,
            CREATE_GOAL,
            json!({"objective": "  "})
        ),
        format!("Error: objective must not be empty.{HINT}")
    );
    assert_eq!(
        run(
            &mut m,
            &mut allowed,
            UPDATE_GOAL,
            json!({"action": "complete"})
        ),
        "No active goal to update."
    );
    assert!(m.is_empty());
}

#[test]
fn a_goal_is_recorded_then_completed_with_upstreams_texts_and_metadata() {
    let mut m = Map::new();
    m.insert(goal::LEGACY_GOAL_STATE_KEY.into(), json!("{}"));
    m.insert(goal::CONTINUATION_ROUNDS_KEY.into(), json!(3));
    let mut allowed = true;
    assert_eq!(
        run(
            &mut m,
            &mut allowed,
            CREATE_GOAL,
            json!({"objective": " 写一本书 📚 ", "ui_summary": "书 📚"})
        ),
        "Goal recorded. Keep working toward the objective using ordinary tools. When fully \
         done and verified, call update_goal with action='complete'.\nSummary line: 书 📚"
    );
    assert!(m.get(goal::LEGACY_GOAL_STATE_KEY).is_none());
    assert!(m.get(goal::CONTINUATION_ROUNDS_KEY).is_none());
    let state = &m[goal::GOAL_STATE_KEY];
    assert_eq!(state["status"], "active");
    assert_eq!(state["objective"], "写一本书 📚");
    assert_eq!(state["ui_summary"], "书 📚");
    assert_eq!(
        run(
            &mut m,
            &mut allowed,
            CREATE_GOAL,
            json!({"objective": "again"})
        ),
        format!(
            "Error: a sustained goal is already active. Use update_goal with action='replace' \
             only if the user explicitly changes the objective.{HINT}"
        )
    );
    assert_eq!(
        run(
            &mut m,
            &mut allowed,
            UPDATE_GOAL,
            json!({"action": "replace"})
        ),
        format!("Error: update_goal action='replace' requires a replacement objective.{HINT}")
    );
    let done = run(
        &mut m,
        &mut allowed,
        UPDATE_GOAL,
        json!({"action": "complete", "recap": "写完了 ✅"}),
    );
    let state = m[goal::GOAL_STATE_KEY].clone();
    let ended = state["ended_at"].as_str().unwrap();
    assert_eq!(
        done,
        format!("Goal marked complete ({ended}). Recap:\n写完了 ✅")
    );
    assert_eq!(state["status"], "completed");
    assert_eq!(state["completed_at"], ended);
    assert_eq!(state["recap"], "写完了 ✅");
    assert_eq!(state["objective"], "写一本书 📚");
    assert!(!allowed, "ending the goal revokes the turn's permission");
    assert!(
        run(&mut m, &mut allowed, CREATE_GOAL, json!({"objective": "b"}))
            .starts_with("Error: create_goal is unavailable for this turn.")
    );
}

#[test]
fn replace_needs_permission_and_cancel_and_block_do_not() {
    let mut m = Map::new();
    let mut allowed = true;
    run(
        &mut m,
        &mut allowed,
        CREATE_GOAL,
        json!({"objective": "写一本书 📚"}),
    );
    let mut later_turn = false;
    assert_eq!(
        run(
            &mut m,
            &mut later_turn,
            UPDATE_GOAL,
            json!({"action": "replace", "objective": "画一幅画 🎨"})
        ),
        format!(
            "Error: replacing the goal is unavailable for this turn. Ask the user to submit the \
             replacement objective as `/goal <task>`.{HINT}"
        )
    );
    assert_eq!(
        run(
            &mut m,
            &mut allowed,
            UPDATE_GOAL,
            json!({"action": "replace", "objective": "画一幅画 🎨", "recap": "换 🔁"})
        ),
        "Goal replaced. Continue toward the new objective using ordinary tools."
    );
    let state = &m[goal::GOAL_STATE_KEY];
    assert_eq!(state["previous_objective"], "写一本书 📚");
    assert_eq!(state["objective"], "画一幅画 🎨");
    assert_eq!(state["recap"], "换 🔁");
    let blocked = run(
        &mut m,
        &mut later_turn,
        UPDATE_GOAL,
        json!({"action": "block"}),
    );
    let ended = m[goal::GOAL_STATE_KEY]["ended_at"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(blocked, format!("Goal marked blocked ({ended})."));
    assert_eq!(m[goal::GOAL_STATE_KEY]["status"], "blocked");
}

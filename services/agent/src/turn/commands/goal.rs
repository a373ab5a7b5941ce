//! `/goal` and `/trigger` (upstream `cmd_goal`, `cmd_trigger`).
//!
//! `/goal <task>` from a user goes to the model as a turn whose message is the command's own
//! text, as upstream (`msg.content = ctx.raw`), in goal mode: the turn is marked
//! `goal_requested` ([`crate::base::input::TurnInput::goal_requested`]), so its user message carries
//! upstream's goal guidance (`nanobot_core::goal::runtime_block`) and `create_goal` may run
//! ([`crate::turn::goal_tools`]); the goal then lives in the session's `goal_state` and is continued
//! as upstream does ([`crate::turn::goal`]). 0.3.5 has no `/goal` status or cancel form (the
//! model cancels with `update_goal`, `action='cancel'`) and its `/status` does not show the
//! goal; neither does the fleet's. A `/goal` sent while a turn runs waits for it, as every
//! command does in the fleet (0.3.5 answers that a task is already running).
//!
//! `/trigger <name>` needs upstream's local trigger store and its `nanobot trigger <id>`
//! delivery, which the fleet does not have: without a name it answers upstream's usage, with
//! one it says triggers are unavailable rather than print a command that does not exist.

/// Upstream's `/goal` usage.
pub const GOAL_USAGE: &str = "Usage: /goal <long-running task description>";
/// Upstream's answer to a `/goal` that no user sent (a cron job, the heartbeat).
pub const GOAL_NOT_FROM_USER: &str =
    "Goal mode can only be started by a user `/goal <task>` command.";
/// Upstream's `/trigger` usage.
pub const TRIGGER_USAGE: &str =
    "Usage: /trigger <name>\n\nCreate a named local trigger bound to this chat session.";
/// The answer to `/trigger <name>`: the fleet has no local triggers.
pub const TRIGGER_UNAVAILABLE: &str = "Local triggers are not available in nanobot-fleet: there \
     is no `nanobot trigger` command to deliver messages to this chat session.";

/// Answers `/goal [task]`; `None` when the turn goes to the model (a user's goal).
pub fn goal(task: Option<&str>, from_automation: bool) -> Option<String> {
    if task.map(str::trim).is_none_or(str::is_empty) {
        return Some(GOAL_USAGE.into());
    }
    if from_automation {
        return Some(GOAL_NOT_FROM_USER.into());
    }
    None
}

/// Answers `/trigger [name]`.
pub fn trigger(name: Option<&str>) -> String {
    if name.map(str::trim).is_none_or(str::is_empty) {
        return TRIGGER_USAGE.into();
    }
    TRIGGER_UNAVAILABLE.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goal_without_a_task_is_usage_and_a_users_goal_goes_to_the_model() {
        assert_eq!(
            goal(None, false).as_deref(),
            Some("Usage: /goal <long-running task description>")
        );
        assert_eq!(goal(Some("  "), false).as_deref(), Some(GOAL_USAGE));
        assert_eq!(goal(Some("写一本书 📚"), false), None);
        assert_eq!(
            goal(Some("写一本书 📚"), true).as_deref(),
            Some("Goal mode can only be started by a user `/goal <task>` command.")
        );
    }

    #[test]
    fn trigger_without_a_name_is_upstreams_usage() {
        assert_eq!(
            trigger(None),
            "Usage: /trigger <name>\n\nCreate a named local trigger bound to this chat session."
        );
        assert_eq!(trigger(Some("写一本书 📚")), TRIGGER_UNAVAILABLE);
    }
}

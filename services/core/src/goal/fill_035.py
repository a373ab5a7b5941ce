"""Writes `upstream_035.json`: nanobot 0.3.5's goal-mode strings for the metadata the Rust
tests use (its own `goal_state`, `turn_continuation` and `render_template`).

Run with the reference venv, from the repository root:

    /work/ref035/bin/python services/core/src/goal/fill_035.py

`answer` is built from `AgentLoop._goal_continue`'s text (a closure, not importable); the
side-by-side run in `tests/src/e2e/goal.rs`'s first test was checked against
`AgentLoop.process_direct("/goal 写一本书 📚")` with a scripted provider.
"""

import json
from pathlib import Path

from nanobot.runtime_context import wrap_runtime_context_lines
from nanobot.session import turn_continuation as tc
from nanobot.session.goal_state import goal_state_runtime_lines
from nanobot.utils.prompt_templates import render_template

META = {"goal_state": {"status": "active", "objective": "写一本书 📚\n第一章：👩\u200d👩\u200d👧\u200d👦 e\u0301", "ui_summary": "书 📚"}}
LONG = {"thread_goal": json.dumps({"status": "active", "objective": "书" * 4001 + "  "})}
EMPTY = {"goal_state": {"status": "active", "objective": "  "}}


def block(metadata: dict, start: bool) -> str:
    guidance = render_template(
        "agent/goal_runtime.md",
        strip=True,
        goal_start_requested=start,
        goal_active=tc.sustained_goal_active(metadata),
    )
    state = wrap_runtime_context_lines(goal_state_runtime_lines(metadata))
    return "\n\n".join(part for part in (guidance, state) if part)


def main() -> None:
    lines = goal_state_runtime_lines(META)
    out = {
        "block_start_no_goal": block({}, True),
        "block_active": block(META, False),
        "block_both": block(META, True),
        "lines_long": goal_state_runtime_lines(LONG),
        "lines_empty": goal_state_runtime_lines(EMPTY),
        "budget": tc._goal_continuation_prompt(META),
        "budget_none": tc._goal_continuation_prompt({}),
        "available_11": tc._goal_continuation_available({**META, "_sustained_goal_continuation_rounds": 11}),
        "available_12": tc._goal_continuation_available({**META, "_sustained_goal_continuation_rounds": 12}),
        "answer": "You have an active sustained goal:\n\n" + "\n".join(lines)
        + "\n\nPlease continue working toward the objective using your tools, or call "
        "update_goal with action='complete' if the work is truly finished.",
    }
    path = Path(__file__).with_name("upstream_035.json")
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()

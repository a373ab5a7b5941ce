"""0.3.5's cron schedule functions with JSON in and out, for `cron_schedule.json`.

A schedule is its store dict (`{"kind": "cron", "expr": ..., "tz": ...}`, `atMs`/`everyMs`).
`validate` gives `{"ok": true}` or `{"error": <message>}`; for an expression croniter refuses,
only the part before croniter's own reason (`invalid cron expression '<expr>'`) is kept, since
the reason is the parsing library's wording, not nanobot's.
"""

from nanobot.agent.tools.cron import CronTool
from nanobot.cron.service import _compute_next_run, _validate_schedule_for_add
from nanobot.cron.types import CronSchedule

INVALID_EXPR = "invalid cron expression '"


def validate(schedule: dict) -> dict:
    try:
        _validate_schedule_for_add(CronSchedule.from_store_dict(schedule))
    except ValueError as exc:
        message = str(exc)
        if message.startswith(INVALID_EXPR):
            message = message[: message.index("'", len(INVALID_EXPR)) + 1]
        return {"error": message}
    return {"ok": True}


def next_run(schedule: dict, now_ms: int):
    return _compute_next_run(CronSchedule.from_store_dict(schedule), now_ms)


def timing(schedule: dict, default_tz: str) -> str:
    tool = CronTool.__new__(CronTool)
    tool._default_timezone = default_tz
    return tool._format_timing(CronSchedule.from_store_dict(schedule))


def timestamp(ms: int, tz: str) -> str:
    return CronTool._format_timestamp(ms, tz)

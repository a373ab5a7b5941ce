"""0.3.5's built-in command answers (`nanobot/command/builtin.py`), for `commands.json`.

Each function runs 0.3.5's handler on a minimal command context: the `cli:direct` session
holding the case's rows, the arguments as typed after the command.

- `history`: `cmd_history` (`/history [count]`) on `[messages, arg]`.
- `help`: `build_help_text()`.
- `goal`: `cmd_goal` with `[arg, is_user_turn]`: its answer, or null when the turn goes to the
  model.
- `trigger_usage`: `cmd_trigger` without a name.
"""

import asyncio
from types import SimpleNamespace

from nanobot.command import builtin
from nanobot.session.manager import Session


def _ctx(args: str, messages=None, is_user_turn: bool = True):
    msg = SimpleNamespace(
        channel="cli", chat_id="direct", metadata={}, content="", session_key="cli:direct"
    )
    return SimpleNamespace(
        args=args,
        raw=args,
        msg=msg,
        session=Session(key="cli:direct", messages=list(messages or [])),
        loop=None,
        key="cli:direct",
        is_user_turn=is_user_turn,
        turn_scopes=[],
    )


def history(messages: list, arg: str) -> str:
    return asyncio.run(builtin.cmd_history(_ctx(arg, messages))).content


def help() -> str:  # noqa: A001 - the command's name
    return builtin.build_help_text()


def goal(arg: str, is_user_turn: bool):
    out = asyncio.run(builtin.cmd_goal(_ctx(arg, is_user_turn=is_user_turn)))
    return None if out is None else out.content


def trigger_usage() -> str:
    return asyncio.run(builtin.cmd_trigger(_ctx(""))).content

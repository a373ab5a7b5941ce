"""0.3.5's replay of a session's history, for `history.json`.

A case's input is `{"messages": [...], "last_archived": n, "max_messages": n,
"extend_to_user": bool, "max_tokens": n}` (all but `messages` optional, defaulting as the
agent loop calls `Session.get_history`: no message cap, no token budget).

- `get_history`: `Session.get_history` on a session holding `messages` with `last_archived`.
- `prepare_for_model`: `ContextGovernor.prepare_messages_for_model` on `messages`
  (placeholder assistant rows, malformed tool calls, orphan results, missing results, empty
  results, adjacent user messages), with no workspace and a tool-result cap no case reaches.
- `replay`: the two in turn, what a turn sends of its history.
- `load_and_replay`: `replay` of rows as `SessionManager` loads them from disk, after
  `_migrate_legacy_exec_session_records` (stored `write_stdin` calls become `exec_session`).
- `checkpoint`: `Session.commit_summary_checkpoint(summary, insert_at=archive_end)` on a
  session holding `messages` with `last_archived`, as an archive commits it: the stored rows
  (timestamps left out), the new watermark, the `_last_summary` text, and what is replayed.
- `fit_to_budget`: a whole request (`messages` with its system row) under `context_window`
  and `max_tokens` as `prepare_request` treats it without tools: left alone unless the
  estimate reaches the input budget, else `ContextGovernor.fit_to_budget`'s snip and tool-row
  repair (`{"error": ...}` when it still does not fit).

Token budgets are counted as 0.3.5 counts them with network access: tiktoken's `cl100k_base`.
Without it 0.3.5 silently falls back to UTF-8 bytes, so the adapter seeds tiktoken's cache
with the same table from the `tiktoken-rs` crate in the local Cargo registry (tiktoken checks
its hash) and fails when there is none.
"""

import glob
import hashlib
import os
import shutil
import tempfile
from copy import deepcopy

_CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


def _seed_tiktoken_cache() -> None:
    cache = os.environ.setdefault(
        "TIKTOKEN_CACHE_DIR", os.path.join(tempfile.gettempdir(), "nanobot-conformance-tiktoken")
    )
    target = os.path.join(cache, hashlib.sha1(_CL100K_URL.encode()).hexdigest())
    if os.path.exists(target):
        return
    pattern = os.path.expanduser("~/.cargo/registry/src/*/tiktoken-rs-*/assets/cl100k_base.tiktoken")
    found = sorted(glob.glob(pattern))
    if not found:
        raise RuntimeError(f"no cl100k_base table for 0.3.5's token counts (looked for {pattern})")
    os.makedirs(cache, exist_ok=True)
    shutil.copy(found[-1], target)


_seed_tiktoken_cache()

from nanobot.agent.context_governance import (
    ContextGovernanceConfig,
    ContextGovernor,
    ContextWindowExceededError,
)
from nanobot.session.manager import Session, _migrate_legacy_exec_session_records
from nanobot.utils.helpers import _get_token_encoding

_get_token_encoding()  # fail here, not in a silent byte-count fallback

_NO_CAP = 1_000_000


def _history(spec: dict) -> list:
    session = Session(
        key="probe:1",
        messages=deepcopy(spec["messages"]),
        last_consolidated=spec.get("last_archived", 0),
    )
    return session.get_history(
        spec.get("max_messages", 0),
        max_tokens=spec.get("max_tokens", 0),
        extend_to_user=spec.get("extend_to_user", False),
    )


def _config(context_window: int | None = None, max_tokens: int | None = None):
    return ContextGovernanceConfig(
        provider=None,
        model="probe",
        tools=None,
        workspace=None,
        session_key="probe:1",
        max_tool_result_chars=_NO_CAP,
        context_window_tokens=context_window,
        max_tokens=max_tokens,
    )


def _prepare(messages: list) -> list:
    config = _config()
    return ContextGovernor().prepare_messages_for_model(config, deepcopy(messages))


def get_history(spec: dict) -> list:
    return _history(spec)


def prepare_for_model(spec: dict) -> list:
    return _prepare(spec["messages"])


def replay(spec: dict) -> list:
    return _prepare(_history(spec))


def fit_to_budget(spec: dict) -> object:
    config = _config(spec["context_window"], spec["max_tokens"])
    governor = ContextGovernor()
    messages = deepcopy(spec["messages"])
    pressure = governor.request_pressure(
        config, messages, None, usage_matches_messages=False, tool_definitions=None
    )
    if pressure is None:
        return messages
    try:
        return governor.fit_to_budget(config, messages, tool_definitions=None)
    except ContextWindowExceededError:
        return {"error": "over budget"}


def checkpoint(spec: dict) -> dict:
    session = Session(
        key="probe:1",
        messages=deepcopy(spec["messages"]),
        last_consolidated=spec.get("last_archived", 0),
    )
    session.commit_summary_checkpoint(spec["summary"], insert_at=spec["archive_end"])
    return {
        "messages": [
            {k: v for k, v in m.items() if k != "timestamp"} for m in session.messages
        ],
        "last_archived": session.last_archived,
        "summary": session.metadata["_last_summary"]["text"],
        "history": _prepare(session.get_history()),
    }


def load_and_replay(spec: dict) -> list:
    spec = deepcopy(spec)
    _migrate_legacy_exec_session_records(spec["messages"], {})
    return _prepare(_history(spec))

#!/usr/bin/env python3
"""Checks the house log style in Rust sources: a tracing message starts lowercase and has no
trailing full stop (`warn!(attempt, %subject, "redis write failed")`).

Usage: scripts/check_log_format.py [DIR ...]   (default: services proto tests bench)
Exits 1 and lists every offending call. An acronym or identifier at the start ("NATS ...",
"SIGTERM ...") is fine; so is a trailing ellipsis.
"""

import pathlib
import re
import sys

MACRO = re.compile(r"\b(?:tracing::)?(trace|debug|info|warn|error)!\s*\(")


def call_args(text: str, start: int) -> str:
    """Returns the text between the macro's parentheses (strings and nesting respected)."""
    depth, i, out = 1, start, []
    while i < len(text) and depth:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if depth:
            out.append(c)
        i += 1
    return "".join(out)


def top_level_args(args: str) -> list:
    """Splits macro arguments on commas outside strings and brackets."""
    parts, depth, cur, i = [], 0, [], 0
    while i < len(args):
        c = args[i]
        if c == '"':
            j = i + 1
            while j < len(args) and args[j] != '"':
                j += 2 if args[j] == "\\" else 1
            cur.append(args[i : j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def message_of(args: str):
    """Returns the message literal: the first argument that is a bare string literal."""
    for part in top_level_args(args):
        if part.startswith('"') and part.endswith('"') and len(part) >= 2:
            return part[1:-1]
    return None


def problem(message: str):
    if re.match(r"[A-Z][a-z]", message):
        return "starts with a capital letter"
    stripped = message.rstrip()
    if stripped.endswith(".") and not stripped.endswith(".."):
        return "ends with a full stop"
    return None


def main() -> int:
    roots = sys.argv[1:] or ["services", "proto", "tests", "bench"]
    offenders = []
    for root in roots:
        for path in sorted(pathlib.Path(root).rglob("*.rs")):
            if "/gen/" in str(path):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for m in MACRO.finditer(text):
                message = message_of(call_args(text, m.end()))
                why = message is not None and problem(message)
                if why:
                    line = text.count("\n", 0, m.start()) + 1
                    offenders.append(f"{path}:{line}: log message {why}: {message!r}")
    for o in offenders:
        print(o)
    if offenders:
        print("log messages are lowercase with no trailing full stop (docs: STYLE rule 18)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

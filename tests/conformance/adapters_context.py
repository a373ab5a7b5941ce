"""0.3.5's context builder on a workspace described in JSON, for `context.json`.

A case's input is `{"files": {relative path: text}, "channel": ..., "history": [...],
"text": ..., "summary": {"text", "last_active"}}`; the workspace is written to a fresh temporary directory with no builtin skills.
The `## Runtime` line (0.3.5 names its Python, we name the fleet) reads `<runtime>`.

0.3.5 lists skills in directory order (`Path.iterdir`), which the filesystem picks; we list
them by name, so the adapter sorts 0.3.5's listing of each skills directory.
"""

import re
import tempfile
from pathlib import Path

from nanobot.agent.context import ContextBuilder
from nanobot.agent.skills import _SKILL_REFERENCE, SkillsLoader

RUNTIME_LINE = re.compile(r"\A## Runtime\n[^\n]*\n")


class _SortedSkillsLoader(SkillsLoader):
    def _skill_entries_from_dir(self, base, source, *, skip_names=None):
        entries = super()._skill_entries_from_dir(base, source, skip_names=skip_names)
        return sorted(entries, key=lambda entry: entry["name"])


def _builder(spec: dict, root: Path) -> ContextBuilder:
    for relative, text in spec.get("files", {}).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    builder = ContextBuilder(root)
    builder.skills = _SortedSkillsLoader(root, builtin_skills_dir=root / ".no-builtin-skills")
    return builder


def system_prompt(spec: dict) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        prompt = _builder(spec, Path(tmp)).build_system_prompt(
            channel=spec.get("channel"), session_summary=spec.get("summary")
        )
    return RUNTIME_LINE.sub("## Runtime\n<runtime>\n", prompt)


def messages(spec: dict) -> list:
    """The messages after the system prompt, without the in-memory `_meta` marker."""
    with tempfile.TemporaryDirectory() as tmp:
        built = _builder(spec, Path(tmp)).build_messages(
            spec.get("history", []), spec["text"], channel=spec.get("channel")
        )
    return [{k: v for k, v in m.items() if k != "_meta"} for m in built[1:]]


def skill_references(text: str) -> list:
    return [m.group(1) for m in _SKILL_REFERENCE.finditer(text)]

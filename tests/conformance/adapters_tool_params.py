"""0.3.5's `ToolRegistry.prepare_call` on a tool with a given schema, for `tool_params.json`.

A case's args are `[schema, params]`: `params` is the arguments value as the provider parsed it
(an object, or a string, number, list, null). The answer is `{"ok": <cast params>}` or
`{"error": <the error text the model sees>}` (without `execute`'s trailing hint).
"""

from typing import Any

from nanobot.agent.tools.base import Tool
from nanobot.agent.tools.registry import ToolRegistry


class _SchemaTool(Tool):
    def __init__(self, schema: dict):
        self._schema = schema

    @property
    def name(self) -> str:
        return "probe"

    @property
    def description(self) -> str:
        return "A tool with the case's schema."

    @property
    def parameters(self) -> dict[str, Any]:
        return self._schema

    async def execute(self, **kwargs: Any) -> Any:
        return "ok"


def prepare(schema: dict, params: Any) -> dict:
    registry = ToolRegistry()
    registry.register(_SchemaTool(schema))
    _tool, cast, error = registry.prepare_call("probe", params)
    if error:
        return {"error": str(error)}
    return {"ok": cast}

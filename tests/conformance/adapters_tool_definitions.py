"""0.3.5's tool definitions, for `tool_definitions.json`: the `function` part of each entry
of `ToolRegistry.get_definitions()` of an `AgentLoop` built with default settings on an empty
workspace (a provider that never answers: no model is called).
"""

import tempfile
from functools import lru_cache
from pathlib import Path

from nanobot.agent.loop import AgentLoop
from nanobot.bus.queue import MessageBus
from nanobot.providers.base import LLMProvider, LLMResponse


class _SilentProvider(LLMProvider):
    def __init__(self):
        super().__init__(api_key="unused", provider_name="custom")

    async def chat(self, *args, **kwargs):
        return LLMResponse(content="")

    def get_default_model(self):
        return "model"


@lru_cache(maxsize=1)
def _definitions() -> dict:
    workspace = Path(tempfile.mkdtemp())
    loop = AgentLoop(bus=MessageBus(), provider=_SilentProvider(), workspace=workspace, model="model")
    return {d["function"]["name"]: d["function"] for d in loop.tools.get_definitions()}


def definition(name: str) -> dict:
    return _definitions()[name]

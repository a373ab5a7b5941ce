"""In-process tool call timing for upstream nanobot: the same `read_file` the fleet's tool
round trip reads, through upstream's own ToolRegistry (prepare_call, cast, validate, execute).

Usage: python upstream_tool_rtt.py WORKSPACE FILE CALLS  -> one JSON line on stdout.
"""

import asyncio
import json
import sys
import time
from pathlib import Path

from nanobot.agent.tools.filesystem import ReadFileTool
from nanobot.agent.tools.registry import ToolRegistry

WARMUP = 50


async def main() -> None:
    workspace, name, calls = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    registry = ToolRegistry()
    registry.register(ReadFileTool(workspace=workspace))
    params = {"path": name}
    result = None
    for _ in range(WARMUP):
        result = await registry.execute("read_file", params)
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        result = await registry.execute("read_file", params)
        samples.append(time.perf_counter_ns() - start)
    print(json.dumps({"samples_ns": samples, "result_chars": len(str(result))}))


asyncio.run(main())

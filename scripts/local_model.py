"""Serves a GGUF model as an OpenAI-compatible HTTP API with xllamacpp (llama.cpp's server).

`nanobot up` runs this with the venv's python when no LLM provider is configured, so the fleet
works out of the box on the bundled SmolLM2-135M weights. Endpoints: /v1/models,
/v1/chat/completions (incl. SSE), /health. Exits on SIGTERM or SIGINT.

Usage: python local_model.py --model PATH [--host 127.0.0.1] [--port 18080]
                             [--alias NAME] [--ctx 8192] [--parallel 1] [--max-tokens 512]
"""

import argparse
import os
import signal
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="path of the .gguf file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18080)
    parser.add_argument("--alias", default="SmolLM2-135M-Instruct", help="model id served")
    parser.add_argument("--ctx", type=int, default=8192, help="context window in tokens")
    parser.add_argument("--parallel", type=int, default=1, help="requests decoded at once")
    # A tiny model tends to ramble until its context is full: bound replies of requests that
    # set no max_tokens (llama.cpp honours a request's own max_tokens over this default).
    parser.add_argument("--max-tokens", type=int, default=512, help="default tokens per reply")
    args = parser.parse_args()

    try:
        import xllamacpp
    except ImportError:
        print("local_model: xllamacpp is not installed; run scripts/deps.sh model", file=sys.stderr)
        return 69

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.hostnames = [args.host]
    params.port = args.port
    params.model_alias = {args.alias}
    params.n_ctx = args.ctx
    params.n_parallel = args.parallel
    params.n_predict = args.max_tokens

    # Stop promptly: the native server threads need no orderly teardown.
    def stop(signum, _frame):
        print(f"local_model: signal {signum}, exiting", flush=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    server = xllamacpp.Server(params)
    print(f"local_model: serving {args.alias} at {server.listening_address}/v1", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())

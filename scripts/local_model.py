"""Serves a GGUF model as an OpenAI-compatible HTTP API with xllamacpp (llama.cpp's server).

`nanobot up` runs this with the venv's python when no LLM provider is configured, so the fleet
works out of the box on the bundled SmolLM2-135M weights. Endpoints: /v1/models,
/v1/chat/completions (incl. SSE), /health. Exits on SIGTERM or SIGINT.

llama.cpp listens on an internal loopback port; a small proxy on the public port forwards every
request and caps `max_tokens`: a tiny model tends to ramble until its context is full, and on a
busy CPU an uncapped reply can take minutes.

Usage: python local_model.py --model PATH [--host 127.0.0.1] [--port 18080]
                             [--alias NAME] [--ctx 8192] [--parallel 1] [--max-tokens 192]
"""

import argparse
import http.client
import http.server
import json
import os
import signal
import socketserver
import sys
import urllib.parse

# Request fields that bound the length of a reply.
LENGTH_FIELDS = ("max_tokens", "max_completion_tokens", "n_predict")
# Headers that describe one hop, not the message.
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
               "proxy-authorization", "proxy-authenticate", "host", "content-length"}


def cap_length(body: bytes, cap: int) -> bytes:
    """Returns the JSON body with every length field set to at most `cap` (added if missing)."""
    try:
        request = json.loads(body)
    except ValueError:
        return body
    if not isinstance(request, dict):
        return body
    for field in LENGTH_FIELDS:
        value = request.get(field)
        if isinstance(value, int) and 0 < value <= cap:
            continue
        if field == "max_tokens" or field in request:
            request[field] = cap
    return json.dumps(request).encode()


def make_handler(upstream_host: str, upstream_port: int, cap: int):
    class Proxy(http.server.BaseHTTPRequestHandler):
        # One request per connection: bodies end with the connection (fits SSE streaming).
        protocol_version = "HTTP/1.0"

        def log_message(self, fmt, *args):  # keep the log to llama.cpp's own lines
            pass

        def forward(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if body is not None and self.command == "POST" and "completions" in self.path:
                body = cap_length(body, cap)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
            if body is not None:
                headers["Content-Length"] = str(len(body))
            conn = http.client.HTTPConnection(upstream_host, upstream_port, timeout=3600)
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                self.send_response(response.status, response.reason)
                for key, value in response.getheaders():
                    if key.lower() not in HOP_HEADERS or key.lower() == "content-length":
                        self.send_header(key, value)
                self.send_header("Connection", "close")
                self.end_headers()
                while True:
                    chunk = response.read1(65536)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (ConnectionError, http.client.HTTPException, OSError) as e:
                try:
                    self.send_error(502, f"local model unavailable: {e}")
                except OSError:
                    pass
            finally:
                conn.close()

        do_GET = forward
        do_POST = forward
        do_DELETE = forward
        do_PUT = forward

    return Proxy


class ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def self_test() -> int:
    """Checks the length cap without a model (run by the Rust tests)."""
    capped = json.loads(cap_length(b'{"max_tokens": 8192, "max_completion_tokens": 9000}', 64))
    assert capped == {"max_tokens": 64, "max_completion_tokens": 64}, capped
    assert json.loads(cap_length(b'{"messages": []}', 64))["max_tokens"] == 64
    assert json.loads(cap_length(b'{"max_tokens": 10}', 64)) == {"max_tokens": 10}
    assert cap_length(b"not json", 64) == b"not json"
    assert cap_length(b"[1]", 64) == b"[1]"
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="path of the .gguf file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18080)
    parser.add_argument("--alias", default="SmolLM2-135M-Instruct", help="model id served")
    parser.add_argument("--ctx", type=int, default=8192, help="context window in tokens")
    parser.add_argument("--parallel", type=int, default=1, help="requests decoded at once")
    parser.add_argument("--max-tokens", type=int, default=192, help="cap on tokens per reply")
    args = parser.parse_args()

    try:
        import xllamacpp
    except ImportError:
        print("local_model: xllamacpp is not installed; run scripts/deps.sh model", file=sys.stderr)
        return 69

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.hostnames = ["127.0.0.1"]
    params.port = 0  # any free port; only the proxy talks to it
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
    internal = urllib.parse.urlsplit(server.listening_address)
    proxy = ThreadingServer((args.host, args.port), make_handler(internal.hostname, internal.port, args.max_tokens))
    print(
        f"local_model: serving {args.alias} at http://{args.host}:{args.port}/v1 "
        f"(llama.cpp at {server.listening_address}, replies capped at {args.max_tokens} tokens)",
        flush=True,
    )
    proxy.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A scripted OpenAI-compatible model for `make compose-smoke`: every chat completion answers
"smoke-reply: <the last user text>", streamed (SSE) when asked; a text containing "slow" is
answered after 8 s. Prints "request: <text>" per request (read with `podman logs`). Runs in its
own container on the compose network; never on the host's interfaces."""
import json
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def last_user_text(messages):
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content)
    return ""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, status, body, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.send(200, json.dumps({"data": [{"id": "smoke-model"}]}).encode())

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        asked = last_user_text(request.get("messages", []))
        print(f"request: {asked}", flush=True)
        if "slow" in asked:
            time.sleep(8)
        text = "smoke-reply: " + asked
        usage = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
        if not request.get("stream"):
            answer = {"id": "c1", "object": "chat.completion", "model": "smoke-model",
                      "choices": [{"index": 0, "finish_reason": "stop",
                                   "message": {"role": "assistant", "content": text}}],
                      "usage": usage}
            self.send(200, json.dumps(answer).encode())
            return
        chunks = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {"choices": [], "usage": usage},
        ]
        body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        self.send(200, body.encode(), "text/event-stream")

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()

"""A Telegram Bot API fake for `make compose-smoke`, on the compose network only: the gateway's
`channels.telegram.apiBase` points here. Bot API on :8081 (`/bot<token>/<method>`: getMe with
the fields teloxide needs, getUpdates with offset and a short long-poll, sendMessage,
editMessageText and the no-op methods a gateway calls); controls on :8082 for the smoke
script (`POST /inject` {"text"} queues a private message from user 42, `GET /sent` lists the
texts the bot sent to chats)."""
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

lock = threading.Condition()
updates = []  # queued updates
sent = []  # (chat_id, text) the bot sent, edits included
next_update = [1]
next_message = [100]
USER = {"id": 42, "is_bot": False, "first_name": "Smoke", "username": "smoke_user"}
BOT = {"id": 123456, "is_bot": True, "first_name": "nanobot", "username": "nanobot_smoke_bot"}


def message(chat_id, text, sender):
    next_message[0] += 1
    chat = {"id": chat_id, "type": "private", "first_name": "Smoke", "username": "smoke_user"}
    return {"message_id": next_message[0], "from": sender, "chat": chat,
            "date": int(time.time()), "text": text}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def reply(self, status, value):
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def params(self):
        url = urlparse(self.path)
        params = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length", 0) or 0)
        if length:
            raw = self.rfile.read(length)
            kind = self.headers.get("Content-Type", "")
            if "json" in kind:
                params.update(json.loads(raw or b"{}"))
            else:
                params.update({k: v[0] for k, v in parse_qs(raw.decode()).items()})
        return url.path, params

    def do_GET(self):
        self.handle_any()

    def do_POST(self):
        self.handle_any()

    def handle_any(self):
        path, params = self.params()
        if self.server.server_address[1] == 8082:
            return self.control(path, params)
        method = path.rsplit("/", 1)[-1].lower()
        ok = lambda result: self.reply(200, {"ok": True, "result": result})
        if method == "getme":
            return ok(dict(BOT, can_join_groups=True, can_read_all_group_messages=False,
                           supports_inline_queries=False, can_connect_to_business=False,
                           has_main_web_app=False))
        if method == "getupdates":
            offset = int(params.get("offset", 0) or 0)
            deadline = time.time() + min(float(params.get("timeout", 0) or 0), 5)
            with lock:
                updates[:] = [u for u in updates if u["update_id"] >= offset]
                while not updates and time.time() < deadline:
                    lock.wait(max(deadline - time.time(), 0.01))
                return ok(list(updates))
        if method in ("sendmessage", "editmessagetext"):
            chat_id = int(params.get("chat_id", 0))
            with lock:
                sent.append({"chat_id": chat_id, "text": params.get("text", "")})
            return ok(message(chat_id, params.get("text", ""), BOT))
        if method in ("sendchataction", "setmycommands", "deletewebhook", "setmessagereaction",
                      "deletemycommands", "deletemessage"):
            return ok(True)
        if method == "getmycommands":
            return ok([])
        return self.reply(404, {"ok": False, "error_code": 404, "description": "Not Found"})

    def control(self, path, params):
        with lock:
            if path == "/inject":
                update = {"update_id": next_update[0], "message": message(42, params["text"], USER)}
                next_update[0] += 1
                updates.append(update)
                lock.notify_all()
                return self.reply(200, update)
            if path == "/sent":
                return self.reply(200, sent)
        return self.reply(404, {})

    def log_message(self, *args):
        pass


for port in (8081, 8082):
    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
threading.Event().wait()

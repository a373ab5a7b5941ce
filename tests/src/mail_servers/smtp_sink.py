"""SMTP server for the email channel's tests (aiosmtpd): accepts AUTH PLAIN/LOGIN with the
given password over plain TCP on 127.0.0.1 and writes each mail, as received, to OUT_DIR as
<ns>-<n>.eml (written to a dot file first, then renamed, so a reader never sees half a mail).
Runs until killed (the test's wrapper kills it when the test process exits).

Usage: smtp_sink.py OUT_DIR PORT PASSWORD
"""

import os
import sys
import threading
import time

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

out_dir, port, password = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()


class Sink:
    def __init__(self):
        self.count = 0

    async def handle_DATA(self, server, session, envelope):
        self.count += 1
        tmp = os.path.join(out_dir, f".{self.count}.tmp")
        with open(tmp, "wb") as f:
            f.write(envelope.original_content or envelope.content)
        os.rename(tmp, os.path.join(out_dir, f"{time.time_ns()}-{self.count}.eml"))
        return "250 OK"


def authenticate(server, session, envelope, mechanism, auth_data):
    ok = isinstance(auth_data, LoginPassword) and auth_data.password == password
    return AuthResult(success=ok)


controller = Controller(
    Sink(),
    hostname="127.0.0.1",
    port=port,
    authenticator=authenticate,
    auth_required=True,
    auth_require_tls=False,
)
controller.start()
print("ready", flush=True)
threading.Event().wait()

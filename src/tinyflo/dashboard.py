"""A live training dashboard: a page on loopback that plots every logged value as it comes.

``Monitor(dashboard=True)`` starts one. The server is the standard library's; the page and its
plotting script ship with the package, so it works offline. Each event the Monitor publishes
(a log interval's running loss, learning rates and resources; an epoch's row of the history, logged
metrics included; the end of training) goes to every open page over server-sent events; a page that
connects late is sent every earlier event first, and one that reconnects only what it missed.
"""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from typing import Any

KEEPALIVE_S = 15.0  # an idle stream sends a comment this often, so proxies and browsers keep it open


def _finite(value: Any) -> Any:
    """JSON has no NaN or inf: they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class Dashboard:
    """Serves the dashboard page and streams published events to every page that is open."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1", title: str = "tinyflo training",
                 labels: dict[str, str] | None = None) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"Dashboard: port must be an integer in 0..65535 (0: any free port); got {port!r}")
        self.title = title
        self.labels = dict(labels or {})  # column -> its name for a reader (the Monitor's own table)
        self.events: list[str] = []  # every event so far, as 'event: ...\ndata: ...\n\n' text
        self.changed = threading.Condition()
        self.closed = False
        self.server = ThreadingHTTPServer((host, port), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="tinyflo-dashboard", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/"

    def publish(self, kind: str, data: dict[str, Any]) -> None:
        """Send one event (``step``, ``epoch`` or ``end``, a dict of numbers) to every page, now and later."""
        text = json.dumps({key: _finite(value) for key, value in data.items()})
        with self.changed:  # the id lets a reconnecting page ask only for what it missed
            self.events.append(f"id: {len(self.events)}\nevent: {kind}\ndata: {text}\n\n")
            self.changed.notify_all()

    def close(self) -> None:
        """End every stream and stop serving (idempotent)."""
        with self.changed:
            if self.closed:
                return
            self.closed = True
            self.changed.notify_all()
        self.server.shutdown()
        self.server.server_close()

    def stream(self, write: Any, sent: int = 0) -> None:
        """Write every event from number ``sent`` on (all of them for a new page), then each new one as it
        comes, until the dashboard closes."""
        while True:
            with self.changed:
                if sent == len(self.events) and not self.closed:
                    self.changed.wait(KEEPALIVE_S)
                pending, closed = self.events[sent:], self.closed
            sent += len(pending)
            write("".join(pending) if pending else ": keepalive\n\n")
            if closed:
                write("event: closed\ndata: {}\n\n")
                return


def _handler(dashboard: Dashboard) -> type[BaseHTTPRequestHandler]:
    static = files("tinyflo") / "data"
    pages = {"/": ("dashboard.html", "text/html"), "/dashboard.js": ("dashboard.js", "text/javascript")}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            path = self.path.split("?", 1)[0]
            if path == "/events":
                self._events()
            elif path in pages:
                name, kind = pages[path]
                body = (static / name).read_text(encoding="utf-8").replace("{{title}}", dashboard.title)
                # the page's legends and table name columns as the Monitor's report does (JSON in a script)
                body = body.replace("{{labels}}", json.dumps(dashboard.labels).replace("</", "<\\/"))
                self._send(200, kind, body.encode())
            else:
                self._send(404, "text/plain", b"not found\n")

        def _send(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", f"{kind}; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _events(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()

            def write(text: str) -> None:
                self.wfile.write(text.encode())
                self.wfile.flush()

            last = self.headers.get("Last-Event-ID", "")  # sent by a page that reconnects
            try:
                dashboard.stream(write, int(last) + 1 if last.isdigit() else 0)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the page was closed

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # the training log is for training, not for HTTP requests

    return Handler

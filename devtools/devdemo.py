"""`./dev demo`: the notify server and the demo board's page on this machine, for development.

    ./dev demo                              # ws://127.0.0.1:8765 + http://127.0.0.1:8080
    ./dev demo --suspect-timeout 10         # a longer resume window (phones, a debugger)
    ./dev demo --store memory -- --ack-timeout 3   # after `--`: more `notify serve` flags

What runs, in this one process:

- `notify serve` exactly as the command line builds it (`notify.cli.main`, not a copy): the
  default store (SQLite in `--data-dir`, default `./data/demo`, so the demo's groups survive a
  restart and do not mix with `./dev serve`'s), its own JSON/console logs, and an origin
  allow-list holding only the page's origin (`http://127.0.0.1:PORT` and `http://localhost:PORT`).
- A static HTTP server (stdlib `http.server`, in a thread) for `--static-dir` (default
  `web/demo/dist`, the demo's build), plus `/config.json`: `{"url": "ws://127.0.0.1:8765"}`,
  where the page learns the WebSocket URL.

Port 0 means any free port (both); the URLs are printed once the server listens. Ctrl-C (or
SIGTERM) stops the notify server gracefully (`notify serve`'s own handling), then the HTTP server;
the exit status is `notify serve`'s.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from notify import cli

if TYPE_CHECKING:
    from notify.server.app import NotifyServer

__all__ = ["main"]

#: the demo's build, relative to the repository
DEFAULT_STATIC = Path(__file__).resolve().parent.parent / "web" / "demo" / "dist"

BUILD_HINT = ("build it: (cd web && npm run -w notify-board build); ./dev demo runs that itself "
              "once web/demo/build.mjs exists")


class _Handler(SimpleHTTPRequestHandler):
    """The static files, `/config.json`, and a clear 503 while the demo is not built."""

    config: dict[str, Any]
    static_dir: Path

    def __init__(self, *args: Any, config: dict[str, Any], static_dir: Path,
                 **kwargs: Any) -> None:
        self.config = config
        self.static_dir = static_dir
        super().__init__(*args, directory=str(static_dir), **kwargs)

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")  # a rebuilt page is seen at once
        super().end_headers()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/config.json":
            self._send(200, "application/json", json.dumps(self.config).encode())
        elif not (self.static_dir / "index.html").is_file():
            self._send(503, "text/plain; charset=utf-8",
                       f"the demo is not built ({self.static_dir} has no index.html): "
                       f"{BUILD_HINT}\n".encode())
        else:
            super().do_GET()

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the notify server's log is the one to read


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="./dev demo", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Other arguments (after --) go to `notify serve` as they are.")
    p.add_argument("--host", default="127.0.0.1", help="both servers (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="WebSocket port (default 8765)")
    p.add_argument("--http-port", type=int, default=8080, help="page port (default 8080)")
    p.add_argument("--suspect-timeout", type=float, default=None,
                   help="notify serve's resume window (its default: 3 s)")
    p.add_argument("--store", choices=["sqlite", "memory"], default=None,
                   help="notify serve's log (its default: sqlite)")
    p.add_argument("--data-dir", default="./data/demo", help="default ./data/demo")
    p.add_argument("--static-dir", type=Path, default=DEFAULT_STATIC,
                   help="the page's files (default web/demo/dist)")
    a, rest = p.parse_known_args(argv)
    if rest[:1] == ["--"]:
        rest = rest[1:]

    config: dict[str, Any] = {"url": None}
    handler = partial(_Handler, config=config, static_dir=a.static_dir)
    try:
        httpd = ThreadingHTTPServer((a.host, a.http_port), handler)
    except OSError as e:
        print(f"./dev demo: cannot serve the page on {a.host}:{a.http_port}: {e}", file=sys.stderr)
        return 2
    httpd.daemon_threads = True
    page = f"http://{a.host}:{httpd.server_address[1]}"
    origins = [page]
    if a.host == "127.0.0.1":
        origins.append(page.replace("127.0.0.1", "localhost"))
    thread = threading.Thread(target=httpd.serve_forever, name="devdemo-http", daemon=True)
    thread.start()
    if not (a.static_dir / "index.html").is_file():
        print(f"./dev demo: the demo is not built: {a.static_dir} has no index.html; "
              f"{BUILD_HINT}", file=sys.stderr, flush=True)

    def ready(server: NotifyServer) -> None:
        config["url"] = server.url
        print(f"\nnotify demo: open {page}/   (WebSocket {server.url}, config {page}/config.json;"
              " Ctrl-C stops both)\n", flush=True)

    serve = ["serve", "--host", a.host, "--port", str(a.port), "--data-dir", a.data_dir]
    if a.store is not None:
        serve += ["--store", a.store]
    if a.suspect_timeout is not None:
        serve += ["--suspect-timeout", str(a.suspect_timeout)]
    for origin in origins:
        serve += ["--origin", origin]
    try:
        return cli.main([*serve, *rest], on_ready=ready)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


if __name__ == "__main__":
    sys.exit(main())

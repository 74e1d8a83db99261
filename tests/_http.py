"""A real HTTP server (stdlib http.server in a thread) serving a directory: a read-only remote store
for the cache and build tests, on the loopback only."""
from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def serving(root: Path) -> Iterator[str]:
    """Serve `root` on 127.0.0.1 (a free port) for the block; yields the base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(the served directory, its URL): a read-only remote store for one test."""
    root = tmp_path / "served"
    root.mkdir()
    with serving(root) as url:
        yield root, url

"""scripts/serving.served, the server the benchmarks and the docs' screenshots drive: it waits
for /healthz, stops the server with what it forked, and names a server that never answers."""
from __future__ import annotations

import os
import sys
import urllib.request

import pytest

from scripts.serving import free_port, served


def test_a_server_that_dies_at_once_is_named_not_waited_for():
    port = free_port()
    with pytest.raises(RuntimeError, match=r"did not answer /healthz within 20 s \(exit status 3\)"):
        with served([sys.executable, "-c", "raise SystemExit(3)"], env=dict(os.environ), port=port, quiet=True, wait_s=20):
            pass


def test_it_yields_once_healthz_answers_and_stops_the_server_after(tmp_path):
    port = free_port()
    (tmp_path / "healthz").write_text("ok")  # python's http.server answers /healthz from this folder
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)]
    with served(argv, env=dict(os.environ), port=port, quiet=True) as base:
        assert base == f"http://127.0.0.1:{port}"
        assert urllib.request.urlopen(f"{base}/healthz", timeout=5).read() == b"ok"
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{base}/healthz", timeout=2)

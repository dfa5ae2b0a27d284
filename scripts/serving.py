"""A web server for a script that drives the app from outside (the load benchmarks, the grid
annotator benchmark, the docs' screenshots): started in a session of its own, waited for until
``/healthz`` answers, and stopped with everything it forked, whatever happens in between.

    with served(gunicorn_argv(port, workers=4), env=env, port=port) as base:
        ...  # base = "http://127.0.0.1:<port>"
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def runserver_argv(port: int) -> list[str]:
    """Django's development server (it serves the static files when DJANGO_DEBUG=1)."""
    return [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]


def gunicorn_argv(port: int, *, workers: int, threads: int = 1, keep_alive: int | None = None) -> list[str]:
    """Gunicorn as deployed (docker-compose.yml): ``workers`` processes of ``threads`` threads."""
    argv = [str(Path(sys.executable).parent / "gunicorn"), "curation.wsgi", "-w", str(workers), "-b", f"127.0.0.1:{port}",
            "--log-level", "warning"]
    if threads > 1:
        argv += ["--threads", str(threads)]
    if keep_alive is not None:
        argv += ["--keep-alive", str(keep_alive)]
    return argv


@contextmanager
def served(argv: Sequence[str], *, env: dict[str, str], port: int, quiet: bool = False, wait_s: float = 30.0,
           settle_s: float = 0.0) -> Iterator[str]:
    """Run ``argv`` (from the repository root, with ``env``) until the block ends; yields the base
    URL once ``/healthz`` answers. A server that never answers is stopped and named in the error."""
    out = subprocess.DEVNULL if quiet else None
    proc = subprocess.Popen(list(argv), cwd=REPO, env=env, stdout=out, stderr=out, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=1)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{Path(argv[0]).name} on port {port} did not answer /healthz within {wait_s:g} s "
                                       f"(exit status {proc.poll()}); run it by hand to see why: {' '.join(argv)}") from None
                time.sleep(0.2)
        time.sleep(settle_s)
        yield base
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen, *, grace_s: float = 30.0) -> None:
    """Stop a process started with ``start_new_session=True`` and everything it forked: SIGTERM
    to its group, then SIGKILL to what is left after ``grace_s`` seconds."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

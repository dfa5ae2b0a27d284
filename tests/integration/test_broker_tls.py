"""A ``rediss://`` (TLS) broker URL gets the workers' fixed Redis transport (curation/broker.py)
too, and keeps its TLS options: naming our transport class replaces kombu's ``rediss`` alias,
which is what switched kombu to TLS, so the settings ask for TLS themselves.

No TLS Redis runs here: the settings are loaded in a fresh process with the broker URL, the
connection Celery makes from them is inspected, and it is pointed at a listening socket that
records the first bytes the client sends: a TLS handshake record (0x16) for ``rediss://``, a
Redis command (``*``) for ``redis://``."""
from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import threading

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration

PROBE = r"""
import json, ssl
import django
django.setup()
from django.conf import settings
from curation.celery import app
conn = app.connection_for_write(transport_options={**app.conf.broker_transport_options,
                                                   "socket_connect_timeout": 5, "socket_timeout": 5})
out = {"transport_setting": getattr(settings, "CELERY_BROKER_TRANSPORT", None),
       "transport": type(conn.transport).__module__ + "." + type(conn.transport).__name__,
       "ssl": {k: (v.name if isinstance(v, ssl.VerifyMode) else v) for k, v in conn.ssl.items()} if conn.ssl else None}
try:
    conn.default_channel
except Exception as exc:
    out["error"] = type(exc).__name__
print(json.dumps(out))
"""


class FirstBytes:
    """A socket on a free port that keeps the first bytes of each connection and hangs up."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.seen: list[bytes] = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    self.seen.append(conn.recv(64))
                except OSError:
                    self.seen.append(b"")


def probe(broker_url: str) -> dict:
    env = {**os.environ, "CELERY_BROKER_URL": broker_url, "DJANGO_SETTINGS_MODULE": "curation.settings"}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def listener():
    server = FirstBytes()
    yield server
    server.sock.close()


def test_a_rediss_url_gets_our_transport_and_speaks_tls(listener):
    got = probe(f"rediss://127.0.0.1:{listener.port}/0")
    assert got["transport_setting"] == "curation.broker:Transport"
    assert got["transport"] == "curation.broker.Transport"
    assert got["ssl"] == {"ssl_cert_reqs": "CERT_REQUIRED"}  # nothing in the URL: the server's certificate is checked
    assert listener.seen and all(b[:1] == b"\x16" for b in listener.seen), listener.seen  # TLS handshake records


def test_the_tls_options_of_a_rediss_url_are_kept(listener, tmp_path):
    ca = tmp_path / "ca.pem"
    got = probe(f"rediss://127.0.0.1:{listener.port}/0?ssl_cert_reqs=optional&ssl_ca_certs={ca}")
    assert got["transport"] == "curation.broker.Transport"
    assert got["ssl"] == {"ssl_cert_reqs": "CERT_OPTIONAL", "ssl_ca_certs": str(ca)}


def test_a_redis_url_keeps_our_transport_without_tls(listener):
    got = probe(f"redis://127.0.0.1:{listener.port}/0")
    assert got["transport"] == "curation.broker.Transport" and got["ssl"] is None
    assert listener.seen and all(b[:1] == b"*" for b in listener.seen), listener.seen  # plain Redis commands


def test_broker_ssl_options_read_the_url_and_refuse_a_plain_one():
    from curation.broker import broker_ssl_options

    assert broker_ssl_options("rediss://h:6380/0") == {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    assert broker_ssl_options("rediss://h:6380/0?ssl_cert_reqs=none") == {"ssl_cert_reqs": ssl.CERT_NONE}
    with pytest.raises(ValueError, match="rediss://"):
        broker_ssl_options("redis://h:6379/0")


def test_kombu_alone_gives_rediss_its_own_class():
    """What the settings replace: left to itself kombu picks its own class for rediss://."""
    from kombu import Connection

    from curation.broker import Transport

    conn = Connection("rediss://127.0.0.1:1/0")
    assert type(conn.transport) is not Transport and conn.transport_cls == "rediss"

"""The Redis broker transport the workers use: kombu's, with one fault closed (issue 38).

When a worker loses Redis (a restart), Celery closes the broken connection, and kombu's channel
tries, while closing, to put the messages the worker holds unacknowledged back on their queues.
In kombu 5.7 that close can run after the connection has already let go of its settings, and the
attempt then fails with ``AttributeError: 'NoneType' object has no attribute 'hostname'``. Celery
only ignores connection errors there, so the worker stopped with "Unrecoverable error", and a job
whose chunks it held (tasks waiting for a retry after a PostgreSQL outage, the task in flight)
stayed running with no worker. Seen in tests/integration/test_service_restart.py.

The same fault stopped the worker a moment later, after it had reconnected, when the task that
was running as Redis went away finished and its acknowledgement went to the closed channel
(``'NoneType' object has no attribute 'client'``).

Here a channel whose connection is gone gives up the restore, the acknowledgement or the
rejection, and the worker reconnects as it does for any other broker error. Nothing is lost:
the messages are still in Redis' set of unacknowledged messages, and the unacked sweep
(``unacked_restore_interval``) puts them back on their queues once ``visibility_timeout`` has
passed since they were delivered (acks_late). A step delivered again is idempotent: a chunk that
is done is skipped, and the chunk leases keep a chunk from being worked on twice at once.

Chosen by settings.CELERY_BROKER_TRANSPORT for ``redis://`` and ``rediss://`` (TLS) broker URLs.
Naming the transport class replaces kombu's scheme alias, and with it kombu's switch to TLS for
the ``rediss`` scheme, so for a ``rediss://`` URL the settings also pass the TLS options
(``broker_ssl_options``: the URL's ``ssl_*`` query options, the server's certificate verified
when the URL names none, as redis-py does for ``rediss://``).
"""
from __future__ import annotations

import logging
import ssl

from kombu.transport import redis, virtual
from kombu.utils.url import parse_url

log = logging.getLogger("curation.broker")


class QoS(redis.QoS):
    """Ack emulation that leaves a message in Redis when the channel's connection is torn down."""

    def _torn_down(self) -> bool:
        transport = self.channel.connection
        return transport is None or getattr(transport, "client", None) is None

    def restore_unacked(self, client=None):
        if client is None and self._torn_down():
            if self._delivered:
                log.warning("broker connection lost: %d unacknowledged message(s) stay in Redis and are delivered again "
                            "after the visibility timeout", len(self._delivered))
            self._delivered.clear()
            return None
        return super().restore_unacked(client)

    def ack(self, delivery_tag):
        # a task that finished after its channel was closed (it was running when Redis went away)
        if self._torn_down():
            log.warning("broker connection lost: message %s could not be acknowledged; Redis delivers it again after the "
                        "visibility timeout (its step, done, is then skipped)", delivery_tag)
            return virtual.QoS.ack(self, delivery_tag)
        return super().ack(delivery_tag)

    def reject(self, delivery_tag, requeue=False):
        if self._torn_down():
            log.warning("broker connection lost: message %s could not be rejected; Redis delivers it again after the "
                        "visibility timeout", delivery_tag)
            return virtual.QoS.ack(self, delivery_tag)
        return super().reject(delivery_tag, requeue=requeue)


class Channel(redis.Channel):
    QoS = QoS


class Transport(redis.Transport):
    Channel = Channel


def broker_ssl_options(url: str) -> dict:
    """The TLS options for a ``rediss://`` broker URL: its ``ssl_*`` query options (for example
    ``?ssl_cert_reqs=required&ssl_ca_certs=/etc/ssl/redis-ca.pem``) as kombu reads them, and the
    server's certificate required when the URL says nothing (kombu's own default for a bare
    ``rediss://`` is to skip verification, with a warning)."""
    if not url.startswith("rediss://"):
        raise ValueError(f"CELERY_BROKER_URL: TLS options belong to a rediss:// URL, not {url.split('://')[0]}://")
    options = dict(parse_url(url).get("ssl") or {})
    options.setdefault("ssl_cert_reqs", ssl.CERT_REQUIRED)
    return options

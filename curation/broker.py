"""The Redis broker transport the workers use: kombu's, with one fault closed (issue 38).

When a worker loses Redis (a restart), Celery closes the broken connection, and kombu's channel
tries, while closing, to put the messages the worker holds unacknowledged back on their queues.
In kombu 5.7 that close can run after the connection has already let go of its settings, and the
attempt then fails with ``AttributeError: 'NoneType' object has no attribute 'hostname'``. Celery
only ignores connection errors there, so the worker stopped with "Unrecoverable error", and a job
whose chunks it held (tasks waiting for a retry after a PostgreSQL outage, the task in flight)
stayed running with no worker. Seen in tests/integration/test_service_restart.py.

Here the channel gives up that restore when its connection is gone, and the worker reconnects as
it does for any other broker error. Nothing is lost: the messages are still in Redis' set of
unacknowledged messages, and the unacked sweep (``unacked_restore_interval``) puts them back on
their queues once ``visibility_timeout`` has passed since they were delivered (acks_late); the
chunk leases keep a chunk delivered twice from being worked on twice.

Chosen by settings.CELERY_BROKER_TRANSPORT for ``redis://`` broker URLs.
"""
from __future__ import annotations

import logging

from kombu.transport import redis

log = logging.getLogger("curation.broker")


class QoS(redis.QoS):
    def restore_unacked(self, client=None):
        if client is None and getattr(self.channel.connection, "client", None) is None:
            if self._delivered:
                log.warning("broker connection lost: %d unacknowledged message(s) stay in Redis and are delivered again "
                            "after the visibility timeout", len(self._delivered))
            self._delivered.clear()
            return None
        return super().restore_unacked(client)


class Channel(redis.Channel):
    QoS = QoS


class Transport(redis.Transport):
    Channel = Channel

"""The workers' Redis transport (curation/broker.py) with real Redis and kombu: a channel whose
connection is torn down while it holds unacknowledged messages (a worker that lost Redis) leaves
them in Redis, where the unacked sweep gives them back after the visibility timeout, instead of
raising AttributeError, which stopped the worker ("Unrecoverable error"). The whole story, a
worker living through a Redis restart under a job, is tests/integration/test_service_restart.py."""
from __future__ import annotations

import os
import time

import pytest
import redis
from kombu import Connection, Exchange, Queue

pytestmark = pytest.mark.integration

OURS = "curation.broker:Transport"


@pytest.fixture
def url():
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        pytest.fail("integration tests need Redis: run scripts/test.sh, or set TEST_REDIS_URL=redis://127.0.0.1:6379/15")
    redis.Redis.from_url(url).flushdb()
    yield url
    redis.Redis.from_url(url).flushdb()


def holding_two(url: str, transport: str | None):
    """A connection whose channel took two messages and acknowledged neither (acks_late)."""
    conn = Connection(url, transport=transport, transport_options={"visibility_timeout": 1})
    channel = conn.default_channel
    queue = Queue("probe", Exchange("probe", type="direct"), routing_key="probe")
    with Connection(url) as publisher:
        producer = publisher.Producer()
        for step in range(2):
            producer.publish({"step": step}, exchange=queue.exchange, routing_key="probe", declare=[queue])
    messages = [queue(channel).get(no_ack=False) for _ in range(2)]
    assert all(messages) and len(channel.qos._delivered) == 2
    return conn, channel, messages


@pytest.mark.parametrize("transport", [OURS, None], ids=["ours", "kombu"])
def test_a_torn_down_channel_leaves_its_unacknowledged_messages_to_redis(url, transport):
    conn, channel, (running, _held) = holding_two(url, transport)
    # what kombu's Connection leaves once it has let go of its transport (Celery's clean-up of a
    # lost broker connection), while the channel is still to be closed
    conn.transport.client = None
    if transport is None:  # kombu's own transport: the AttributeError that stopped the worker
        with pytest.raises(AttributeError, match="hostname"):
            channel.close()
        return
    channel.close()  # the restore is given up
    running.ack()  # the task that was running finishes after the close: its ack is given up too
    r = redis.Redis.from_url(url)
    assert r.hlen("unacked") == 2 and r.llen("probe") == 0  # both stay in Redis, unacknowledged
    time.sleep(1.2)  # past the visibility timeout, the sweep of any worker gives them back
    with Connection(url, transport=OURS, transport_options={"visibility_timeout": 1}) as other:
        other.default_channel.qos.restore_visible(num=10, interval=1)
    assert r.llen("probe") == 2 and r.hlen("unacked") == 0

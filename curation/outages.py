"""What an outage looks like: an exception that says the database or the broker is unreachable
(PostgreSQL or Redis restarting), not a bug. The web app answers such requests 503 with
Retry-After (labeling_ui.http.server_error); a job step hit by one is not failed but retried
when the service is back (curation/tasks.py), or resumed once stale."""
from __future__ import annotations


def outage_types() -> tuple[type, ...]:
    from django.db import InterfaceError, OperationalError

    kinds: list[type] = [OperationalError, InterfaceError]
    try:
        import redis

        kinds += [redis.exceptions.ConnectionError, redis.exceptions.TimeoutError]
    except ImportError:  # pragma: no cover
        pass
    try:
        import kombu.exceptions

        kinds.append(kombu.exceptions.OperationalError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(kinds)


def is_outage(exc: BaseException | None) -> bool:
    """``exc`` or one of its causes (Celery and Django wrap the driver's errors) is an outage."""
    kinds = outage_types()
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, kinds):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False

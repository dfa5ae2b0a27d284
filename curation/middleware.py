"""Server-Timing: every response says how long the application took (``app;dur=<ms>``), so
browsers' dev tools and the load benchmark see server time apart from the network."""
from __future__ import annotations

import time


class ServerTimingMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        start = time.perf_counter()
        response = self.get_response(request)
        response["Server-Timing"] = f"app;dur={(time.perf_counter() - start) * 1000:.2f}"
        return response


class PathIdMiddleware:
    """The one rule for integers in paths (``pipelines.numbers``), for every route: a ``<int:...>``
    value beyond a 64-bit integer names no row, so the answer is 404, before any view hands it to
    the database (which refuses it: "bigint out of range"). New routes get the check unasked."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        from django.http import Http404

        from pipelines.numbers import INT64_MAX

        for name, value in view_kwargs.items():
            if isinstance(value, int) and not isinstance(value, bool) and not -INT64_MAX - 1 <= value <= INT64_MAX:
                raise Http404(f"{name} {str(value)[:40]} is beyond any row id")
        return None

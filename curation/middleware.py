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

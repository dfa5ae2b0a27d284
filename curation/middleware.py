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


class RequestRulesMiddleware:
    """Rules every route gets without asking (so a new route has them too):

    - an integer in the path (``<int:...>``) beyond a 64-bit integer names no row: 404, before any
      view hands it to the database, which refuses it ("bigint out of range"); the one integer
      rule is ``pipelines.numbers``;
    - a NUL character in the path, the query, a form or a JSON body is refused with 400: no text
      the toolkit keeps may hold one, and PostgreSQL refuses it in any string ("A string literal
      cannot contain NUL")."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        from django.http import HttpResponseBadRequest

        if self._has_nul(request):
            return HttpResponseBadRequest("the request holds a NUL character (\\x00), which no name, note or number may contain\n",
                                          content_type="text/plain; charset=utf-8")
        return self.get_response(request)

    @staticmethod
    def _has_nul(request) -> bool:
        if "\x00" in request.path:
            return True
        for key, values in request.GET.lists():
            if "\x00" in key or any("\x00" in v for v in values):
                return True
        ctype = request.content_type or ""
        if request.method == "POST" and ctype in ("application/x-www-form-urlencoded", "multipart/form-data"):
            request.body  # noqa: B018  (kept, so a view may still read the raw body after the form is parsed from it)
            for key, values in request.POST.lists():
                if "\x00" in key or any("\x00" in v for v in values):
                    return True
        elif request.method == "POST" and ctype == "application/json":
            body = request.body
            return b"\x00" in body or b"\\u0000" in body
        return False

    def process_view(self, request, view_func, view_args, view_kwargs):
        from django.http import Http404

        from pipelines.numbers import INT64_MAX

        for name, value in view_kwargs.items():
            if isinstance(value, int) and not isinstance(value, bool) and not -INT64_MAX - 1 <= value <= INT64_MAX:
                raise Http404(f"{name} {str(value)[:40]} is beyond any row id")
        return None

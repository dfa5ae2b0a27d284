"""What the admin modules share: read-only record admins, the stale-job filter, action forms,
and the number fields of the admin's forms."""
import math
import re

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.paginator import Paginator
from django.template.response import TemplateResponse
from django.utils.functional import cached_property

from curation import jobs
from curation.selectors.browse import estimated_count  # the one estimate: the image browser's count too
from pipelines.numbers import INT64_MAX, whole_number

_DECIMAL = re.compile(r"-?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][-+]?[0-9]{1,3})?\Z", re.ASCII)


class WholeNumberField(forms.IntegerField):
    """Django's IntegerField reads text with int(), which takes Unicode digits (``٣``), ``1_000``
    and ``5.0``, unbounded: here the one rule for integers from users (pipelines.numbers:
    ASCII digits, a leading ``-`` at most, within a signed 64-bit integer), then the field's own
    min_value / max_value."""

    def to_python(self, value):
        if value in self.empty_values:
            return None
        try:
            return whole_number(value.strip() if isinstance(value, str) else value, self.label or "this number",
                                lo=-INT64_MAX - 1, hi=INT64_MAX)
        except ValueError:
            raise forms.ValidationError("Enter a whole number written in digits 0-9.", code="invalid") from None


class DecimalNumberField(forms.FloatField):
    """A decimal written in ASCII digits (``0.5``, ``-2``, ``1e-3``), finite: float() would also
    take ``nan``, ``1_0`` and Unicode digits."""

    def to_python(self, value):
        if value in self.empty_values:
            return None
        text = str(value).strip()
        if not _DECIMAL.match(text) or not math.isfinite(float(text)):
            raise forms.ValidationError("Enter a number written in digits 0-9 (e.g. 0.5 or 1e-3).", code="invalid")
        return float(text)


class StaleFilter(admin.SimpleListFilter):
    title = "liveness"
    parameter_name = "liveness"

    def lookups(self, request, model_admin):
        return [("stale", "stale (no worker reporting)")]

    def queryset(self, request, queryset):
        return queryset.filter(jobs.stale_filter()) if self.value() == "stale" else queryset


class RecordAdmin(admin.ModelAdmin):
    """Rows the pipeline writes: every field read-only, none added by hand."""

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False


ESTIMATE_ABOVE = 100_000  # rows: below, a list counts exactly; above, the planner's estimate stands in


class EstimatedCountPaginator(Paginator):
    """A change list's pages without COUNT(*) over a big table: where the planner expects more
    than ESTIMATE_ABOVE rows its estimate is the count (``estimated`` says so, and the list's
    header reads "about"); below that, the exact count, which is then cheap. COUNT(*) over 13
    million images reads every row (seconds); the estimate reads the statistics (milliseconds)."""

    estimated = False

    @cached_property
    def count(self) -> int:
        guess = estimated_count(self.object_list) if hasattr(self.object_list, "query") else None
        if guess is not None and guess > ESTIMATE_ABOVE:
            self.estimated = True
            return guess
        return super().count


class ErrorCodeFilter(admin.SimpleListFilter):
    """An image list's error codes, read among the images that are not ok (the status index),
    never by a scan of every image's code."""

    title = "error code"
    parameter_name = "error_code"

    def lookups(self, request, model_admin):
        from curation.models import Image

        codes = (Image.objects.filter(status__in=[s for s in Image.Status.values if s != Image.Status.OK]).exclude(error_code="")
                 .order_by().values_list("error_code", flat=True).distinct())
        return [(c, c) for c in sorted(codes)]

    def queryset(self, request, queryset):
        return queryset.filter(error_code=self.value()) if self.value() else queryset


class LargeTableAdmin(admin.ModelAdmin):
    """The change list of a table that grows with the pool (images, predictions, reviews...):
    no full count beside the filtered one, and the filtered one estimated where it is large
    (issue 45). Filters on such a list must not read distinct values over the table."""

    show_full_result_count = False
    paginator = EstimatedCountPaginator


class NoChange:
    def has_change_permission(self, request, obj=None):
        return False


class NoDelete:
    def has_delete_permission(self, request, obj=None):
        return False


def only_one(modeladmin, request, queryset, message: str):
    """The single selected row of an action that works on one, or None (and ``message`` shown)."""
    if queryset.count() != 1:
        modeladmin.message_user(request, message, messages.ERROR)
        return None
    return queryset.get()


def action_form(modeladmin, request, queryset, *, form_class, title, intro, submit):
    """An admin action's intermediate page: show ``form_class`` for the selected rows; once it
    is posted back valid, call ``submit(cleaned_data)`` and return to the list."""
    form = form_class(request.POST if "apply" in request.POST else None)
    if "apply" in request.POST and form.is_valid():
        submit(form.cleaned_data)
        return None
    context = {
        **modeladmin.admin_site.each_context(request), "title": title, "intro": intro, "form": form,
        "queryset": queryset[:50], "count": queryset.count(), "action": request.POST.get("action", ""),
        "opts": modeladmin.model._meta, "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"),
    }
    return TemplateResponse(request, "admin/curation/action_form.html", context)


def redirect_to(url: str):
    from django.http import HttpResponseRedirect

    return HttpResponseRedirect(url)

"""Jobs and their chunks (stale ones resumed from here) and the audit log."""
from django.contrib import admin, messages
from django.utils.html import format_html

from curation import jobs
from curation.admin._common import LargeTableAdmin, NoChange, NoDelete, RecordAdmin, StaleFilter
from curation.models import (
    AuditLog,
    Job,
    JobChunk,
)
from curation.roles import has_role


@admin.register(Job)


class JobAdmin(LargeTableAdmin, RecordAdmin):
    list_display = ("id", "kind", "source", "state", "progress_bar", "last_sign", "created_by", "created_at", "finished_at")
    list_filter = ("kind", "status", StaleFilter)
    actions = ["resume_jobs"]

    @admin.display(description="progress")
    def progress_bar(self, obj):
        return format_html('<progress max="100" value="{}"></progress> {}/{}', obj.percent, obj.progress, obj.total)

    @admin.display(description="state")
    def state(self, obj):
        st = jobs.state(obj)
        if st == "stale":
            return format_html('<strong style="color:#b00">stale</strong> <small>(no worker for {} s: resume it)</small>',
                               jobs.silent_for(obj))
        return st

    @admin.display(description="last sign of life")
    def last_sign(self, obj):
        if obj.status in (Job.Status.DONE, Job.Status.FAILED):
            return ""
        return f"{jobs.silent_for(obj)} s ago" + (f" ({obj.worker})" if obj.worker else "")

    @admin.action(description="Resume the selected stale jobs (from where they stopped)")
    def resume_jobs(self, request, queryset):
        if not request.user.is_staff:
            from django.core.exceptions import PermissionDenied

            raise PermissionDenied
        done, refused = [], []
        for job in queryset.order_by("pk"):
            role = jobs.kind_of(job.kind).role  # a curator's stage needs a curator, an evaluation a researcher
            if not has_role(request.user, role):
                refused.append(f"job #{job.pk} ({job.kind}): resuming it needs the {role} role; it is left as it is")
                continue
            try:
                r = jobs.resume(job, user=request.user, background=True)
            except jobs.JobNotResumable as exc:
                refused.append(str(exc))
                continue
            except Exception as exc:  # an inline resume that failed: the job records it
                refused.append(f"job #{job.pk}: {type(exc).__name__}: {exc}")
                continue
            done.append(f"#{job.pk} " + (f"{jobs.where_queued()} ({r.queued} step(s))" if r.queued
                                         else f"run to {Job.objects.get(pk=job.pk).status}"))
        if done:
            self.message_user(request, "Resumed: " + "; ".join(done), messages.SUCCESS)
        for line in refused:
            self.message_user(request, line, messages.WARNING)


@admin.register(JobChunk)


class JobChunkAdmin(LargeTableAdmin, RecordAdmin):
    list_display = ("job", "index", "done", "attempts", "done_at")
    list_filter = ("done",)


@admin.register(AuditLog)


class AuditLogAdmin(NoDelete, NoChange, LargeTableAdmin, RecordAdmin):
    list_display = ("created_at", "actor", "action", "target_type", "target_id")
    list_select_related = ("actor",)
    list_filter = ("action", "target_type")
    search_fields = ("target_id", "actor__username")

from django.contrib import admin, messages
from django.utils.html import format_html

from curation.models import AuditLog, CandidateClass, IdClassSet, Image, Job, JobChunk, Source
from curation.services.ingest import IngestAlreadyRunning, ingest_start


@admin.register(IdClassSet)
class IdClassSetAdmin(admin.ModelAdmin):
    list_display = ("name", "spec", "n_classes", "is_default", "created_at")
    readonly_fields = ("wnids", "created_by", "created_at")

    @admin.display(description="classes")
    def n_classes(self, obj):
        return len(obj.wnids)


@admin.register(Source)
class SourceAdmin(admin.ModelAdmin):
    list_display = ("name", "role", "root", "created_at")
    list_filter = ("role",)
    search_fields = ("name", "root")
    readonly_fields = ("root", "created_by", "created_at")
    actions = ["rescan"]

    def has_add_permission(self, request):
        # Roots are server paths: sources are registered with `manage.py add_source`, where the
        # operator's own file permissions apply.
        return False

    @admin.action(description="Re-scan and ingest the selected sources", permissions=["change"])
    def rescan(self, request, queryset):
        for source in queryset:
            try:
                job = ingest_start(source=source, user=request.user)
            except IngestAlreadyRunning as exc:
                self.message_user(request, str(exc), messages.WARNING)
            else:
                self.message_user(request, f"Ingest job #{job.pk} started for {source.name}")


@admin.register(CandidateClass)
class CandidateClassAdmin(admin.ModelAdmin):
    list_display = ("folder", "source", "wnid", "synset_name", "mapping")
    list_filter = ("source", "mapping")
    search_fields = ("folder", "wnid", "synset_name", "gloss")
    readonly_fields = ("source", "folder")


@admin.register(Image)
class ImageAdmin(admin.ModelAdmin):
    list_display = ("relative_path", "source", "status", "error_code", "width", "height", "format", "mode", "bytes")
    list_filter = ("source", "status", "error_code", "format", "mode")
    search_fields = ("relative_path", "sha256")
    list_select_related = ("source",)
    readonly_fields = [f.name for f in Image._meta.fields]
    show_full_result_count = False

    def has_add_permission(self, request):
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "source", "status", "progress_bar", "created_by", "created_at", "finished_at")
    list_filter = ("kind", "status")
    readonly_fields = [f.name for f in Job._meta.fields]

    @admin.display(description="progress")
    def progress_bar(self, obj):
        return format_html('<progress max="100" value="{}"></progress> {}/{}', obj.percent, obj.progress, obj.total)

    def has_add_permission(self, request):
        return False


@admin.register(JobChunk)
class JobChunkAdmin(admin.ModelAdmin):
    list_display = ("job", "index", "done", "attempts", "done_at")
    list_filter = ("done",)
    readonly_fields = [f.name for f in JobChunk._meta.fields]

    def has_add_permission(self, request):
        return False


@admin.register(AuditLog)
class AuditLogAdmin(admin.ModelAdmin):
    list_display = ("created_at", "actor", "action", "target_type", "target_id")
    list_filter = ("action", "target_type")
    search_fields = ("target_id", "actor__username")
    readonly_fields = [f.name for f in AuditLog._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

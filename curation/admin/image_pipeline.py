"""Predictions, class-level visual-ambiguity signals and feature shards."""
from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from curation.admin._common import LargeTableAdmin, NoChange, NoDelete, RecordAdmin
from curation.models import (
    ClassVisualSignal,
    DuplicateOverride,
    FeatureShard,
    ImageEmbedding,
)


class ModelNameFilter(admin.SimpleListFilter):
    title = "model"
    parameter_name = "model_name"

    def lookups(self, request, model_admin):
        from django.conf import settings

        names = set(FeatureShard.objects.values_list("model_name", flat=True).distinct()) | {settings.DEFAULT_MODEL}
        return [(n, n) for n in sorted(names)]

    def queryset(self, request, queryset):
        return queryset.filter(model_name=self.value()) if self.value() else queryset


class DropReasonFilter(admin.SimpleListFilter):
    title = "duplicate search"
    parameter_name = "dropped"
    CHOICES = {"kept": ("kept", ""), "near": ("near-duplicate of another image", "near_duplicate_of:"),
               "id": ("copy of an ID image", "duplicate_of_id:")}

    def lookups(self, request, model_admin):
        return [(k, label) for k, (label, _p) in self.CHOICES.items()]

    def queryset(self, request, queryset):
        if self.value() == "kept":
            return queryset.filter(drop_reason="")
        if self.value() in self.CHOICES:
            return queryset.filter(drop_reason__startswith=self.CHOICES[self.value()][1])
        return queryset


@admin.register(ImageEmbedding)


class ImageEmbeddingAdmin(NoDelete, NoChange, LargeTableAdmin, RecordAdmin):
    list_display = ("thumb", "image", "model_name", "top1", "msp", "duplicate", "similarity", "ok")
    # filters with fixed choices: Django's plain-field filter lists every distinct drop reason
    # (one per duplicate group) by a scan of every prediction
    list_filter = (ModelNameFilter, "ok", DropReasonFilter, "image__source")
    search_fields = ("image__relative_path", "top1_wnid", "drop_reason")
    list_select_related = ("image__source",)

    @admin.display(description="top-1", ordering="top1_prob")
    def top1(self, obj):
        return f"{obj.top1_wnid} ({obj.top1_prob:.2f})" if obj.ok and obj.top1_prob is not None else obj.error[:80]

    @admin.display(description="image")
    def thumb(self, obj):
        return format_html('<a href="{}"><img src="{}" width="56" height="56" alt="" style="object-fit:cover"></a>',
                           reverse("labeling_ui:image_detail", args=[obj.image_id]), reverse("labeling_ui:image_file", args=[obj.image_id, "thumb"]))

    @admin.display(description="max softmax", ordering="max_softmax")
    def msp(self, obj):
        return "" if obj.max_softmax is None else f"{obj.max_softmax:.3f}"

    @admin.display(description="similarity to ID", ordering="nearest_id_similarity")
    def similarity(self, obj):
        return "" if obj.nearest_id_similarity is None else f"{obj.nearest_id_similarity:.3f}"

    @admin.display(description="duplicate search", ordering="drop_reason")
    def duplicate(self, obj):
        if not obj.drop_reason:
            return "kept"
        return format_html('<a href="{}">{}</a>', reverse("labeling_ui:duplicate_group", args=[obj.image_id]),
                           obj.drop_reason.replace("_", " ").replace(":", " image "))


@admin.register(DuplicateOverride)


class DuplicateOverrideAdmin(NoDelete, NoChange, RecordAdmin):
    """A curator's corrections of the duplicate search: made and undone on the duplicate-group page (which re-applies them)."""

    list_display = ("image", "model_name", "action", "note", "created_by", "created_at")
    list_filter = ("action", "model_name")
    list_select_related = ("image__source", "created_by")


@admin.register(ClassVisualSignal)


class ClassVisualSignalAdmin(NoChange, RecordAdmin):
    list_display = ("candidate_class", "model_name", "top_label", "top_wnid", "share", "n_images", "flagged", "reason")
    list_filter = ("flagged", "model_name")
    list_select_related = ("candidate_class__source",)

    @admin.display(description="share", ordering="top_share")
    def share(self, obj):
        return f"{obj.top_share:.0%}"


@admin.register(FeatureShard)


class FeatureShardAdmin(NoChange, RecordAdmin):
    list_display = ("path", "model_name", "rows", "dim", "job", "created_at")
    list_filter = ("model_name",)

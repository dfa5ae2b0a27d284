"""Predictions, class-level visual-ambiguity signals and feature shards."""
from django.contrib import admin

from curation.admin._common import NoChange, NoDelete, RecordAdmin
from curation.models import (
    ClassVisualSignal,
    FeatureShard,
    ImageEmbedding,
)


@admin.register(ImageEmbedding)


class ImageEmbeddingAdmin(NoDelete, NoChange, RecordAdmin):
    list_display = ("image", "model_name", "top1", "max_softmax", "drop_reason", "nearest_id_similarity", "ok")
    list_filter = ("model_name", "ok", "drop_reason", "image__source")
    search_fields = ("image__relative_path", "top1_wnid", "drop_reason")
    list_select_related = ("image__source",)
    show_full_result_count = False

    @admin.display(description="top-1", ordering="top1_prob")
    def top1(self, obj):
        return f"{obj.top1_wnid} ({obj.top1_prob:.2f})" if obj.ok and obj.top1_prob is not None else obj.error[:80]


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

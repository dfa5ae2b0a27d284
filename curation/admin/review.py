"""Review settings, annotator scopes, the review queue, reviews and assignments."""
from django import forms
from django.contrib import admin
from django.contrib.auth.models import User

from curation.admin._common import LargeTableAdmin, NoChange, NoDelete, RecordAdmin
from curation.audit import audit_record
from curation.models import (
    AnnotatorScope,
    Assignment,
    Review,
    ReviewItem,
    ReviewSettings,
    Source,
)
from curation.services.review import review_items_set_gold, review_scope_apply, review_settings_save


@admin.register(ReviewSettings)
class ReviewSettingsAdmin(admin.ModelAdmin):
    list_display = ("source", "candidate_class", "reviews_required", "order", "group_classes", "gold_rate", "updated_by", "updated_at")
    list_filter = ("source", "order")
    autocomplete_fields = ("candidate_class",)
    readonly_fields = ("updated_by", "updated_at")

    def save_model(self, request, obj, form, change):
        # the model's check constraints were validated by the form; this also applies it to the queue
        saved = review_settings_save(source=obj.source, candidate_class=obj.candidate_class, reviews_required=obj.reviews_required,
                                     order=obj.order, gold_rate=obj.gold_rate, group_classes=obj.group_classes, user=request.user)
        obj.pk = saved.pk


class AnnotatorScopeForm(forms.ModelForm):
    class Meta:
        model = AnnotatorScope
        fields = ("annotator", "source", "candidate_class")

    def clean(self):
        data = super().clean()
        cc, source = data.get("candidate_class"), data.get("source")
        if cc is not None and source is not None and cc.source_id != source.pk:
            raise forms.ValidationError(f"class {cc.folder} belongs to {cc.source.name}, not {source.name}")
        return data


@admin.register(AnnotatorScope)
class AnnotatorScopeAdmin(admin.ModelAdmin):
    form = AnnotatorScopeForm
    list_display = ("annotator", "source", "candidate_class", "created_by", "created_at")
    list_filter = ("source",)
    autocomplete_fields = ("candidate_class",)
    readonly_fields = ("created_by", "created_at")

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "annotator":
            from django.contrib.auth.models import User

            kwargs["queryset"] = User.objects.filter(groups__name="annotator").order_by("username")
        if db_field.name == "source":
            kwargs["queryset"] = Source.objects.filter(role=Source.Role.CANDIDATE)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    # a changed scope applies at once: images leased outside it go back to the queue

    def delete_queryset(self, request, queryset):
        annotators = {s.annotator for s in queryset.select_related("annotator")}
        super().delete_queryset(request, queryset)
        for annotator in annotators:
            review_scope_apply(annotator=annotator, user=request.user)

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user
        old = AnnotatorScope.objects.filter(pk=obj.pk).values_list("annotator_id", flat=True).first() if change else None
        super().save_model(request, obj, form, change)
        audit_record(actor=request.user, action="annotator_scope_saved", target=obj,
                     data={"annotator": obj.annotator.username, "source": obj.source.name,
                           "class": obj.candidate_class.folder if obj.candidate_class_id else None})
        for annotator in {obj.annotator, *([User.objects.get(pk=old)] if old and old != obj.annotator_id else [])}:
            review_scope_apply(annotator=annotator, user=request.user)

    def delete_model(self, request, obj):
        audit_record(actor=request.user, action="annotator_scope_deleted", target=obj, data={"annotator": obj.annotator.username})
        super().delete_model(request, obj)
        review_scope_apply(annotator=obj.annotator, user=request.user)


class ReviewInline(admin.TabularInline):
    model = Review
    fields = ("annotator", "decision", "id_wnids", "note", "seconds", "is_gold", "gold_correct", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(ReviewItem)
class ReviewItemAdmin(NoDelete, LargeTableAdmin, RecordAdmin):
    list_display = ("image", "source", "candidate_class", "status", "done", "required", "leased", "final_decision", "is_gold")
    list_select_related = ("image__source", "source", "candidate_class__source")
    list_filter = ("status", "final_decision", "is_gold", "source")
    search_fields = ("image__relative_path",)
    inlines = [ReviewInline]
    actions = ["make_gold", "unmake_gold"]

    @admin.action(description="Use as gold (known answers; complete or adjudicated images only)", permissions=["gold"])
    def make_gold(self, request, queryset):
        n = review_items_set_gold(item_ids=queryset.values_list("pk", flat=True), gold=True, user=request.user)
        self.message_user(request, f"{n} image(s) are now gold.")

    @admin.action(description="Stop using as gold", permissions=["gold"])
    def unmake_gold(self, request, queryset):
        n = review_items_set_gold(item_ids=queryset.values_list("pk", flat=True), gold=False, user=request.user)
        self.message_user(request, f"{n} image(s) are no longer gold.")

    def has_gold_permission(self, request):
        return request.user.has_perm("curation.change_reviewsettings")


@admin.register(Review)
class ReviewAdmin(NoDelete, NoChange, LargeTableAdmin, RecordAdmin):
    list_display = ("item", "annotator", "decision", "is_gold", "gold_correct", "seconds", "created_at")
    list_select_related = ("item", "annotator")
    list_filter = ("decision", "is_gold", "annotator")


@admin.register(Assignment)
class AssignmentAdmin(NoDelete, NoChange, LargeTableAdmin, RecordAdmin):
    list_display = ("item", "annotator", "state", "is_gold", "leased_at", "expires_at", "finished_at")
    list_select_related = ("item", "annotator")
    list_filter = ("state", "is_gold")

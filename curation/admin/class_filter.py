"""Class filter runs, their decisions (flags resolved here) and pinned overrides."""
from django import forms
from django.conf import settings
from django.contrib import admin
from django.db.models import F
from django.urls import reverse
from django.utils.html import format_html

from curation.admin._common import NoChange, NoDelete, RecordAdmin, action_form
from curation.models import (
    ClassDecision,
    ClassFilterRun,
    ClassOverride,
)
from curation.services.class_filter import (
    ClassDecisionError,
    class_decisions_resolve,
    class_override_pin,
    class_override_unpin,
)


@admin.register(ClassFilterRun)


class ClassFilterRunAdmin(NoChange, RecordAdmin):
    # runs start from `manage.py filter_classes` or the Source list's action
    list_display = ("id", "candidates_spec", "id_spec", "policy_name", "job_status", "summary", "report_link", "created_by", "created_at")
    list_filter = ("policy_name", "source")
    list_select_related = ("job", "created_by")

    @admin.display(description="status")
    def job_status(self, obj):
        return format_html('<progress max="100" value="{}"></progress> {}', obj.job.percent, obj.job.status)

    @admin.display(description="decisions")
    def summary(self, obj):
        d = obj.counts.get("decision", {})
        return f"keep {d.get('keep', 0)} / flag {d.get('flag', 0)} / remove {d.get('remove', 0)}" if d else ""

    @admin.display(description="report")
    def report_link(self, obj):
        return format_html('<a href="{}">report</a> · <a href="{}">decisions</a>',
                           reverse("labeling_ui:class_filter_report", args=[obj.pk]),
                           reverse("admin:curation_classdecision_changelist") + f"?run__id__exact={obj.pk}")


class NoteForm(forms.Form):
    note = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3, "cols": 80}), help_text="Recorded in the audit log")


@admin.register(ClassDecision)


class ClassDecisionAdmin(NoDelete, RecordAdmin):
    list_display = ("name", "wnid_or_folder", "decision", "strength", "rule", "related_name", "closest_id", "short_detail",
                    "resolution", "n_images", "run")
    list_filter = ("decision", "flag_level", "rule", "rule_decision", "resolution", "run")
    ordering = ("run", F("flag_strength").desc(nulls_last=True), "position")
    search_fields = ("wnid", "key", "name", "synset", "detail")
    list_select_related = ("run",)
    actions = ["resolve_keep", "resolve_remove", "pin_allow", "pin_deny"]
    show_full_result_count = False
    list_per_page = 100

    @admin.display(description="wnid / folder", ordering="wnid")
    def wnid_or_folder(self, obj):
        return obj.wnid or obj.key

    @admin.display(description="flag strength", ordering="flag_strength")
    def strength(self, obj):
        return f"{obj.flag_level} {obj.flag_strength:.2f}" if obj.flag_strength is not None else "-"

    @admin.display(description="closest ID class (similarity)", ordering="semantic_similarity")
    def closest_id(self, obj):
        if not obj.closest_id_wnid:
            return "-"
        return f"{obj.closest_id_name} {obj.closest_id_wnid} ({obj.semantic_similarity:.3f}, path {obj.path_distance})"

    @admin.display(description="detail")
    def short_detail(self, obj):
        return obj.detail if len(obj.detail) < 220 else obj.detail[:220] + "..."

    def _resolve(self, request, queryset, resolution):
        flagged = queryset.filter(rule_decision=ClassDecision.Decision.FLAG)

        def submit(data):
            n = class_decisions_resolve(decision_ids=list(flagged.values_list("pk", flat=True)), resolution=resolution,
                                        note=data["note"], user=request.user)
            skipped = queryset.count() - n
            self.message_user(request, f"{n} flagged class(es) resolved: {resolution}" + (f"; {skipped} not flagged, left alone" if skipped else ""))

        verb = "Keep" if resolution == "keep" else "Remove"
        return action_form(self, request, queryset, form_class=NoteForm, title=f"{verb} the selected flagged classes",
                           intro=f"{flagged.count()} of the {queryset.count()} selected classes are flags; they will be marked '{resolution}'.",
                           submit=submit)

    @admin.action(description="Resolve flags: keep the class (with a note)", permissions=["change"])
    def resolve_keep(self, request, queryset):
        return self._resolve(request, queryset, "keep")

    @admin.action(description="Resolve flags: remove the class (with a note)", permissions=["change"])
    def resolve_remove(self, request, queryset):
        return self._resolve(request, queryset, "remove")

    def _pin(self, request, queryset, action):
        wnids = sorted(set(queryset.exclude(wnid="").values_list("wnid", flat=True)))

        def submit(data):
            for wnid in wnids:
                class_override_pin(wnid=wnid, action=action, note=data["note"], user=request.user)
            self.message_user(request, f"{len(wnids)} override(s) pinned: {action}; they win over every rule in every run")

        return action_form(self, request, queryset, form_class=NoteForm, title=f"Pin '{action}' overrides",
                           intro=f"{len(wnids)} synset(s) will always be {'kept' if action == 'allow' else 'removed'}, "
                                 "whatever the rules say, in this and future runs.",
                           submit=submit)

    @admin.action(description="Pin override: always keep these synsets", permissions=["override"])
    def pin_allow(self, request, queryset):
        return self._pin(request, queryset, "allow")

    @admin.action(description="Pin override: always remove these synsets", permissions=["override"])
    def pin_deny(self, request, queryset):
        return self._pin(request, queryset, "deny")

    def has_override_permission(self, request):
        return request.user.has_perm("curation.add_classoverride")


class ClassOverrideForm(forms.ModelForm):
    class Meta:
        model = ClassOverride
        fields = ("wnid", "action", "note")


@admin.register(ClassOverride)


class ClassOverrideAdmin(admin.ModelAdmin):
    form = ClassOverrideForm
    list_display = ("wnid", "name", "action", "note", "created_by", "updated_at")
    list_filter = ("action",)
    search_fields = ("wnid", "name", "note")
    actions = ["unpin"]

    def get_readonly_fields(self, request, obj=None):
        return ("wnid",) if obj else ()

    def save_model(self, request, obj, form, change):
        try:
            pinned = class_override_pin(wnid=obj.wnid, action=obj.action, note=obj.note, user=request.user)
        except ClassDecisionError as exc:
            raise forms.ValidationError(str(exc)) from None
        obj.pk = pinned.pk

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)

        class Checked(form):
            def clean_wnid(self):

                from pipelines.classes.wordnet_graph import is_noun_wnid

                wnid = self.cleaned_data["wnid"].strip()
                if not is_noun_wnid(settings.NLTK_DATA, wnid):
                    raise forms.ValidationError(f"{wnid!r} is not a WordNet 3.0 noun id (like n01440764)")
                return wnid

        return Checked

    def delete_model(self, request, obj):
        class_override_unpin(wnid=obj.wnid, user=request.user)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            class_override_unpin(wnid=obj.wnid, user=request.user)

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    @admin.action(description="Unpin the selected overrides (the rules decide again)", permissions=["delete"])
    def unpin(self, request, queryset):
        n = len(queryset)
        for obj in queryset:
            class_override_unpin(wnid=obj.wnid, user=request.user)
        self.message_user(request, f"{n} override(s) removed; stored decisions follow the rules again")

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.auth.models import User
from django.db.models import F
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from curation import jobs
from curation.audit import audit_record
from curation.models import (
    AnnotatorScope,
    Assignment,
    AuditLog,
    CandidateClass,
    ClassDecision,
    ClassFilterRun,
    ClassOverride,
    ClassVisualSignal,
    EvalFeatureSet,
    EvaluationRun,
    Export,
    ExportMember,
    FeatureShard,
    IdClassSet,
    Image,
    ImageEmbedding,
    Job,
    JobChunk,
    Review,
    ReviewItem,
    ReviewSettings,
    Source,
)
from curation.services.class_filter import (
    ClassDecisionError,
    ClassFilterError,
    class_decisions_resolve,
    class_filter_start,
    class_override_pin,
    class_override_unpin,
)
from curation.services.covariate_shift import CovariateShiftError, covariate_shift_start
from curation.services.evaluation import EvaluationError, evaluation_create
from curation.services.exports import ExportRequestError, export_create, unit_tests_create
from curation.services.id_classes import IdClassSetError, semantic_split_create
from curation.services.image_pipeline import JobAlreadyRunning, PipelineError, dedup_start, extract_start
from curation.services.ingest import IngestAlreadyRunning, ingest_start
from curation.services.review import ReviewError, review_items_set_gold, review_queue_sync, review_scope_apply, review_settings_save
from curation.validators import name_field
from pipelines.class_filter import PolicyError
from pipelines.class_filter.policy import DEFAULT_PRESET, PRESETS
from pipelines.corruptions import CORRUPTIONS
from pipelines.names import NAME_RULE
from pipelines.semantic import DIFFICULTY_HELP
from pipelines.wordnet import WordNetUnavailable


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


class ClassFilterForm(forms.Form):
    policy = forms.ChoiceField(choices=[(p, f"{p}: {PRESETS[p]['description']}") for p in PRESETS], initial=DEFAULT_PRESET)
    policy_text = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 8, "cols": 80}),
        help_text="Optional YAML/JSON policy; it replaces the preset (e.g. <code>extends: cood</code> then "
                  "<code>rules: {sister_of_id: flag}</code>). See docs/class_filter.md.")
    id_classes = forms.ModelChoiceField(queryset=IdClassSet.objects.all(), required=False,
                                        help_text="Default: the default ID class set (ImageNet-1K unless changed)")


class CovariateShiftForm(forms.Form):
    name = name_field("name", max_length=70, help_text="The copies go to the sources folder under this name; sources are "
                                                       "NAME-<corruption>-<severity>")
    corruptions = forms.MultipleChoiceField(choices=[(c, c) for c in CORRUPTIONS], initial=["gaussian_noise", "defocus_blur"],
                                            widget=forms.CheckboxSelectMultiple,
                                            help_text="The 15 ImageNet-C benchmark corruptions, then the 4 held-out ones")
    severities = forms.MultipleChoiceField(choices=[(str(s), str(s)) for s in range(1, 6)], initial=["5"],
                                           widget=forms.CheckboxSelectMultiple)
    seed = forms.IntegerField(initial=0, help_text="The same seed gives the same files")


class SemanticSplitForm(forms.Form):
    name = name_field("split name", max_length=90, help_text="The halves become ID class sets NAME-id and NAME-ood")
    seed = forms.IntegerField(required=False, help_text="Empty: the authors' deterministic procedure (ImageNet-X for "
                                                        "ImageNet-1K). A number: the seeded variant.")


@admin.register(IdClassSet)


class IdClassSetAdmin(admin.ModelAdmin):
    list_display = ("name", "spec", "n_classes", "is_default", "created_at")
    readonly_fields = ("wnids", "created_by", "created_at")
    actions = ["semantic_split"]

    @admin.display(description="classes")
    def n_classes(self, obj):
        return len(obj.wnids)

    @admin.action(description="Split into ID/OOD halves by WordNet parent (ImageNet-X)", permissions=["change"])
    def semantic_split(self, request, queryset):
        id_set = only_one(self, request, queryset, "Select exactly one ID class set to split.")
        if id_set is None:
            return None

        def submit(data):
            folder = settings.DATA_DIR / "splits" / data["name"]
            try:
                split, files, sets = semantic_split_create(id_spec=id_set.name, out_dir=folder, seed=data["seed"],
                                                           register=data["name"], user=request.user)
            except (IdClassSetError, WordNetUnavailable) as exc:
                self.message_user(request, str(exc), messages.ERROR)
                return
            s = split.summary()
            self.message_user(request, f"{id_set.name}: {s['id_classes']} ID / {s['ood_classes']} OOD classes under {s['parents']} "
                                       f"parents ({s['parents_split_across_sides']} of {s['parents_with_several_children']} parents "
                                       f"with several classes split); ID class sets {', '.join(x.name for x in sets)}; "
                                       f"files in {folder}")

        return action_form(self, request, queryset, form_class=SemanticSplitForm, title="Split an ID class set by WordNet parent",
                           intro="Classes are grouped by their direct WordNet parent and each group is divided between the two "
                                 "halves (ImageNet-X, docs/class_filter.md). The halves are stored as ID class sets NAME-id and "
                                 "NAME-ood.", submit=submit)


@admin.register(Source)


class SourceAdmin(admin.ModelAdmin):
    list_display = ("name", "role", "root", "created_at")
    list_filter = ("role",)
    search_fields = ("name", "root")
    readonly_fields = ("name", "root", "created_by", "created_at")  # a name is how commands and specs refer to it
    actions = ["rescan", "run_class_filter", "extract", "find_near_duplicates", "build_review_queue", "make_covariate_shift"]

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
                self.message_user(request, jobs.queued_message(job, f"ingest job #{job.pk} of {source.name}"))

    @admin.action(description="Run the WordNet class filter on the selected sources", permissions=["class_filter"])
    def run_class_filter(self, request, queryset):
        def submit(data):
            for source in queryset:
                try:
                    run = class_filter_start(
                        candidates_spec=f"source:{source.name}", policy_spec=data["policy"], policy_text=data["policy_text"],
                        id_spec=data["id_classes"].name if data["id_classes"] else None, user=request.user)
                except (ClassFilterError, PolicyError, WordNetUnavailable) as exc:
                    self.message_user(request, f"{source.name}: {exc}", messages.ERROR)
                else:
                    url = reverse("labeling_ui:class_filter_report", args=[run.pk])
                    self.message_user(request, format_html('{}: <a href="{}">report</a>', jobs.queued_message(
                        run.job, f"class filter job #{run.job_id} of {source.name}").replace("on this list", "on the report"), url))

        return action_form(self, request, queryset, form_class=ClassFilterForm, title="Run the WordNet class filter",
                           intro="Each selected source's class folders are judged by the rules of the chosen policy; "
                                 "the job's progress shows on the home page.",
                           submit=submit)

    def has_class_filter_permission(self, request):
        return request.user.has_perm("curation.add_classfilterrun")

    @admin.action(description="Predict and extract features (default model) for the selected sources", permissions=["change"])
    def extract(self, request, queryset):
        from django.conf import settings

        for source in queryset:
            try:
                job = extract_start(source=source, user=request.user)
            except (JobAlreadyRunning, PipelineError) as exc:
                self.message_user(request, str(exc), messages.WARNING)
            else:
                self.message_user(request, jobs.queued_message(job, f"extraction job #{job.pk} ({settings.DEFAULT_MODEL}) of {source.name}"))

    @admin.action(description="Find near-duplicates and duplicates of ID images (all sources, default model)", permissions=["change"])
    def find_near_duplicates(self, request, queryset):
        try:
            job = dedup_start(user=request.user)
        except (JobAlreadyRunning, PipelineError) as exc:
            self.message_user(request, str(exc), messages.WARNING)
        else:
            self.message_user(request, jobs.queued_message(job, f"duplicate search job #{job.pk} over every extracted source"))


    @admin.action(description="Build / refresh the review queue of the selected candidate sources", permissions=["review"])
    def build_review_queue(self, request, queryset):
        for source in queryset:
            try:
                report = review_queue_sync(source=source, user=request.user)
            except ReviewError as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                self.message_user(request, report.summary())

    def has_review_permission(self, request):
        return request.user.has_perm("curation.change_reviewsettings")

    @admin.action(description="Make covariate-shifted copies of the selected ID source (ImageNet-C corruptions)", permissions=["change"])
    def make_covariate_shift(self, request, queryset):
        source = only_one(self, request, queryset, "Select exactly one ID source to corrupt.")
        if source is None:
            return None

        def submit(data):
            try:
                job = covariate_shift_start(source=source, corruptions=data["corruptions"], severities=[int(x) for x in data["severities"]],
                                            seed=data["seed"], name=data["name"], user=request.user)
            except CovariateShiftError as exc:
                self.message_user(request, str(exc), messages.ERROR)
                return
            self.message_user(request, jobs.queued_message(job, f"covariate-shift job #{job.pk} of {source.name}").replace(
                "its progress is shown on this list", "the new sources appear here when it is done"))

        return action_form(self, request, queryset, form_class=CovariateShiftForm, title="Covariate-shifted copies (ImageNet-C)",
                           intro="Each chosen corruption and severity becomes an ID source NAME-<corruption>-<severity> "
                                 "(ImageNet-C's layout and 224-px centre crop, deterministic under the seed), ready to be an "
                                 "evaluation's shifted ID set (docs/evaluation.md).", submit=submit)


@admin.register(CandidateClass)


class CandidateClassAdmin(admin.ModelAdmin):
    list_display = ("folder", "source", "wnid", "synset_name", "mapping")
    list_filter = ("source", "mapping")
    search_fields = ("folder", "wnid", "synset_name", "gloss")
    readonly_fields = ("source", "folder")


@admin.register(Image)


class ImageAdmin(RecordAdmin):
    list_display = ("relative_path", "source", "status", "error_code", "width", "height", "format", "mode", "bytes")
    list_filter = ("source", "status", "error_code", "format", "mode")
    search_fields = ("relative_path", "sha256")
    list_select_related = ("source",)
    show_full_result_count = False


@admin.register(Job)


class JobAdmin(RecordAdmin):
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


class JobChunkAdmin(RecordAdmin):
    list_display = ("job", "index", "done", "attempts", "done_at")
    list_filter = ("done",)


@admin.register(AuditLog)


class AuditLogAdmin(NoDelete, NoChange, RecordAdmin):
    list_display = ("created_at", "actor", "action", "target_type", "target_id")
    list_filter = ("action", "target_type")
    search_fields = ("target_id", "actor__username")


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
                from django.conf import settings

                from pipelines.wordnet_graph import is_noun_wnid

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

@admin.register(ReviewSettings)
class ReviewSettingsAdmin(admin.ModelAdmin):
    list_display = ("source", "candidate_class", "reviews_required", "order", "gold_rate", "updated_by", "updated_at")
    list_filter = ("source", "order")
    autocomplete_fields = ("candidate_class",)
    readonly_fields = ("updated_by", "updated_at")

    def save_model(self, request, obj, form, change):
        # the model's check constraints were validated by the form; this also applies it to the queue
        saved = review_settings_save(source=obj.source, candidate_class=obj.candidate_class, reviews_required=obj.reviews_required,
                                     order=obj.order, gold_rate=obj.gold_rate, user=request.user)
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
class ReviewItemAdmin(NoDelete, RecordAdmin):
    list_display = ("image", "source", "candidate_class", "status", "done", "required", "leased", "final_decision", "is_gold")
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
class ReviewAdmin(NoDelete, NoChange, RecordAdmin):
    list_display = ("item", "annotator", "decision", "is_gold", "gold_correct", "seconds", "created_at")
    list_filter = ("decision", "is_gold", "annotator")


@admin.register(Assignment)
class AssignmentAdmin(NoDelete, NoChange, RecordAdmin):
    list_display = ("item", "annotator", "state", "is_gold", "leased_at", "expires_at", "finished_at")
    list_filter = ("state", "is_gold")


class ExportCreateForm(forms.Form):
    kind = forms.ChoiceField(choices=Export.Kind.choices, initial=Export.Kind.DATASET)
    name = name_field("export name", help_text="Each export under a name gets the next version; old versions are never rewritten. "
                                               f"{NAME_RULE}")
    sources = forms.ModelMultipleChoiceField(queryset=Source.objects.filter(role=Source.Role.CANDIDATE).order_by("name"), required=False,
                                             help_text="Clean set: the candidate sources to export")
    classes = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}),
                              help_text="Clean set: wnids to export (comma or line separated); empty = every class")
    min_per_class = forms.IntegerField(min_value=1, initial=1, help_text="Clean set: classes with fewer clean images are left out")
    layouts = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False,
                                        help_text="Folder conventions to write (pipelines/layouts/, one file each)")
    split = name_field("split", max_length=40, initial="test",
                       help_text="Clean set: images may not be near-duplicates of another split's")
    copy_files = forms.BooleanField(required=False, help_text="Copy files instead of hard-linking them to the sources")
    leakage_override = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                                       help_text="Export despite leakage (ID near-duplicates, other splits): the reason, recorded in the manifest")
    id_source = forms.ModelChoiceField(queryset=Source.objects.filter(role=Source.Role.ID).order_by("name"), required=False,
                                       help_text="Unit tests: the ID reference source whose sizes, formats and pixels they mirror")
    difficulty_split = forms.CharField(required=False, max_length=40,
                                       help_text=f"Clean set: also write easy/hard sub-splits by semantic similarity to the closest "
                                                 f"ID class. Empty: none; {DIFFICULTY_HELP}")
    per_test = forms.IntegerField(min_value=1, max_value=100_000, initial=400, help_text="Unit tests: images per test (NINCO: 400)")
    seed = forms.IntegerField(initial=0, help_text="Unit tests: the same seed gives the same images")
    convention = forms.ChoiceField(choices=[("paper", "paper: recipes as appendix G states them (default)"),
                                            ("ninco", "ninco: as NINCO's published generator computes them")],
                                   initial="paper", required=False, help_text="Unit tests: which convention (docs/exports.md)")

    def __init__(self, *args, **kwargs):
        from pipelines.layouts import LAYOUTS

        super().__init__(*args, **kwargs)
        self.fields["layouts"].choices = [(name, layout.description) for name, layout in LAYOUTS.items()]
        self.fields["layouts"].initial = list(LAYOUTS)

    def clean(self):
        data = super().clean()
        if data.get("kind") == Export.Kind.DATASET and not data.get("sources"):
            self.add_error("sources", "choose at least one candidate source")
        if data.get("kind") == Export.Kind.DATASET and not data.get("layouts"):
            self.add_error("layouts", "choose at least one layout")
        return data


@admin.register(Export)
class ExportAdmin(NoDelete, NoChange, RecordAdmin):
    """Exports are created through a form that calls the export service and are never edited."""

    list_display = ["__str__", "kind", "split", "status", "images", "created_by", "created_at", "downloads"]
    list_filter = ["kind", "status", "split"]
    search_fields = ["name"]

    def has_add_permission(self, request):
        return request.user.has_perm("curation.add_export")

    @admin.display(description="images")
    def images(self, obj):
        return obj.counts.get("images", "")

    @admin.display(description="download")
    def downloads(self, obj):
        if obj.status != Export.Status.DONE:
            return obj.message[:120]
        return format_html('<a href="{}">.tar.gz</a> · <a href="{}">.zip</a>', reverse("labeling_ui:export_download", args=[obj.pk, "tar.gz"]),
                           reverse("labeling_ui:export_download", args=[obj.pk, "zip"]))

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            from django.core.exceptions import PermissionDenied

            raise PermissionDenied
        form = ExportCreateForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            d = form.cleaned_data
            try:
                if d["kind"] == Export.Kind.DATASET:
                    wnids = [w for w in d["classes"].replace(",", " ").split() if w]
                    export = export_create(name=d["name"], sources=list(d["sources"]), wnids=wnids, min_per_class=d["min_per_class"],
                                           layouts=d["layouts"], split=d["split"], link=not d["copy_files"],
                                           override_leakage=d["leakage_override"], difficulty=d["difficulty_split"].strip() or None,
                                           user=request.user)
                else:
                    export = unit_tests_create(name=d["name"], per_test=d["per_test"], seed=d["seed"], id_source=d["id_source"], user=request.user,
                                               convention=d.get("convention") or "paper")
            except ExportRequestError as exc:
                form.add_error(None, str(exc))
            else:
                what = f"{'export' if export.kind == Export.Kind.DATASET else 'unit-test set'} {export.label}"
                self.message_user(request, jobs.queued_message(export.job, what), messages.SUCCESS)
                return redirect_to(reverse("admin:curation_export_changelist"))
        context = {**self.admin_site.each_context(request), "title": "Create an export", "form": form, "opts": self.model._meta,
                   "intro": "A clean set carries every image whose final label is ood in a class the class filter kept (or a curator "
                            "accepted), in the layouts chosen, with manifest.json (provenance and checksums) and decisions.csv. "
                            "OOD unit tests are NINCO's 17 synthetic sets mirroring an ID source."}
        return TemplateResponse(request, "admin/curation/export_create.html", context)


def redirect_to(url: str):
    from django.http import HttpResponseRedirect

    return HttpResponseRedirect(url)


@admin.register(ExportMember)
class ExportMemberAdmin(NoDelete, NoChange, RecordAdmin):
    list_display = ["export", "image", "wnid", "sha256"]
    list_filter = ["export"]
    search_fields = ["sha256", "image__relative_path"]
    list_select_related = ["export", "image"]


# -- evaluation runs -----------------------------------------------------------------------------------


def _id_set_choices():
    sets = [(f"source:{name}", f"source {name}") for name in Source.objects.filter(role=Source.Role.ID).order_by("name").values_list("name", flat=True)]
    sets += [(row.dataset, f"{row.dataset} ({row.model_name}, {row.images} rows)")
             for row in EvalFeatureSet.objects.filter(dataset__startswith="import:").order_by("dataset")]
    return sets


class EvaluationCreateForm(forms.Form):
    export = forms.ModelChoiceField(queryset=Export.objects.filter(kind=Export.Kind.DATASET, status=Export.Status.DONE),
                                    help_text="The clean OOD set to evaluate on")
    unit_tests = forms.ModelChoiceField(queryset=Export.objects.filter(kind=Export.Kind.UNIT_TESTS, status=Export.Status.DONE),
                                        required=False, help_text="Optional: an OOD unit-test set (a detector fails a test above 10% FPR)")
    id_test = forms.ChoiceField(help_text="ID test set: an ID reference source (e.g. ImageNet val in wnid folders) or imported outputs")
    id_fit = forms.ChoiceField(help_text="ID fit set for detectors with statistics (a train subset); must differ from the test set")
    models = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False, help_text="Registered models")
    other_models = forms.CharField(required=False, help_text="More timm model names, comma separated (their weights must be reachable)")
    methods = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, help_text="Detectors (higher score = more ID)")
    seed = forms.IntegerField(initial=0, help_text="Seed of C-OOD's estimation/test split")
    fpr_method = forms.ChoiceField(choices=[("exact", "exact order statistic (default)"),
                                            ("ninco-interpolated", "NINCO's code: np.quantile (linear interpolation)")],
                                   required=False, initial="exact", help_text="FPR@95 (ID positive) threshold")
    oaa_convention = forms.ChoiceField(choices=[("paper", "paper: rejected OOD count as correct (default)"),
                                                ("code", "authors' code: every rejected wrong prediction counts")],
                                       required=False, initial="paper", help_text="Outlier-aware accuracy (mOAA)")
    severity_protocol = forms.ChoiceField(choices=[("c-ood", "C-OOD: 200 images per class, 150 estimate / 50 test (default)"),
                                                   ("small-data", "small-data variant: any class with >= 2 images (not C-OOD's)")],
                                          required=False, initial="c-ood", help_text="C-OOD severity levels")
    id_shifted = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple,
                                           help_text="Optional: covariate-shifted copies of ID classes (ImageNet-V2/-R/-C, or made "
                                                     "with make_covariate_shift), reported standard, full-spectrum and as a shift")
    sanity_seeds = forms.IntegerField(min_value=0, max_value=20, initial=5, required=False,
                                      help_text="Random-weight sanity check (ImageNet-OOD): random networks to run, 0 = off. "
                                                "RANDOM WEIGHTS, for the check only")
    decoder = forms.ChoiceField(choices=[("", "the deployment's default (OODC_DECODER)"),
                                         ("pil", "pil: Pillow and timm's transform"),
                                         ("torchvision", "torchvision: tensor decode and resize (nvJPEG on GPU workers)")],
                                required=False, initial="", help_text="How images become model inputs, for every set of the run")

    def __init__(self, *args, **kwargs):
        from pipelines.detectors import DETECTORS, detector_names, parameters
        from pipelines.models import MODELS

        super().__init__(*args, **kwargs)
        sets = _id_set_choices()
        self.fields["id_test"].choices = self.fields["id_fit"].choices = [("", "---------")] + sets
        self.fields["id_shifted"].choices = sets
        self.fields["models"].choices = [(name, f"{name}: {spec.description}") for name, spec in MODELS.items()]
        self.fields["models"].initial = list(MODELS)[:1]
        self.fields["methods"].choices = [(n, f"{DETECTORS[n].label} ({DETECTORS[n].paper})") for n in detector_names()]
        self.fields["methods"].initial = detector_names()
        for det, p in parameters():  # each detector's own declaration: knn_k, odin_temperature, vim_dim, ...
            field = forms.IntegerField if p.kind is int else forms.FloatField
            self.fields[p.key(det)] = field(required=False, initial=p.default, min_value=p.low, max_value=p.high,
                                            label=f"{DETECTORS[det].label}: {p.name}", help_text=p.describe())

    def clean(self):
        data = super().clean()
        data["model_names"] = list(data.get("models") or []) + [m.strip() for m in (data.get("other_models") or "").split(",") if m.strip()]
        if not data["model_names"]:
            self.add_error("models", "choose at least one model")
        return data


@admin.register(EvaluationRun)
class EvaluationRunAdmin(NoDelete, NoChange, RecordAdmin):
    """Researchers start runs through a form that calls the evaluation service; runs are never edited."""

    list_display = ["__str__", "status", "models_", "methods_", "progress", "created_by", "created_at", "results_page"]
    list_filter = ["status"]
    list_select_related = ["export", "job", "created_by"]
    exclude = ["results"]

    def has_add_permission(self, request):
        return request.user.has_perm("curation.add_evaluationrun")

    @admin.display(description="models")
    def models_(self, obj):
        return ", ".join(obj.model_names)

    @admin.display(description="detectors")
    def methods_(self, obj):
        return len(obj.methods)

    @admin.display(description="progress")
    def progress(self, obj):
        return f"{obj.job.progress}/{obj.job.total}"

    @admin.display(description="results")
    def results_page(self, obj):
        return format_html('<a href="{}">result page</a>', reverse("labeling_ui:evaluation", args=[obj.pk]))

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            from django.core.exceptions import PermissionDenied

            raise PermissionDenied
        form = EvaluationCreateForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            d = form.cleaned_data
            from pipelines.detectors import parameters

            params = {k: d[k] for k in ("seed", "fpr_method", "oaa_convention", "severity_protocol", "decoder", "sanity_seeds")}
            params.update({p.key(det): d[p.key(det)] for det, p in parameters() if d.get(p.key(det)) is not None})
            if params["sanity_seeds"] is None:  # empty: the deployment's default (OODC_EVAL_SANITY_SEEDS)
                del params["sanity_seeds"]
            try:
                run = evaluation_create(export=d["export"], unit_tests=d["unit_tests"], id_test=d["id_test"], id_fit=d["id_fit"],
                                        models=d["model_names"], methods=d["methods"], params=params, user=request.user,
                                        id_shifted=list(d.get("id_shifted") or []))
            except EvaluationError as exc:
                form.add_error(None, str(exc))
            else:
                self.message_user(request, jobs.queued_message(run.job, f"evaluation #{run.pk}").replace(
                    "shown on this list", "shown on its result page"), messages.SUCCESS)
                return redirect_to(reverse("labeling_ui:evaluation", args=[run.pk]))
        context = {**self.admin_site.each_context(request), "title": "Start an evaluation run", "form": form, "opts": self.model._meta,
                   "intro": "Every chosen detector with every chosen model, on the export (and unit tests) against the ID test set, "
                            "with statistics from the ID fit set. Model outputs are cached per model and image set and reused.",
                   "submit": "Start evaluation"}
        return TemplateResponse(request, "admin/curation/export_create.html", context)


@admin.register(EvalFeatureSet)
class EvalFeatureSetAdmin(NoDelete, NoChange, RecordAdmin):
    list_display = ["dataset", "model_name", "images", "feature_dim", "has_head", "created_at"]
    list_filter = ["model_name"]

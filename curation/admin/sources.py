"""Sources, their classes and images, ID class sets: re-scans, class filter, extraction, duplicate search, covariate shift, semantic splits."""
from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html

from curation import jobs
from curation.admin._common import ErrorCodeFilter, LargeTableAdmin, RecordAdmin, WholeNumberField, action_form, only_one
from curation.models import (
    CandidateClass,
    IdClassSet,
    Image,
    Source,
)
from curation.services.class_filter import (
    ClassFilterError,
    class_filter_start,
)
from curation.services.covariate_shift import CovariateShiftError, covariate_shift_start
from curation.services.id_classes import IdClassSetError, semantic_split_create
from curation.services.image_pipeline import JobAlreadyRunning, PipelineError, dedup_start, extract_start
from curation.services.ingest import IngestAlreadyRunning, ingest_start
from curation.services.review import ReviewError, review_queue_sync
from curation.validators import name_field
from pipelines.classes.filter import PolicyError
from pipelines.classes.filter.policy import DEFAULT_PRESET, PRESETS
from pipelines.classes.wordnet import WordNetUnavailable
from pipelines.evaluation.corruptions import CORRUPTIONS, SEVERITIES
from pipelines.numbers import whole_number


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
    severities = forms.MultipleChoiceField(choices=[(str(s), str(s)) for s in SEVERITIES], initial=[str(SEVERITIES[-1])],
                                           widget=forms.CheckboxSelectMultiple)
    seed = WholeNumberField(initial=0, min_value=0, max_value=2**32 - 1, help_text="The same seed gives the same files")


class SemanticSplitForm(forms.Form):
    name = name_field("split name", max_length=90, help_text="The halves become ID class sets NAME-id and NAME-ood")
    seed = WholeNumberField(required=False, min_value=0, max_value=2**32 - 1,
                            help_text="Empty: the authors' deterministic procedure (ImageNet-X for ImageNet-1K). A number: the seeded variant.")


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
    list_display = ("name", "role", "layout", "root", "created_at")
    list_filter = ("role", "layout")
    search_fields = ("name", "root")
    # a name is how commands and specs refer to it; root, layout and list are add_source's (docs/sources.md)
    readonly_fields = ("name", "root", "layout", "layout_options", "created_by", "created_at")
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
                        run.job, f"class filter job #{run.job_id} of {source.name}", follow="its progress is shown on the report"), url))

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
                job = covariate_shift_start(source=source, corruptions=data["corruptions"], severities=[whole_number(x, "severity", lo=1, hi=5)
                                                                                                        for x in data["severities"]],
                                            seed=data["seed"], name=data["name"], user=request.user)
            except CovariateShiftError as exc:
                self.message_user(request, str(exc), messages.ERROR)
                return
            self.message_user(request, jobs.queued_message(job, f"covariate-shift job #{job.pk} of {source.name}",
                                                         follow="the new sources appear here when it is done"))

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


class ImageAdmin(LargeTableAdmin, RecordAdmin):
    list_display = ("relative_path", "source", "status", "error_code", "width", "height", "format", "mode", "bytes", "excluded_reason")
    # no filter that lists every distinct value of a column (format, mode: a scan of every image);
    # error codes are read among the images that are not ok (an index)
    list_filter = ("source", "status", ErrorCodeFilter)
    search_fields = ("relative_path", "sha256")  # how, see get_search_results
    search_help_text = ("The beginning of a path within its source (a class folder: n02085620/), or an image's whole SHA-256. "
                        "Every class, label and score is a filter of the image browser.")
    list_select_related = ("source",)

    def get_search_results(self, request, queryset, search_term):
        """A path's beginning (case as written) or a whole SHA-256, each read from an index
        (image_path_prefix, the sha256 index), never a substring of every image's path and
        hash: ``icontains`` over 13.2M paths read them all (8.6 s; issue 45)."""
        term = search_term.strip()
        if not term:
            return queryset, False
        if len(term) == 64 and all(c in "0123456789abcdefABCDEF" for c in term):
            return queryset.filter(sha256=term.lower()), False
        return queryset.filter(relative_path__startswith=term), False

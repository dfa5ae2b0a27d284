"""Evaluation runs (started through a form that calls the evaluation service) and cached outputs."""
from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from curation import jobs
from curation.admin._common import DecimalNumberField, NoChange, NoDelete, RecordAdmin, WholeNumberField, redirect_to
from curation.models import (
    EvalFeatureSet,
    EvaluationRun,
    Export,
    Source,
)
from curation.services.evaluation import EvaluationError, evaluation_create
from pipelines.evaluation.metrics import AUPR_METHODS, FPR_METHODS, OAA_CONVENTIONS
from pipelines.evaluation.severity import PROTOCOLS
from pipelines.features.decode import DECODERS

# Words for the pipelines' named conventions; the choices themselves are the pipelines' constants
# (as the evaluate command's), so a new one appears here without an edit
CHOICE_WORDS = {
    "exact": "exact order statistic (default)",
    "ninco-interpolated": "NINCO's code: np.quantile (linear interpolation)",
    "average-precision": "average precision, as NINCO (default)",
    "openood": "OpenOOD v1.5: trapezoid under scikit-learn's PR curve",
    "paper": "paper: rejected OOD count as correct (default)",
    "code": "authors' code: every rejected wrong prediction counts",
    "c-ood": "C-OOD: 200 images per class, 150 estimate / 50 test (default)",
    "small-data": "small-data variant: any class with >= 2 images (not C-OOD's)",
    "pil": "pil: Pillow and timm's transform",
    "torchvision": "torchvision: tensor decode and resize (nvJPEG on GPU workers)",
}


def _choices(values) -> list[tuple[str, str]]:
    return [(v, CHOICE_WORDS.get(v, v)) for v in values]


def _id_set_choices():
    sets = [(f"source:{name}", f"source {name}") for name in Source.objects.filter(role=Source.Role.ID).order_by("name").values_list("name", flat=True)]
    sets += [(row.dataset, f"{row.dataset} ({row.model_name}, {row.images} rows)")
             for row in EvalFeatureSet.objects.filter(dataset__startswith="import:").order_by("dataset")]
    return sets


class EvaluationCreateForm(forms.Form):
    preset = forms.ChoiceField(required=False, initial="",
                               help_text="A benchmark as its paper runs it (no export then): ImageNet-X's 500 ID / 500 OOD "
                                         "ImageNet-1K classes split by WordNet parent, taken from the ID test and fit sources "
                                         "(whole sources, e.g. ImageNet val and a train subset); ImageNet-FS-X adds the "
                                         "variant sources' ID-class images as covariate-shifted ID (docs/evaluation.md)")
    export = forms.ModelChoiceField(queryset=Export.objects.filter(kind=Export.Kind.DATASET, status=Export.Status.DONE),
                                    required=False, help_text="The clean OOD set to evaluate on (leave empty with a preset)")
    unit_tests = forms.ModelChoiceField(queryset=Export.objects.filter(kind=Export.Kind.UNIT_TESTS, status=Export.Status.DONE),
                                        required=False, help_text="Optional: an OOD unit-test set (a detector fails a test above 10% FPR)")
    id_test = forms.ChoiceField(help_text="ID test set: an ID reference source (e.g. ImageNet val in wnid folders) or imported outputs")
    id_fit = forms.ChoiceField(help_text="ID fit set for detectors with statistics (a train subset); must differ from the test set")
    models = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False, help_text="Registered models")
    other_models = forms.CharField(required=False, help_text="More models, comma separated: timm names (their weights must be "
                                                             "reachable) or vision-language models as clip:ARCH:TAG or "
                                                             "clip:ARCH:/path/to/weights (e.g. clip:ViT-B-16-quickgelu:/data/"
                                                             "open_clip_pytorch_model.bin, the paper's model)")
    clip_template = forms.ChoiceField(required=False, initial="", help_text="The prompts of a clip: model's zero-shot head")
    variants = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple,
                                         help_text="With ImageNet-FS-X: the covariate-shifted variant sources (ImageNet-V2, -R, -C copies)")
    methods = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, help_text="Detectors (higher score = more ID)")
    seed = WholeNumberField(initial=0, min_value=0, max_value=2**32 - 1, help_text="Seed of C-OOD's estimation/test split")
    fpr_method = forms.ChoiceField(required=False, initial=FPR_METHODS[0], help_text="FPR@95 (ID positive) threshold")
    aupr_method = forms.ChoiceField(required=False, initial=AUPR_METHODS[0], help_text="AUPR-In / AUPR-Out")
    oaa_convention = forms.ChoiceField(required=False, initial=OAA_CONVENTIONS[0], help_text="Outlier-aware accuracy (mOAA)")
    severity_protocol = forms.ChoiceField(required=False, initial=PROTOCOLS[0], help_text="C-OOD severity levels")
    id_shifted = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple,
                                           help_text="Optional: covariate-shifted copies of ID classes (ImageNet-V2/-R/-C, or made "
                                                     "with make_covariate_shift), reported standard, full-spectrum and as a shift")
    sanity_seeds = WholeNumberField(min_value=0, max_value=20, initial=5, required=False,
                                      help_text="Random-weight sanity check (ImageNet-OOD): random networks to run, 0 = off. "
                                                "RANDOM WEIGHTS, for the check only")
    decoder = forms.ChoiceField(required=False, initial="", help_text="How images become model inputs, for every set of the run")

    def __init__(self, *args, **kwargs):
        from pipelines.evaluation.detectors import DETECTORS, default_detectors, detector_names, parameters
        from pipelines.features.classifiers import MODELS

        super().__init__(*args, **kwargs)
        for name, values in (("fpr_method", FPR_METHODS), ("aupr_method", AUPR_METHODS), ("oaa_convention", OAA_CONVENTIONS),
                             ("severity_protocol", PROTOCOLS)):
            self.fields[name].choices = _choices(values)
        self.fields["decoder"].choices = [("", "the deployment's default (OODC_DECODER)")] + _choices(DECODERS)
        from curation.services.evaluation import PRESETS
        from pipelines.evaluation.vlm import DEFAULT_TEMPLATE, TEMPLATE_KEYS

        self.fields["preset"].choices = [("", "none: evaluate on an export")] + _choices(PRESETS)
        self.fields["clip_template"].choices = [("", f"the default ({DEFAULT_TEMPLATE})")] + _choices(TEMPLATE_KEYS)
        sets = _id_set_choices()
        self.fields["variants"].choices = [(v, label) for v, label in sets if v.startswith("source:")]
        self.fields["id_test"].choices = self.fields["id_fit"].choices = [("", "---------")] + sets
        self.fields["id_shifted"].choices = sets
        self.fields["models"].choices = [(name, f"{name}: {spec.description}") for name, spec in MODELS.items()]
        self.fields["models"].initial = list(MODELS)[:1]
        self.fields["methods"].choices = [(n, f"{DETECTORS[n].label} ({DETECTORS[n].paper})"
                                              + (f" - not ticked by default: {DETECTORS[n].costly}" if DETECTORS[n].costly else ""))
                                          for n in detector_names()]
        self.fields["methods"].initial = default_detectors()
        for det, p in parameters():  # each detector's own declaration: knn_k, odin_temperature, vim_dim, ...
            if p.choices:  # a convention where the reference codes differ
                self.fields[p.key(det)] = forms.ChoiceField(required=False, initial=p.default, choices=[(c, c) for c in p.choices],
                                                            label=f"{DETECTORS[det].label}: {p.name}", help_text=p.describe())
                continue
            if p.kind is str:  # free text, e.g. Weighted energy's file of class weights
                self.fields[p.key(det)] = forms.CharField(required=False, initial=p.default, label=f"{DETECTORS[det].label}: {p.name}",
                                                          help_text=p.describe())
                continue
            field = WholeNumberField if p.kind is int else DecimalNumberField
            low = 0 if p.default is None else p.low  # 0 (or empty): the detector works it out
            self.fields[p.key(det)] = field(required=False, initial=p.default, min_value=low, max_value=p.high,
                                            label=f"{DETECTORS[det].label}: {p.name}", help_text=p.describe())

    def clean(self):
        data = super().clean()
        data["model_names"] = list(data.get("models") or []) + [m.strip() for m in (data.get("other_models") or "").split(",") if m.strip()]
        if not data["model_names"]:
            self.add_error("models", "choose at least one model")
        preset = data.get("preset") or ""
        if preset and data.get("export"):
            self.add_error("export", f"the {preset} preset builds its OOD set from the ID sources: leave the export empty")
        if preset and (data.get("id_shifted") or data.get("unit_tests")):
            self.add_error("preset", f"the {preset} preset takes no unit tests or extra shifted sets (use the variants with imagenet-fs-x)")
        if not preset and not data.get("export"):
            self.add_error("export", "choose the export to evaluate on, or a preset")
        if data.get("variants") and preset != "imagenet-fs-x":
            self.add_error("variants", "variants go with the imagenet-fs-x preset")
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
            from pipelines.evaluation.detectors import parameters

            params = {k: d[k] for k in ("seed", "fpr_method", "aupr_method", "oaa_convention", "severity_protocol", "decoder",
                                        "sanity_seeds")}
            if d.get("clip_template"):
                params["clip_template"] = d["clip_template"]
            params.update({p.key(det): d[p.key(det)] for det, p in parameters() if d.get(p.key(det)) is not None})
            if params["sanity_seeds"] is None:  # empty: the deployment's default (OODC_EVAL_SANITY_SEEDS)
                del params["sanity_seeds"]
            try:
                preset = d.get("preset") or None
                run = evaluation_create(export=d["export"], unit_tests=d["unit_tests"], id_test=d["id_test"], id_fit=d["id_fit"],
                                        models=d["model_names"], methods=d["methods"], params=params, user=request.user,
                                        id_shifted=list(d.get("id_shifted") or []), preset=preset,
                                        fs_x={"split": "", "variants": list(d.get("variants") or [])} if preset == "imagenet-fs-x" else None)
            except EvaluationError as exc:
                form.add_error(None, str(exc))
            else:
                self.message_user(request, jobs.queued_message(run.job, f"evaluation #{run.pk}",
                                                                follow="its progress is shown on its result page"), messages.SUCCESS)
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

"""Exports and unit-test sets: created through a form that calls the export service."""
from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from curation import jobs
from curation.admin._common import DecimalNumberField, LargeTableAdmin, NoChange, NoDelete, RecordAdmin, WholeNumberField, redirect_to
from curation.models import (
    Export,
    ExportMember,
    Source,
)
from curation.services.exports import ExportRequestError, export_create, unit_tests_create
from curation.validators import name_field
from pipelines.classes.semantic import DIFFICULTY_HELP
from pipelines.export.unit_tests import CONVENTIONS
from pipelines.names import NAME_RULE

# Words for the unit-test conventions; the choices themselves are pipelines.export.unit_tests.CONVENTIONS
# (as make_unit_tests --convention's), the first the default
CONVENTION_WORDS = {"paper": "paper: recipes as appendix G states them (default)",
                    "ninco": "ninco: as NINCO's published generator computes them"}


class ExportCreateForm(forms.Form):
    kind = forms.ChoiceField(choices=Export.Kind.choices, initial=Export.Kind.DATASET)
    name = name_field("export name", help_text="Each export under a name gets the next version; old versions are never rewritten. "
                                               f"{NAME_RULE}")
    sources = forms.ModelMultipleChoiceField(queryset=Source.objects.filter(role=Source.Role.CANDIDATE).order_by("name"), required=False,
                                             help_text="Clean set: the candidate sources to export")
    classes = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}),
                              help_text="Clean set: wnids to export (comma or line separated); empty = every class")
    min_per_class = WholeNumberField(min_value=1, max_value=10**9, initial=1, help_text="Clean set: classes with fewer clean images are left out")
    layouts = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False,
                                        help_text="Folder conventions to write (pipelines/export/layouts/, one file each)")
    split = name_field("split", max_length=40, initial="test",
                       help_text="Clean set: images may not be near-duplicates of another split's")
    copy_files = forms.BooleanField(required=False, help_text="Copy files instead of hard-linking them to the sources")
    include_certified = forms.BooleanField(required=False, help_text="Clean set: also the unreviewed images a certified plan covers "
                                           "(Certify, on review progress); the manifest carries the certificate, and decisions.csv "
                                           "says which images the certificate admitted")
    leakage_override = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                                       help_text="Export despite leakage (ID near-duplicates, other splits): the reason, recorded in the manifest")
    warn_loss = DecimalNumberField(required=False, min_value=0, max_value=1, widget=forms.NumberInput(attrs={"step": "0.05"}),
                                 help_text="Clean set: say so when this export loses more than this share of the previous "
                                           "version's images (0.2 = 20%; empty: the default, OODC_EXPORT_WARN_LOSS)")
    id_source = forms.ModelChoiceField(queryset=Source.objects.filter(role=Source.Role.ID).order_by("name"), required=False,
                                       help_text="Unit tests: the ID reference source whose sizes, formats and pixels they mirror")
    difficulty_split = forms.CharField(required=False, max_length=40,
                                       help_text=f"Clean set: also write easy/hard sub-splits by semantic similarity to the closest "
                                                 f"ID class. Empty: none; {DIFFICULTY_HELP}")
    per_test = WholeNumberField(min_value=1, max_value=100_000, initial=400, help_text="Unit tests: images per test (NINCO: 400)")
    seed = WholeNumberField(initial=0, min_value=0, max_value=2**32 - 1, help_text="Unit tests: the same seed gives the same images")
    convention = forms.ChoiceField(choices=[(c, CONVENTION_WORDS.get(c, c)) for c in CONVENTIONS],
                                   initial=CONVENTIONS[0], required=False, help_text="Unit tests: which convention (docs/exports.md)")

    def __init__(self, *args, **kwargs):
        from pipelines.export.layouts import LAYOUTS

        super().__init__(*args, **kwargs)
        self.fields["layouts"].choices = [(name, layout.description) for name, layout in LAYOUTS.items()]
        self.fields["layouts"].initial = [name for name, layout in LAYOUTS.items() if layout.default]

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
                                           user=request.user, warn_loss=d.get("warn_loss"), include_certified=d["include_certified"])
                else:
                    export = unit_tests_create(name=d["name"], per_test=d["per_test"], seed=d["seed"], id_source=d["id_source"], user=request.user,
                                               convention=d.get("convention") or CONVENTIONS[0])
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


@admin.register(ExportMember)
class ExportMemberAdmin(NoDelete, NoChange, LargeTableAdmin, RecordAdmin):
    list_display = ["export", "image", "wnid", "sha256"]
    list_filter = ["export"]
    search_fields = ["sha256", "image__relative_path"]
    list_select_related = ["export", "image__source"]


# -- evaluation runs -----------------------------------------------------------------------------------

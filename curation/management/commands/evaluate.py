import math

from django.core.management.base import BaseCommand, CommandError

from curation.management.cli import comma_list, one_line_parser_errors, whole_number_option
from curation.management.progress import InlineBar, resume_and_wait, wait_for_job
from curation.models import EvaluationRun, Export
from curation.services.evaluation import PRESETS, EvaluationError, EvaluationRunning, evaluation_create, evaluation_run_inline
from pipelines.evaluation.detectors import DETECTORS, parameters
from pipelines.evaluation.metrics import AUPR_METHODS, FPR_METHODS, OAA_CONVENTIONS
from pipelines.evaluation.severity import ESTIMATION, PER_CLASS, PROTOCOLS
from pipelines.evaluation.vlm import TEMPLATE_KEYS
from pipelines.features.decode import DECODERS


def find_export(spec: str, *, kind: str) -> Export:
    """An export by id, NAME-vN, NAME/vN or NAME (its latest finished version)."""
    from pipelines.numbers import row_id

    def number(text: str) -> int | None:  # the one rule: ASCII digits, 1 to 2**63 - 1 ("²".isdigit() is true)
        try:
            return row_id(text, "export")
        except ValueError:
            return None

    spec = spec.strip()
    qs = Export.objects.filter(kind=kind)
    if number(spec) is not None:
        export = qs.filter(pk=number(spec)).first()
    else:
        name, sep, version = spec.replace("/v", "-v").rpartition("-v")
        if sep and number(version) is not None:
            export = qs.filter(name=name, version=number(version)).first()
        else:
            export = qs.filter(name=spec, status=Export.Status.DONE).order_by("-version").first()
    if export is None:
        known = ", ".join(e.label for e in qs.filter(status=Export.Status.DONE)[:20]) or "none"
        raise CommandError(f"no {kind} export {spec!r}; finished ones: {known}")
    return export


def numeric_options(o: dict) -> dict:
    """The command's numbers, each through the one rule (curation.management.cli): whole numbers
    in their ranges, decimals finite and in ASCII digits; each detector's own within the range it
    declares (checked again by the service). One line naming the flag, exit status 1, before any
    run exists."""
    out = {
        "severity_window": whole_number_option(o["severity_window"], "--severity-window", lo=0, hi=10**7),
        "severity_per_class": whole_number_option(o["severity_per_class"], "--severity-per-class", lo=1, hi=10**7),
        "severity_estimation": whole_number_option(o["severity_estimation"], "--severity-estimation", lo=1, hi=10**7),
        "seed": whole_number_option(o["seed"], "--seed", lo=0, hi=2**32 - 1),
        "sanity_seeds": whole_number_option(o["sanity_seeds"], "--sanity-seeds", lo=0, hi=20),
    }
    from pipelines.evaluation.detectors import DetectorError

    for det, p in parameters():  # parsed by argparse as the declared type; here finite and in the declared range
        value = o.get(p.key(det))
        if value is None or p.choices:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise CommandError(f"{p.flag(det)} must be a finite number, not {value}")
        try:
            out[p.key(det)] = p.check(det, value)
        except DetectorError as exc:
            raise CommandError(str(exc)) from None
    return out


def _csv(value: str | None, flag: str = "--models/--methods") -> list[str]:
    return comma_list(value, flag)


class Command(BaseCommand):
    help = ("Evaluate OOD detectors x models on a clean export or a semantic split's OOD half (and optionally an OOD unit-test "
            "set): AUROC, AUPR, FPR@95 in "
            "NINCO's and OpenOOD's conventions, per-class results, unit tests failed, failure detection, mOAA, C-OOD levels.")

    def add_arguments(self, parser):
        parser.add_argument("--export", default="", help="the OOD export: id, NAME-vN or NAME (latest version)")
        parser.add_argument("--ood", default="",
                            help="instead of --export: part of an ID source as the OOD set, source:NAME@CLASSES (CLASSES: a "
                                 "registered ID class set, e.g. the OOD half made by `semantic_split --register`)")
        parser.add_argument("--id-shifted", action="append", default=[], metavar="SET",
                            help="a covariate-shifted copy of ID classes (source:NAME or import:NAME; repeat for several): "
                                 "reported standard, full-spectrum (ImageNet-FS-X) and as a shift, with accuracy on it")
        parser.add_argument("--fs-x", default="", metavar="SPLIT",
                            help="ImageNet-FS-X on the semantic split SPLIT (made by `semantic_split --register SPLIT`): "
                                 "--id-test and --id-fit are whole ID sources, --variant the covariate-shifted sources")
        parser.add_argument("--preset", choices=PRESETS, default=None,
                            help="a published benchmark: imagenet-x (Noda et al.: ID = the 500 ImageNet-X classes of --id-test, "
                                 "OOD = the other 500; the split is registered as imagenet-x-id/-ood when first used) or "
                                 "imagenet-fs-x (the same, with the --variant sources' ID-class images as covariate-shifted ID "
                                 "and their OOD-class images as OOD); --id-test and --id-fit are whole ID sources")
        parser.add_argument("--clip-template", choices=TEMPLATE_KEYS, default=None,
                            help="the zero-shot head's prompt for clip:... models: imagenet-x ('this is a photo of a {}.', "
                                 "default), mcm ('a photo of a {}'), neglabel ('the nice {}') or openai-80 (CLIP's 80 "
                                 "templates averaged); text embeddings are cached per model and template")
        parser.add_argument("--variant", action="append", default=[], metavar="SET",
                            help="with --fs-x: a variant source (source:NAME, e.g. ImageNet-V2, -R, -C copies); repeat")
        parser.add_argument("--sanity-seeds", default=None,
                            help="random networks for ImageNet-OOD's random-weight sanity check (default OODC_EVAL_SANITY_SEEDS, 5; "
                                 "0: off). RANDOM WEIGHTS, for the check only")
        parser.add_argument("--sanity-arch", default="", help="the architecture of those random networks (default resnet18; the paper: resnet50)")
        parser.add_argument("--restrict-logits", default="", metavar="CLASSES",
                            help="keep only the logits of this ID class set (e.g. the ID half of a semantic split)")
        parser.add_argument("--unit-tests", default="", help="an OOD unit-test set (export id, NAME-vN or NAME)")
        parser.add_argument("--id-test", required=True, help="ID test set: source:NAME (an ID reference source) or import:NAME")
        parser.add_argument("--id-fit", required=True, help="ID fit set for detectors with statistics: source:NAME or import:NAME")
        parser.add_argument("--models", default="",
                            help="comma-separated model names (vision-language models as clip:ARCH:TAG or "
                                 "clip:ARCH:/path/to/weights, e.g. clip:ViT-B-16-quickgelu:openai), files of names (one a line) "
                                 "or patterns of timm names with "
                                 "pretrained weights (e.g. 'resnet*'), as C-OOD's many-model runs (default: the default model); "
                                 "outputs are cached per model, so adding a model to an earlier run's list computes only it")
        parser.add_argument("--methods", default="", help="comma-separated detectors (default: every registered one but the costly ones, "
                                                          "which `manage.py detectors` marks)")
        for det, p in parameters():  # each detector's own declaration: --knn-k, --odin-temperature, ...
            parser.add_argument(p.flag(det), dest=p.key(det), type=p.kind, default=None, choices=p.choices or None,
                                help=f"{DETECTORS[det].label}: {p.describe()}")
        parser.add_argument("--severity-window", default="0", help="C-OOD window, 0 to 10,000,000 (default 0: |Y_ID|, 1000 for ImageNet-1K)")
        parser.add_argument("--severity-protocol", choices=PROTOCOLS, default=PROTOCOLS[0],
                            help="C-OOD's protocol (200 images per class: 150 estimate, 50 test; default) or our small-data "
                                 "variant (classes with >= 2 images split in half), labelled as not C-OOD's")
        parser.add_argument("--severity-per-class", default=str(PER_CLASS), help="C-OOD protocol: images per OOD class (200)")
        parser.add_argument("--severity-estimation", default=str(ESTIMATION), help="C-OOD protocol: of which estimate severity (150)")
        parser.add_argument("--fpr-method", choices=FPR_METHODS, default=FPR_METHODS[0],
                            help="FPR@95 (ID positive) threshold: exact order statistic (default) or NINCO's code "
                                 "(np.quantile, linear interpolation) to reproduce NINCO's tables")
        parser.add_argument("--aupr-method", choices=AUPR_METHODS, default=AUPR_METHODS[0],
                            help="AUPR-In/Out: average precision (default, as NINCO and scikit-learn's average_precision_score) "
                                 "or openood (the trapezoid under scikit-learn's PR curve, as OpenOOD v1.5)")
        parser.add_argument("--oaa-convention", choices=OAA_CONVENTIONS, default=OAA_CONVENTIONS[0],
                            help="mOAA: rejected OOD count as correct (paper, default) or every rejected wrong prediction "
                                 "(the authors' compute_oaa)")
        parser.add_argument("--seed", default="0", help="seed for C-OOD's estimation/test split, 0 to 2**32-1 (default 0)")
        parser.add_argument("--decoder", choices=DECODERS, default=None,
                            help="how images become model inputs, for every set of the run (default OODC_DECODER, pil); "
                                 "part of the output cache key")
        parser.add_argument("--queue", action="store_true", help="run on the Celery workers and wait, instead of in this process")
        parser.add_argument("--resume", action="store_true",
                            help="if the same evaluation is unfinished and stale (its worker died), resume it instead of refusing")

    def create_parser(self, prog_name, subcommand, **kwargs):
        return one_line_parser_errors(super().create_parser(prog_name, subcommand, **kwargs))

    def handle(self, *args, **o):
        from django.conf import settings

        o.update(numeric_options(o))  # every number checked (digits 0-9, in range) before anything is looked up
        models, methods = _csv(o["models"], "--models"), _csv(o["methods"], "--methods")  # checked before any look-up
        from pipelines.evaluation.run import ModelListError, model_list
        from pipelines.features.classifiers import MODELS

        try:  # files of names and timm patterns become names (C-OOD's many-model runs)
            models = model_list(models, registered=list(MODELS))
        except ModelListError as exc:
            raise CommandError(str(exc)) from None
        if o["preset"] and o["fs_x"]:
            raise CommandError(f"--preset {o['preset']} makes the split itself; leave out --fs-x")
        if o["variant"] and not (o["fs_x"] or o["preset"] == "imagenet-fs-x"):
            raise CommandError("--variant goes with --fs-x SPLIT or --preset imagenet-fs-x")
        if not o["fs_x"] and not o["preset"] and bool(o["export"]) == bool(o["ood"]):
            raise CommandError("give the OOD set with --export NAME (a clean export) or --ood source:NAME@CLASSES, not both")
        export = find_export(o["export"], kind=Export.Kind.DATASET) if o["export"] else None
        unit = find_export(o["unit_tests"], kind=Export.Kind.UNIT_TESTS) if o["unit_tests"] else None
        params = {p.key(det): o[p.key(det)] for det, p in parameters() if o.get(p.key(det)) is not None}
        params.update({"severity_window": o["severity_window"], "seed": o["seed"], "severity_protocol": o["severity_protocol"],
                       "severity_per_class": o["severity_per_class"], "severity_estimation": o["severity_estimation"],
                       "fpr_method": o["fpr_method"], "aupr_method": o["aupr_method"], "oaa_convention": o["oaa_convention"],
                       "decoder": o["decoder"], **({"clip_template": o["clip_template"]} if o["clip_template"] else {})})
        if o["sanity_seeds"] is not None:
            params["sanity_seeds"] = o["sanity_seeds"]
        if o["sanity_arch"]:
            params["sanity_arch"] = o["sanity_arch"]
        try:
            run = evaluation_create(export=export, unit_tests=unit, id_test=o["id_test"], id_fit=o["id_fit"],
                                    models=models or [settings.DEFAULT_MODEL], methods=methods or None,
                                    params=params, ood=o["ood"] or None, restrict_logits=o["restrict_logits"] or None,
                                    id_shifted=o["id_shifted"],
                                    fs_x=({"split": o["fs_x"], "variants": o["variant"]} if o["fs_x"]
                                          else {"split": "", "variants": o["variant"]} if o["preset"] == "imagenet-fs-x" else None),
                                    preset=o["preset"], enqueue=o["queue"])
        except EvaluationRunning as exc:
            if not o["resume"]:
                raise CommandError(str(exc)) from None
            resume_and_wait(self, exc.run.job, desc=f"evaluation #{exc.run.pk}")
            run = EvaluationRun.objects.get(pk=exc.run.pk)
            report(self, run)
            if run.status != EvaluationRun.Status.DONE:
                raise CommandError(f"evaluation #{run.pk} {run.status}: {run.message}")
            return
        except EvaluationError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"evaluation #{run.pk}: {', '.join(run.model_names)} x {len(run.methods)} detectors on {run.ood_label}"
                          + (f" + {unit.label}" if unit else ""))
        if o["queue"]:
            wait_for_job(run.job, desc=f"evaluation #{run.pk}")
            run.refresh_from_db()
        else:
            with InlineBar(f"evaluation #{run.pk}") as bar:
                try:
                    run = evaluation_run_inline(run=run, progress=bar.update, on_total=bar.on_total)
                except Exception as exc:
                    raise CommandError(f"evaluation #{run.pk} failed: {type(exc).__name__}: {exc}") from None
        report(self, run)
        if run.status != EvaluationRun.Status.DONE:
            raise CommandError(f"evaluation #{run.pk} {run.status}: {run.message}")


def pct(x) -> str:
    return "  -  " if x is None else f"{100 * x:5.1f}"


def report(cmd, run: EvaluationRun) -> None:
    res = run.results or {}
    for model, r in res.get("models", {}).items():
        acc = r.get("id_accuracy")
        cmd.stdout.write(f"  {model}: ID accuracy {pct(acc).strip()}% on {r['id_labelled']} labelled ID test images; "
                         f"{r['n_ood']} OOD images in {r['ood_classes']} classes; fit set {r['n_fit']}")
        if r.get("head_used"):
            cmd.stdout.write(f"  head: {r['head_used']['text']}")
        if r.get("restricted_logits"):
            cmd.stdout.write(f"  note: {r['restricted_logits']['note']}")
        cmd.stdout.write(f"  {'detector':<22} {'AUROC':>6} {'FPR@95 ID+':>10} {'mean cls':>8} {'FPR@95 OOD+':>11} {'unit fails':>10}")
        for det, e in r["detectors"].items():
            label = res.get("detectors", {}).get(det, {}).get("label", det)
            if e["status"] != "ok":
                cmd.stdout.write(f"  {label:<22} {'skipped' if e['status'] == 'skipped' else 'failed'}: {e['error']}")
                continue
            tests = e.get("unit_tests") or {}
            fails = f"{len(e.get('unit_tests_failed', []))}/{len(tests)}" if tests else "-"
            cmd.stdout.write(f"  {label:<22} {pct(e['pooled']['auroc']):>6} {pct(e['pooled']['fpr95_id_positive']):>10} "
                             f"{pct(e['mean_class']['fpr95_id_positive']):>8} {pct(e['pooled']['fpr95_ood_positive']):>11} {fails:>10}")
            for note in e.get("notes", []):
                cmd.stdout.write(f"  {'':<22} note: {note}")
        fs_rows = [(det, e["fs_x"]) for det, e in r["detectors"].items() if e.get("fs_x")]
        if fs_rows:
            sources = list(fs_rows[0][1]["per_source"])
            cmd.stdout.write(f"  ImageNet-FS-X AUROC: pooled, then per source ({', '.join(sources)})")
            for det, fx in fs_rows:
                label = res.get("detectors", {}).get(det, {}).get("label", det)
                cmd.stdout.write(f"    {label:<20} {pct(fx['pooled']['auroc']):>6}   "
                                 + " ".join(f"{pct(m['auroc']):>6}" for m in fx["per_source"].values()))
        for name, acc in (r.get("shifted") or {}).items():
            cmd.stdout.write(f"  shifted ID set {name}: ID accuracy {pct(acc.get('accuracy')).strip()}% on {acc['n']} images")
            cmd.stdout.write(f"    {'detector':<20} {'standard':>8} {'full spectrum':>13} {'shift':>6}  (AUROC)")
            for det, e in r["detectors"].items():
                fs = (e.get("full_spectrum") or {}).get(name)
                if fs:
                    label = res.get("detectors", {}).get(det, {}).get("label", det)
                    cmd.stdout.write(f"    {label:<20} {pct(fs['standard']['auroc']):>8} {pct(fs['full_spectrum']['auroc']):>13} "
                                     f"{pct(fs['shift']['auroc']):>6}")
        if r.get("severity_message"):
            cmd.stdout.write(f"  C-OOD severity levels: {r['severity_message']}")
        for note in (r.get("severity_info") or {}).get("notes", []):
            cmd.stdout.write(f"  severity levels: {note}")
        conv = r.get("conventions") or {}
        if conv:
            cmd.stdout.write(f"  conventions: FPR@95 ID+ {conv['fpr_method']}; AUPR {conv.get('aupr_method', 'average-precision')}; "
                             f"mOAA {conv['oaa_convention']}; "
                             f"severity {conv['severity_protocol']} (docs/evaluation.md)")
    sanity = res.get("sanity")
    if sanity and sanity.get("status") == "done":
        cmd.stdout.write(f"  random-weight sanity check ({sanity['weights']}):")
        for role, verdict in sanity["sets"].items():
            means = ", ".join(f"{d} {pct(t['mean']).strip()}±{pct(t['std']).strip()}" for d, t in verdict["detectors"].items())
            cmd.stdout.write(f"    {role}: {'SEPARABLE by random networks' if verdict['separable'] else 'not separable'} "
                             f"(mean AUROC %: {means})")
            for diff in sanity.get("differs", {}).get(role, []):
                cmd.stdout.write(f"      differs: {diff}")
    elif sanity:
        cmd.stdout.write(f"  random-weight sanity check {sanity.get('status')}: {sanity.get('note', '')}")
    cmd.stdout.write(f"  {run.message}")

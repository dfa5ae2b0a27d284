import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from curation import selectors
from curation.models import EvaluationRun, Source
from curation.services.demo import demo_gold_set, demo_planted_census, demo_preflight, demo_reviews_record
from curation.services.review import review_queue_sync
from curation.services.users import users_create_demo
from fixtures.archives import folder_to_wds
from fixtures.real_photos import MAX_ID_CLASSES, MIN_ID_ACCURACY, RealPhotosUnavailable, generate_real_demo, read_answer_key, stamp_table
from pipelines.evaluation.detectors import detector_names, get_detector

DEMO_GOLD_RATE = 0.1  # a tenth of what a person is served is a gold check (the settings allow 0 to 0.5)
LEFT_FOR_PEOPLE = {"n04487996"}  # trophy: one class the demo's stand-in leaves for people to review

# What the demo shortens to finish in about three minutes on two cores (docs/demo.md): each is
# printed with the command that runs the full version.
PER_CLASS = 6  # composites per candidate class: a pool of about 1,400 images (--per-class 12: about 2,800)
EVAL_TEST_PER_CLASS = 6
EVAL_FIT_PER_CLASS = 10
DEMO_VIM_DIM = 64  # ViM's rule gives 512 for 1,280-d features, which needs more than 512 fit images
DEMO_SANITY_SEEDS = 2  # the default is 5 random networks


def demo_leaves_out() -> list[str]:
    """The input-level detectors (ODIN, RankFeat...): each needs its own passes over every image
    (ODIN a backward pass, about 3x a forward one), too long for the demo; and the vision-language
    ones, which need a clip: model (the demo's model is a classifier; docs/evaluation.md)."""
    return sorted(m for m in detector_names() if getattr(get_detector(m), "input_level", False) or get_detector(m).needs_text)


ACCOUNT_ROLES = {
    "annotator": "annotator: reviews images for ID objects at /review/",
    "annotator2": "annotator: a second reviewer (the demo recorded its reviews from an answer key)",
    "curator": "curator: browses the images, follows review progress, adjudicates, judges flagged classes and duplicates, exports",
    "researcher": "researcher: browses the images (/curate/images/), runs and reads evaluations (/evaluations/)",
    "admin": "staff superuser: everything, including accounts and roles in /admin/",
}


class Command(BaseCommand):
    help = "Generate the bundled demo data, run every automatic stage on it, print a summary, and serve the web app."

    def add_arguments(self, parser):
        parser.add_argument("--data", default=None, help="Where to write the demo sources (default: $OODC_DATA_DIR/demo)")
        parser.add_argument("--addr", default="127.0.0.1:8000", help="Address for the web app (default 127.0.0.1:8000)")
        parser.add_argument("--no-serve", action="store_true", help="Stop after the summary instead of serving")
        parser.add_argument("--unit-tests", type=int, default=5, help="Images per OOD unit test in the demo's set (default 5)")
        parser.add_argument("--per-class", type=int, default=PER_CLASS,
                            help=f"Composites per candidate class (default {PER_CLASS}: a pool of about 1,400 images that keeps the demo "
                                 "near three minutes on 2 cores; 12: about 2,800)")

    def handle(self, *args, data=None, addr="127.0.0.1:8000", no_serve=False, unit_tests=5, per_class=PER_CLASS, **opts):
        out = self.stdout
        if not 1 <= per_class <= 100:
            raise CommandError(f"--per-class {per_class}: give 1 to 100 composites per class")
        problem = demo_preflight()
        if problem:
            raise CommandError(problem)
        started = time.monotonic()
        self._steps: list[tuple[str, float]] = []  # (step heading, when it started)
        root = Path(data or settings.DATA_DIR / "demo")
        model_name = settings.DEFAULT_MODEL
        out.write(self._step(f"1/10 Building the demo data from real photos in {root}"))
        paths = self._build(root, model_name, per_class)
        out.write(self._step("2/10 ID class set"))
        call_command("set_id_classes", "imagenet-1k", stdout=out)
        out.write(self._step("3/10 Ingesting the sources"))
        call_command("add_source", "demo-candidates", str(paths.candidates), stdout=out, stderr=self.stderr, show_broken=30)
        # the ID reference travels as WebDataset shards (timm's key layout), read in place: every demo
        # runs an archive source through ingest, extraction and the duplicate check (docs/sources.md)
        id_shards = root / "demo-id-wds"
        if not (id_shards / "_info.json").is_file():
            folder_to_wds(paths.id_reference, id_shards)
        call_command("add_source", "demo-id", str(id_shards), role="id", layout="wds", stdout=out, stderr=self.stderr)
        out.write(self._step("4/10 WordNet class filter on demo-candidates (ImageNet-OOD's policy, demo_policy.yaml: "
                                             f"classes of {max(1, per_class - 1)}+ images)"))
        csv_path = root / "class_filter_decisions.csv"
        call_command("filter_classes", candidates="source:demo-candidates", id_spec="imagenet-1k", out=str(csv_path),
                     policy=str(root / "demo_policy.yaml"), stdout=out)
        out.write(self._step(f"5/10 Predictions, features and near-duplicates ({model_name}, offline weights)"))
        # the model runs on the classes the filter kept or flagged (and the ID reference): the 174
        # classes it removed are never reviewed, so their images are not worth the model's time
        call_command("run_image_pipeline", sources=["demo-candidates", "demo-id"], skip_removed_classes=True, stdout=out,
                     stderr=self.stderr)
        out.write(self._step("6/10 Review queue"))
        report = review_queue_sync(source=Source.objects.get(name="demo-candidates"))
        out.write(f"  {report.summary()}")
        accounts = users_create_demo()
        out.write(self._step("7/10 Demo reviews: annotator2 answers from the demo data's answer key (a stand-in for people)"))
        reviewer = User.objects.get(username="annotator2")
        key = read_answer_key(paths.answer_key)
        decided = demo_reviews_record(user=reviewer, answer=lambda rel: key.get(rel, ("ood", [])), leave_folders=LEFT_FOR_PEOPLE)
        left = decided.pop("left_for_people", 0)
        out.write("  recorded: " + ", ".join(f"{v} {k}" for k, v in sorted(decided.items()))
                  + f"; {left} image(s) of class folder {', '.join(sorted(LEFT_FOR_PEOPLE))} skipped, left in the queue "
                    f"for you to review in the browser")
        gold = demo_gold_set(source=Source.objects.get(name="demo-candidates"), rate=DEMO_GOLD_RATE)
        out.write(f"  gold: {gold['id']} decided images with an ID object and {gold['ood']} without now check annotators, served "
                  f"as {DEMO_GOLD_RATE:.0%} of their images; each annotator's home page shows their gold accuracy")
        call_command("contamination_report", "demo-candidates", stdout=out)
        out.write(self._step("8/10 Export of the clean images and a small OOD unit-test set"))
        call_command("export", name="demo-clean", sources=["demo-candidates"], stdout=out, stderr=self.stderr)
        call_command("make_unit_tests", name="demo-unit-tests", per_test=unit_tests, stdout=out, stderr=self.stderr)
        self._planted(key)
        n_id = len(paths.id_classes)
        out.write(self._step(f"9/10 Evaluation: OOD detectors with {model_name} on demo-clean and the unit tests"))
        out.write(f"  ID test and fit sets: {EVAL_TEST_PER_CLASS} and {EVAL_FIT_PER_CLASS} composites per class of the "
                  f"{n_id} ID classes (other backgrounds, crops and seeds than the ID reference)")
        call_command("add_source", "demo-id-test", str(paths.id_test), role="id", stdout=out, stderr=self.stderr)
        call_command("add_source", "demo-id-fit", str(paths.id_fit), role="id", stdout=out, stderr=self.stderr)
        # covariate-shifted copies of the ID test images (ImageNet-C's most severe noise and blur, as
        # ImageNet-OOD's sanity check uses): reported standard, full-spectrum and as a shift
        shifted_dir = root / "demo-id-test-c"
        call_command("make_covariate_shift", from_spec="source:demo-id-test", out=str(shifted_dir),
                     corruptions="gaussian_noise,defocus_blur", severities="5", name="demo-id-test-c",
                     resume=shifted_dir.is_dir(), stdout=out, stderr=self.stderr)
        shifted = ["source:demo-id-test-c-gaussian_noise-5", "source:demo-id-test-c-defocus_blur-5"]
        methods = [m for m in detector_names() if m not in demo_leaves_out()]
        call_command("evaluate", export="demo-clean", unit_tests="demo-unit-tests", id_test="source:demo-id-test",
                     id_fit="source:demo-id-fit", id_shifted=shifted, methods=",".join(methods), vim_dim=DEMO_VIM_DIM,
                     sanity_seeds=DEMO_SANITY_SEEDS, stdout=out, stderr=self.stderr)
        run = EvaluationRun.objects.order_by("-pk").first()
        self._per_class_accuracy(run, model_name)
        self._explain(shifted, unit_tests, n_id=n_id)
        out.write(self._step("10/10 Summary"))
        for row in selectors.source_summaries():
            out.write(
                f"  {row['source'].name:<16} {row['source'].role:<9} classes={row['classes']:<3} unmapped={row['unmapped']:<2} "
                f"images={row['total']:<4} ok={row['ok']:<4} broken={row['broken']:<3} duplicate={row['duplicate']:<3} missing={row['missing']}"
            )
        out.write(self.style.MIGRATE_HEADING("Demo accounts (one per role; log in at the address below)"))
        for username, password in accounts.items():
            out.write(f"  {username:<11} password: {password:<16} {ACCOUNT_ROLES.get(username, '')}")
        self._timing(started)
        url = f"http://{addr}/"
        out.write(f"  Evaluation results: {url}evaluations/{run.pk}/ (log in as researcher or curator)")
        out.write(f"  Annotators review at {url}review/ (log in as annotator or annotator2); curators follow progress at "
                  f"{url}curate/reviews/, adjudicate at {url}curate/adjudicate/ and judge flagged classes at {url}curate/classes/")
        out.write(f"  Look at the data: {url}curate/images/ (every image, filtered and sorted; try a class sorted by similarity to "
                  f"the ID images) and the duplicate groups at {url}curate/duplicates/ (curator or researcher)")
        if no_serve:
            out.write(self.style.SUCCESS(f"Done. Serve with: python manage.py runserver --insecure {addr}  then open {url}"))
            return
        out.write(self.style.SUCCESS(f"Serving on {url} (admin: {url}admin/). Ctrl-C to stop."))
        # DEBUG stays off; --insecure only lets the development server hand out the static files
        call_command("runserver", addr, use_reloader=False, insecure_serving=True)

    def _step(self, heading: str) -> str:
        """The heading of a step, its start time noted for the timing printed at the end."""
        self._steps.append((heading.split(" ", 1)[0], time.monotonic()))
        return self.style.MIGRATE_HEADING(heading)

    def _timing(self, started: float) -> None:
        """The demo's own time and each step's share, so that a slower run names its step."""
        end = time.monotonic()
        total = end - started
        ends = [t for _n, t in self._steps[1:]] + [end]
        names = {"1/10": "data", "2/10": "ID classes", "3/10": "ingest", "4/10": "class filter", "5/10": "image pipeline",
                 "6/10": "queue", "7/10": "reviews", "8/10": "export", "9/10": "evaluation", "10/10": "summary"}
        parts = [f"{n} {names.get(n, '')} {e - t:.0f} s ({100 * (e - t) / total:.0f}%)" for (n, t), e in zip(self._steps, ends)]
        self.stdout.write(f"  The demo took {total:.0f} s (after set-up); per step: " + ", ".join(parts))

    def _build(self, root: Path, model_name: str, per_class: int):
        """The demo's data (once per settings and model): ID classes chosen by the model's accuracy
        on calibration composites, printed per class with its accuracy on the ID test set."""
        from pipelines.classes.imagenet import imagenet_lemmas, named_list
        from pipelines.features.classifiers import ModelUnavailable, load_model, top1_wnids

        out = self.stdout
        loaded = {}

        def predict(images: list) -> list[str]:
            if "lm" not in loaded:
                loaded["lm"] = load_model(model_name, device="cpu")
            return top1_wnids(loaded["lm"], images)

        id_wnids = set(named_list("imagenet-1k"))
        try:
            paths = generate_real_demo(root, predict=predict, model_name=model_name, id_wnids=id_wnids, per_class=per_class,
                                       id_test=EVAL_TEST_PER_CLASS, id_fit=EVAL_FIT_PER_CLASS, progress=lambda m: out.write(f"  {m}"))
        except (RealPhotosUnavailable, ModelUnavailable) as exc:
            raise CommandError(str(exc)) from None
        sel = paths.selection
        lemmas = imagenet_lemmas()
        measured = sel["accuracy"]
        out.write(f"  {len(stamp_table())} photo cut-outs in {sel['pool_classes']} WordNet classes; {sel['pool_images']} candidate "
                  f"composites, {sel['planted']} with an ID object planted (answer key: {paths.answer_key.name})")
        out.write(f"  ID classes: {len(paths.id_classes)} of the {len(measured)} ImageNet-1K classes among the cut-outs, where "
                  f"{model_name} is right on >= 70% of calibration composites: "
                  + ", ".join(lemmas.get(w, w).split(",")[0] for w in paths.id_classes))
        left_out = sorted((w for w in measured if w not in paths.id_classes), key=lambda w: (-measured[w], w))

        def named(ws: list[str]) -> str:
            return ", ".join(f"{lemmas.get(w, w).split(',')[0]} {100 * measured[w]:.0f}%" for w in ws)

        capped = [w for w in left_out if measured[w] >= MIN_ID_ACCURACY]
        if capped:
            out.write(f"  also >= 70% but past the {MAX_ID_CLASSES} best (kept short): {named(capped)}")
        if len(capped) < len(left_out):
            out.write(f"  under 70% on calibration: {named([w for w in left_out if w not in capped])}")
        return paths

    def _per_class_accuracy(self, run: EvaluationRun, model_name: str) -> None:
        """The model's accuracy on the ID test set, per ID class (from the evaluation's results)."""
        from pipelines.classes.imagenet import imagenet_lemmas, named_list

        per_class = ((run.results or {}).get("models", {}).get(model_name) or {}).get("id_accuracy_per_class") or {}
        if not per_class:
            return
        wnids, lemmas = named_list("imagenet-1k"), imagenet_lemmas()
        cells = sorted((lemmas.get(wnids[int(i)], wnids[int(i)]).split(",")[0][:18], a) for i, a in per_class.items())
        self.stdout.write(f"  {model_name}'s accuracy per ID class on the ID test set ({EVAL_TEST_PER_CLASS} images each):")
        for start in range(0, len(cells), 5):
            self.stdout.write("    " + "  ".join(f"{name + ' ' + format(100 * a, '.0f') + '%':<24}"
                                                  for name, a in cells[start:start + 5]).rstrip())

    def _planted(self, key: dict) -> None:
        planted = [rel for rel, (decision, _w) in key.items() if decision == "id"]
        c = demo_planted_census(source_name="demo-candidates", relative_paths=planted, export_name="demo-clean")
        self.stdout.write(f"  planted ID objects: {c['planted']}: {c['class_removed']} in classes the filter removed, "
                          f"{c['class_flagged']} in classes it flagged for a curator, {c['queued']} reviewed: "
                          f"{c['recorded_id']} recorded as id, {c['open']} still open; {c['in_export']} in the export")

    def _explain(self, shifted: list[str], unit_tests: int, *, n_id: int) -> None:
        """What the headline numbers mean, that the data are a demo, and what was shortened."""
        out = self.stdout
        out.write(self.style.MIGRATE_HEADING(f"What these numbers mean (demo data: {n_id} ID classes and the OOD candidates are "
                                             "real photo cut-outs composited onto real background photos)"))
        for line in (
            "ID accuracy: the share of ID test images whose top-1 prediction is their own class",
            "AUROC: the chance that a random ID image looks more ID to the detector than a random OOD image (50 chance, 100 perfect)",
            "FPR@95 ID+: the share of OOD images still accepted when 95% of ID images are",
            "unit fails: NINCO's 17 synthetic OOD unit tests (noise, patterns) a detector fails (AUROC below 95)",
            "full spectrum / shift: the same with noisy and blurred ID copies counted as ID, and ID vs those copies",
            "sanity check: whether randomly initialised networks already separate the sets (then low-level cues, not meaning, differ)",
        ):
            out.write(f"  {line}")
        out.write(self.style.MIGRATE_HEADING("Shortened for the demo (about 3 minutes on an idle 2-core machine, longer on a shared one); the full run"))
        out.write(f"  left out: {', '.join(demo_leaves_out())} (input-level: passes of their own over every image); "
                  f"ID fit {EVAL_FIT_PER_CLASS} images per class, so ViM's "
                  f"principal space is {DEMO_VIM_DIM}-d instead of the paper's 512; {DEMO_SANITY_SEEDS} random networks "
                  f"instead of 5; {unit_tests} images per unit test instead of 10")
        out.write("  full: python manage.py evaluate --export demo-clean --unit-tests demo-unit-tests --id-test source:demo-id-test "
                  "--id-fit source:demo-id-fit " + " ".join(f"--id-shifted {s}" for s in shifted)
                  + "  (every detector, default settings; ViM needs an ID fit set of more than 512 images)")

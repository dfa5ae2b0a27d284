import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import BaseCommand

from curation import selectors
from curation.models import EvaluationRun, Source
from curation.services.demo import demo_reviews_record
from curation.services.review import review_queue_sync
from curation.services.users import users_create_demo
from fixtures.demo import demo_answer, generate_demo, generate_demo_eval
from pipelines.detectors import detector_names

LEFT_FOR_PEOPLE = {"n09270735"}  # dune  # one class the demo's stand-in leaves for people to review

# What the demo shortens to finish in about three minutes on two cores (docs/demo.md): each is
# printed with the command that runs the full version.
EVAL_TEST_PER_CLASS = 10
EVAL_FIT_PER_CLASS = 30
DEMO_VIM_DIM = 64  # ViM's rule gives 512 for 1,280-d features, which needs more than 512 fit images
DEMO_SANITY_SEEDS = 2  # the default is 5 random networks
DEMO_LEAVES_OUT = {"odin"}  # one backward pass per image: about 3x a forward pass

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

    def handle(self, *args, data=None, addr="127.0.0.1:8000", no_serve=False, unit_tests=5, **opts):
        out = self.stdout
        started = time.monotonic()
        root = Path(data or settings.DATA_DIR / "demo")
        out.write(self.style.MIGRATE_HEADING(f"1/10 Generating demo data in {root}"))
        paths = generate_demo(root)
        out.write(self.style.MIGRATE_HEADING("2/10 ID class set"))
        call_command("set_id_classes", "imagenet-1k", stdout=out)
        out.write(self.style.MIGRATE_HEADING("3/10 Ingesting the sources"))
        call_command("add_source", "demo-candidates", str(paths.candidates), class_map=str(paths.class_map), stdout=out, stderr=self.stderr, show_broken=30)
        call_command("add_source", "demo-id", str(paths.id_reference), role="id", stdout=out, stderr=self.stderr)
        out.write(self.style.MIGRATE_HEADING("4/10 WordNet class filter on demo-candidates (preset imagenet-ood)"))
        csv_path = root / "class_filter_decisions.csv"
        call_command("filter_classes", candidates="source:demo-candidates", id_spec="imagenet-1k", out=str(csv_path), stdout=out)
        out.write(self.style.MIGRATE_HEADING(f"5/10 Predictions, features and near-duplicates ({settings.DEFAULT_MODEL}, offline weights)"))
        call_command("run_image_pipeline", sources=["demo-candidates", "demo-id"], stdout=out, stderr=self.stderr)
        out.write(self.style.MIGRATE_HEADING("6/10 Review queue"))
        report = review_queue_sync(source=Source.objects.get(name="demo-candidates"))
        out.write(f"  {report.summary()}")
        accounts = users_create_demo()
        out.write(self.style.MIGRATE_HEADING("7/10 Demo reviews: annotator2 answers from the demo data's answer key (a stand-in for people)"))
        reviewer = User.objects.get(username="annotator2")
        decided = demo_reviews_record(user=reviewer, answer=demo_answer, leave_folders=LEFT_FOR_PEOPLE)
        left = decided.pop("left_for_people", 0)
        out.write("  recorded: " + ", ".join(f"{v} {k}" for k, v in sorted(decided.items()))
                  + f"; {left} image(s) of class folder {', '.join(sorted(LEFT_FOR_PEOPLE))} skipped, left in the queue "
                    f"for you to review in the browser")
        call_command("contamination_report", "demo-candidates", stdout=out)
        out.write(self.style.MIGRATE_HEADING("8/10 Export of the clean images and a small OOD unit-test set"))
        call_command("export", name="demo-clean", sources=["demo-candidates"], stdout=out, stderr=self.stderr)
        call_command("make_unit_tests", name="demo-unit-tests", per_test=unit_tests, stdout=out, stderr=self.stderr)
        out.write(self.style.MIGRATE_HEADING(f"9/10 Evaluation: OOD detectors with {settings.DEFAULT_MODEL} on demo-clean and the unit tests"))
        eval_paths = generate_demo_eval(root, test_per_class=EVAL_TEST_PER_CLASS, fit_per_class=EVAL_FIT_PER_CLASS)
        out.write(f"  ID test and fit sets: {EVAL_TEST_PER_CLASS} and {EVAL_FIT_PER_CLASS} augmented crops per class of "
                  f"{eval_paths.photos} real photos (scikit-image's camera, coffee, rocket, motorcycle, chelsea)")
        call_command("add_source", "demo-id-test", str(eval_paths.id_test), role="id", stdout=out, stderr=self.stderr)
        call_command("add_source", "demo-id-fit", str(eval_paths.id_fit), role="id", stdout=out, stderr=self.stderr)
        # covariate-shifted copies of the ID test images (ImageNet-C's most severe noise and blur, as
        # ImageNet-OOD's sanity check uses): reported standard, full-spectrum and as a shift
        shifted_dir = root / "demo-id-test-c"
        call_command("make_covariate_shift", from_spec="source:demo-id-test", out=str(shifted_dir),
                     corruptions="gaussian_noise,defocus_blur", severities="5", name="demo-id-test-c",
                     resume=shifted_dir.is_dir(), stdout=out, stderr=self.stderr)
        shifted = ["source:demo-id-test-c-gaussian_noise-5", "source:demo-id-test-c-defocus_blur-5"]
        methods = [m for m in detector_names() if m not in DEMO_LEAVES_OUT]
        call_command("evaluate", export="demo-clean", unit_tests="demo-unit-tests", id_test="source:demo-id-test",
                     id_fit="source:demo-id-fit", id_shifted=shifted, methods=",".join(methods), vim_dim=DEMO_VIM_DIM,
                     sanity_seeds=DEMO_SANITY_SEEDS, stdout=out, stderr=self.stderr)
        run = EvaluationRun.objects.order_by("-pk").first()
        self._explain(shifted, unit_tests, photos=eval_paths.photos)
        out.write(self.style.MIGRATE_HEADING("10/10 Summary"))
        for row in selectors.source_summaries():
            out.write(
                f"  {row['source'].name:<16} {row['source'].role:<9} classes={row['classes']:<3} unmapped={row['unmapped']:<2} "
                f"images={row['total']:<4} ok={row['ok']:<4} broken={row['broken']:<3} duplicate={row['duplicate']:<3} missing={row['missing']}"
            )
        out.write(self.style.MIGRATE_HEADING("Demo accounts (one per role; log in at the address below)"))
        for username, password in accounts.items():
            out.write(f"  {username:<11} password: {password:<16} {ACCOUNT_ROLES.get(username, '')}")
        out.write(f"  The demo took {time.monotonic() - started:.0f} s (after set-up).")
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

    def _explain(self, shifted: list[str], unit_tests: int, *, photos: int) -> None:
        """What the headline numbers mean, that the data are a demo, and what was shortened."""
        out = self.stdout
        out.write(self.style.MIGRATE_HEADING(f"What these numbers mean (demo data: {photos} ID classes from {photos} photos, "
                                             "generated textures as OOD)"))
        for line in (
            "ID accuracy: the share of ID test images whose top-1 prediction is their own class",
            "AUROC: the chance that a random ID image looks more ID to the detector than a random OOD image (50 chance, 100 perfect)",
            "FPR@95 ID+: the share of OOD images still accepted when 95% of ID images are",
            "unit fails: NINCO's 17 synthetic OOD unit tests (noise, patterns) a detector fails (AUROC below 95)",
            "full spectrum / shift: the same with noisy and blurred ID copies counted as ID, and ID vs those copies",
            "sanity check: whether randomly initialised networks already separate the sets (then low-level cues, not meaning, differ)",
        ):
            out.write(f"  {line}")
        out.write(self.style.MIGRATE_HEADING("Shortened for the demo (about 3 minutes on 2 cores); the full run"))
        out.write(f"  left out: {', '.join(sorted(DEMO_LEAVES_OUT))}; ID fit {EVAL_FIT_PER_CLASS} images per class, so ViM's "
                  f"principal space is {DEMO_VIM_DIM}-d instead of the paper's 512; {DEMO_SANITY_SEEDS} random networks "
                  f"instead of 5; {unit_tests} images per unit test instead of 10")
        out.write("  full: python manage.py evaluate --export demo-clean --unit-tests demo-unit-tests --id-test source:demo-id-test "
                  "--id-fit source:demo-id-fit " + " ".join(f"--id-shifted {s}" for s in shifted)
                  + "  (every detector, default settings; ViM needs an ID fit set of more than 512 images)")

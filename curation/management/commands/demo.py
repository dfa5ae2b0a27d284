from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand

from curation import selectors
from curation.models import EvaluationRun, Source
from curation.services.review import review_queue_sync
from curation.services.demo import demo_reviews_record
from curation.services.users import users_create_demo
from fixtures.demo import demo_answer, generate_demo, generate_demo_eval

LEFT_FOR_PEOPLE = {"n09270735"}  # dune  # one class the demo's stand-in leaves for people to review


class Command(BaseCommand):
    help = "Generate the bundled demo data, run every automatic stage on it, print a summary, and serve the web app."

    def add_arguments(self, parser):
        parser.add_argument("--data", default=None, help="Where to write the demo sources (default: $OODC_DATA_DIR/demo)")
        parser.add_argument("--addr", default="127.0.0.1:8000", help="Address for the web app (default 127.0.0.1:8000)")
        parser.add_argument("--no-serve", action="store_true", help="Stop after the summary instead of serving")
        parser.add_argument("--unit-tests", type=int, default=10, help="Images per OOD unit test in the demo's set (default 10)")

    def handle(self, *args, data=None, addr="127.0.0.1:8000", no_serve=False, unit_tests=10, **opts):
        out = self.stdout
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
        out.write("  " + ", ".join(f"{k} {v}" for k, v in sorted(decided.items()))
                  + f" (class folder(s) {', '.join(sorted(LEFT_FOR_PEOPLE))} left for you to review)")
        call_command("contamination_report", "demo-candidates", stdout=out)
        out.write(self.style.MIGRATE_HEADING("8/10 Export of the clean images and a small OOD unit-test set"))
        call_command("export", name="demo-clean", sources=["demo-candidates"], stdout=out, stderr=self.stderr)
        call_command("make_unit_tests", name="demo-unit-tests", per_test=unit_tests, stdout=out, stderr=self.stderr)
        out.write(self.style.MIGRATE_HEADING(f"9/10 Evaluation: every OOD detector with {settings.DEFAULT_MODEL} on demo-clean and the unit tests"))
        eval_paths = generate_demo_eval(root)
        call_command("add_source", "demo-id-test", str(eval_paths.id_test), role="id", stdout=out, stderr=self.stderr)
        call_command("add_source", "demo-id-fit", str(eval_paths.id_fit), role="id", stdout=out, stderr=self.stderr)
        # covariate-shifted copies of the ID test images (ImageNet-C's most severe noise and blur, as
        # ImageNet-OOD's sanity check uses): reported standard, full-spectrum and as a shift
        shifted_dir = root / "demo-id-test-c"
        call_command("make_covariate_shift", from_spec="source:demo-id-test", out=str(shifted_dir),
                     corruptions="gaussian_noise,defocus_blur", severities="5", name="demo-id-test-c",
                     resume=shifted_dir.is_dir(), stdout=out, stderr=self.stderr)
        call_command("evaluate", export="demo-clean", unit_tests="demo-unit-tests", id_test="source:demo-id-test",
                     id_fit="source:demo-id-fit", id_shifted=["source:demo-id-test-c-gaussian_noise-5",
                                                                "source:demo-id-test-c-defocus_blur-5"],
                     stdout=out, stderr=self.stderr)
        run = EvaluationRun.objects.order_by("-pk").first()
        out.write(self.style.MIGRATE_HEADING("10/10 Summary"))
        for row in selectors.source_summaries():
            out.write(
                f"  {row['source'].name:<16} {row['source'].role:<9} classes={row['classes']:<3} unmapped={row['unmapped']:<2} "
                f"images={row['total']:<4} ok={row['ok']:<4} broken={row['broken']:<3} duplicate={row['duplicate']:<3} missing={row['missing']}"
            )
        out.write(self.style.MIGRATE_HEADING("Demo accounts (annotators review; the curator follows progress and adjudicates)"))
        for username, password in accounts.items():
            out.write(f"  {username:<11} password: {password}")
        url = f"http://{addr}/"
        out.write(f"  Evaluation results: {url}evaluations/{run.pk}/ (log in as researcher or curator)")
        out.write(f"  Annotators review at {url}review/ (log in as annotator or annotator2); curators follow progress at "
                  f"{url}curate/reviews/, adjudicate at {url}curate/adjudicate/ and judge flagged classes at {url}curate/classes/")
        if no_serve:
            out.write(self.style.SUCCESS(f"Done. Serve with: python manage.py runserver --insecure {addr}  then open {url}"))
            return
        out.write(self.style.SUCCESS(f"Serving on {url} (admin: {url}admin/). Ctrl-C to stop."))
        # DEBUG stays off; --insecure only lets the development server hand out the static files
        call_command("runserver", addr, use_reloader=False, insecure_serving=True)

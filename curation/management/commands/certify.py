from django.core.management.base import BaseCommand, CommandError

from curation.models import CertificationPlan, Source
from curation.services.certification import (
    CertificationError,
    certification_close,
    certification_plan_create,
    certification_refresh,
    method_name,
)
from pipelines.review import certify as C


def share(x):
    return "-" if x is None else f"{100 * x:.2f}%"


class Command(BaseCommand):
    help = ("Certify a source's unreviewed images from a stratified sample (docs/review.md, 'Review in full or certify'). "
            "`certify plan --source S` makes the plan and queues its pilot; `certify status --source S` shows the bound "
            "(and moves the plan on); `certify close --source S` stops it.")

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["plan", "status", "close"])
        parser.add_argument("--source", required=True)
        parser.add_argument("--score", default=CertificationPlan.Score.NEAREST_ID, choices=CertificationPlan.Score.values)
        parser.add_argument("--method", default=C.BETTING, choices=C.METHODS,
                            help="betting (default): one betting confidence sequence for the total; wor-cs/*: the older "
                                 "per-stratum confidence sequences combined by an intersection-union test")
        parser.add_argument("--strata", type=int, default=C.DEFAULT_STRATA)
        parser.add_argument("--full-top", type=float, default=0.0, help="share of the most ID-like images reviewed in full")
        parser.add_argument("--confidence", type=float, default=0.95)
        parser.add_argument("--target", type=float, default=0.005, help="largest ID share to certify, e.g. 0.005 for 0.5%%")
        parser.add_argument("--pilot", type=int, default=C.PILOT_PER_STRATUM, help="pilot reviews per stratum")
        parser.add_argument("--seed", type=int)
        parser.add_argument("--unclear-is-ood", action="store_true", help="do not count `unclear` against the pool")

    def handle(self, *args, action, source, **o):
        src = Source.objects.filter(name=source).first()
        if src is None:
            raise CommandError(f"unknown source {source!r}: see `python manage.py add_source --help`")
        try:
            if action == "plan":
                plan = certification_plan_create(source=src, score=o["score"], n_strata=o["strata"], full_top=o["full_top"],
                                                 confidence=o["confidence"], target=o["target"], pilot=o["pilot"], seed=o["seed"],
                                                 unclear_is_id=not o["unclear_is_ood"], method=o["method"])
                sizes = [s["size"] for s in plan.strata]
                pilot = (f"pilot of {plan.allocation[0]['end']} draws queued" if plan.allocation
                         else f"pilot of {plan.pilot} per stratum queued")
                self.stdout.write(f"plan {plan.pk} for {src.name}: {sum(sizes)} undecided images in {len(sizes)} strata {sizes}, "
                                  f"seed {plan.seed}, method {method_name(plan)}; {pilot}")
                return
            plan = CertificationPlan.objects.filter(source=src).order_by("-created_at").first()
            if plan is None:
                raise CommandError(f"{src.name} has no certification plan: run `python manage.py certify plan --source {src.name}`")
            if action == "close":
                certification_close(plan=plan)
                self.stdout.write(f"plan {plan.pk} closed")
                return
        except CertificationError as e:
            raise CommandError(str(e)) from None
        sd = certification_refresh(plan=plan)
        c = sd.cert
        self.stdout.write(f"plan {plan.pk} for {src.name}: {plan.get_status_display()}; target <= {share(plan.target)} at "
                          f"{plan.confidence:.0%}; method {method_name(plan)}")
        self.stdout.write(f"  reviews used {sum(c.bound.reviewed)} (waiting on {sd.waiting} undecided in the serving order); "
                          f"remainder {c.remainder_size} images: estimate {share(c.estimate)}, bound {share(c.remainder_share)} "
                          f"({c.remainder_bound} ID images at most)")
        if sd.expected is not None:
            self.stdout.write(f"  reviews still expected: about {sd.expected}")
        for h, n in enumerate(sd.sizes):
            pi = sd.draw_shares[h] if h < len(sd.draw_shares) else None
            self.stdout.write(f"  stratum {h}: {n} images, {sd.reviewed[h]} reviewed, {sd.found[h]} ID" + (" (reviewed in full)" if sd.full[h] else "")
                              + (f", drawn with probability {pi:.3f}" if pi is not None else ""))

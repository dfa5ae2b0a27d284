from django.core.management.base import BaseCommand, CommandError

from curation.models import Source
from curation.selectors import contamination_report


def pct(x):
    return "   -  " if x is None else f"{100 * x:5.1f}%"


class Command(BaseCommand):
    help = ("NINCO's Table 1 for a source: from a seeded random sample of reviewed images, the share showing an ID object "
            "(final decision id) with its Wilson 95% interval, overall and per class.")

    def add_arguments(self, parser):
        parser.add_argument("source")
        parser.add_argument("--sample", type=int, default=400, help="images sampled (default 400, as NINCO)")
        parser.add_argument("--seed", type=int, default=0)

    def handle(self, *args, source, sample, seed, **opts):
        src = Source.objects.filter(name=source).first()
        if src is None:
            raise CommandError(f"unknown source {source!r}")
        if sample < 1:
            raise CommandError("--sample must be at least 1")
        r = contamination_report(source=src, sample=sample, seed=seed)
        if not r["n"]:
            raise CommandError(f"{source}: no reviewed image has a final decision yet")
        self.stdout.write(f"{source}: {r['n']} of {r['reviewed']} reviewed images sampled (seed {seed})")
        self.stdout.write(f"  with ID objects: {r['n_id']}/{r['n']} = {pct(r['share'])}  (95% CI {pct(r['ci_low'])} - {pct(r['ci_high'])}); "
                          f"unclear {r['n_unclear']}, not the target {r['n_not_target']}")
        for c in r["classes"]:
            self.stdout.write(f"  {c['wnid'] or '-':<10} {(c['synset'] or c['folder'])[:28]:<28} {c['n_id']:>4}/{c['n']:<4} {pct(c['share'])}  "
                              f"[{pct(c['ci_low'])}, {pct(c['ci_high'])}]")

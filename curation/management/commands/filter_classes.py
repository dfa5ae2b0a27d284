import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from curation import selectors
from curation.management.cli import output_file
from curation.management.progress import wait_for_job
from curation.models import Job
from curation.services.class_filter import ClassFilterError, class_filter_run_inline, class_filter_start
from pipelines.classes.filter import FilterInputError, PolicyError
from pipelines.classes.filter.policy import DEFAULT_PRESET, PRESETS
from pipelines.classes.wordnet import WordNetUnavailable
from pipelines.export import csv_cells


class Command(BaseCommand):
    help = (
        "Apply the WordNet class rules to candidate classes and write one decision per candidate "
        "(keep / flag / remove, the deciding rule, and every rule that fired with its WordNet path)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--candidates", required=True,
                            help="imagenet-21k, imagenet-21k-p, imagenet-21k-p-winter21, imagenet-12k, a file of wnids, or source:NAME")
        parser.add_argument("--id", default="imagenet-1k", dest="id_spec",
                            help="ID classes: imagenet-1k (default), a file of wnids, or a registered ID class set's name")
        parser.add_argument("--policy", default=DEFAULT_PRESET,
                            help=f"a preset ({', '.join(PRESETS)}; default {DEFAULT_PRESET}) or a .yaml/.json policy file")
        parser.add_argument("--out", required=True,
                            help="CSV to write (wnid,name,decision,rule,related_wnid,related_name,detail,semantic_similarity,closest_id_wnid,"
                                 "path_distance,flag_strength,flag_level); - for stdout")
        parser.add_argument("--report", help="also write the run's report (Markdown) here")
        parser.add_argument("--queue", action="store_true", help="run it on the Celery workers and wait (default: in this process)")

    def handle(self, *args, candidates, id_spec, policy, out, report=None, queue=False, **opts):
        out, report = output_file(out, "--out"), output_file(report, "--report")
        try:
            run = class_filter_start(candidates_spec=candidates, id_spec=id_spec, policy_spec=policy, enqueue=queue)
            total = run.job.total
            if queue:
                job = wait_for_job(run.job, desc="class filter", unit="class")
                if job.status != Job.Status.DONE:
                    raise CommandError(f"class filter job #{job.pk} {job.status}: {job.message}")
            else:
                with tqdm(total=total, desc="class filter", unit="class", file=sys.stderr, dynamic_ncols=True) as bar:
                    class_filter_run_inline(run=run, progress=lambda n: bar.update(n - bar.n))
        except (ClassFilterError, PolicyError, FilterInputError, WordNetUnavailable) as exc:
            raise CommandError(str(exc)) from None
        run.refresh_from_db()
        self._write_csv(run, out)
        data = selectors.class_filter_report(run=run, list_limit=None if report else 0)
        if report:
            Path(report).write_text(render_markdown(data), encoding="utf-8")
        if out != "-":
            self._summary(data, out, report)

    def _write_csv(self, run, out):
        fh = sys.stdout if out == "-" else open(out, "w", newline="", encoding="utf-8")
        try:
            writer = csv_cells.DictWriter(fh, fieldnames=selectors.CLASS_DECISION_CSV_COLUMNS)
            writer.writeheader()
            writer.writerows(selectors.class_decision_csv_rows(run=run))
        except OSError as exc:
            raise CommandError(f"{out}: cannot write the CSV ({exc})") from None
        finally:
            if fh is not sys.stdout:
                fh.close()

    def _summary(self, data, out, report):
        run = data["run"]
        d = data["by_decision"]
        self.stdout.write(self.style.SUCCESS(
            f"Class filter run #{run.pk}: {data['total']} candidates ({run.candidates_spec}) against {run.id_spec} "
            f"({len(run.id_wnids)} ID classes), policy {run.policy_name} [{run.policy_digest[:12]}]"))
        levels = data["flag_levels"]
        self.stdout.write(f"  keep {d.get('keep', 0)}   flag {d.get('flag', 0)} ({levels['strong']} strong, {levels['weak']} weak)"
                          f"   remove {d.get('remove', 0)}")
        self.stdout.write(f"  {'rule':<20} {'severity':<8} {'fired':>7} {'decided':>8}")
        for r in data["per_rule"]:
            self.stdout.write(f"  {r['rule']:<20} {r['severity']:<8} {r['fired']:>7} {r['deciding']:>8}")
        for row in data["by_rule"]:
            if row["rule"].startswith("override_"):
                self.stdout.write(f"  {row['rule']:<20} {'':<8} {'':>7} {row['n']:>8}")
        self.stdout.write(f"Decisions: {out}" + (f"   Report: {report}" if report else "") + f"   Web: /class-filter/{run.pk}/")


def render_markdown(data: dict) -> str:
    run = data["run"]
    d = data["by_decision"]
    lines = [
        f"# Class filter run #{run.pk}", "",
        f"- candidates: `{run.candidates_spec}` ({data['total']} classes)",
        f"- ID classes: `{run.id_spec}` ({len(run.id_wnids)} classes)",
        f"- policy: `{run.policy_name}` ({run.policy_origin}), digest `{run.policy_digest}`",
        f"- WordNet data.noun sha1 `{run.wordnet_sha1}`, code `{run.job.code_version}`",
        f"- decisions: keep {d.get('keep', 0)}, flag {d.get('flag', 0)}, remove {d.get('remove', 0)}", "",
        "## Rules", "", "| rule | severity | fired | deciding | what it means |", "|---|---|---:|---:|---|",
    ]
    lines += [f"| {r['rule']} | {r['severity']} | {r['fired']} | {r['deciding']} | {r['explanation']} |" for r in data["per_rule"]]
    for title, rows in (("Flagged, strongest first", data["flagged"]), ("Removed", data["removed"])):
        lines += ["", f"## {title} ({len(rows)})", "",
                  "| wnid | name | rule | strength | related | closest ID class (similarity) | detail |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {x.wnid or x.key} | {x.name} | {x.rule} | {_strength(x)} | {x.related_name} {x.related_wnid} | "
                  f"{_closest(x)} | {x.detail.replace('|', '/')} |" for x in rows]
    lines += ["", f"## Overrides ({len(data['overridden'])})", ""]
    lines += [f"- {x.wnid} {x.name}: {x.rule} ({x.detail.split(';')[0]})" for x in data["overridden"]] or ["none"]
    lines += ["", f"## Resolved flags ({len(data['resolved'])})", ""]
    lines += [f"- {x.wnid or x.key} {x.name}: {x.resolution} by {x.resolved_by or '?'} ({x.resolution_note})" for x in data["resolved"]] or ["none"]
    return "\n".join(lines) + "\n"


def _strength(x) -> str:
    return f"{x.flag_level} {x.flag_strength:.2f}" if x.flag_strength is not None else ""


def _closest(x) -> str:
    return f"{x.closest_id_name} {x.closest_id_wnid} ({x.semantic_similarity:.3f})" if x.closest_id_wnid else ""

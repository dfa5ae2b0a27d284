from django.core.management.base import BaseCommand

from pipelines.evaluation.detectors import DETECTORS, detector_names


def detectors_table() -> str:
    """The registered detectors and their parameters as a Markdown table, made from the
    detectors' own declarations (docs/evaluation.md carries it; a test keeps the two equal)."""
    lines = ["| detector | name | paper | reference implementation (tested against) | needs | parameter | flag | default | range | what it sets |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in detector_names():
        cls = DETECTORS[name]
        needs = ", ".join(x for x, on in (("ID fit set", cls.needs_fit), ("last layer", cls.needs_head),
                                           ("text head (a clip: model)", cls.needs_text),
                                           ("local tokens (a ViT clip: model)", cls.needs_local),
                                           ("the images (input-level"
                                           + (f": {'; '.join(cls.layers)}" if cls.layers else "") + ")", cls.input_level)) if on) or "outputs only"
        rows = cls.parameters or (None,)
        head = f"| {cls.label} | `{name}` | {cls.paper} | {cls.reference or '-'} | {needs} |"
        for p in rows:
            if p is None:
                lines.append(f"{head} - | - | - | - | - |")
                continue
            default = "from the data" if p.default is None else p.format(p.default)
            lines.append(f"{head} `{p.name}` | `{p.flag(name)}` | {default}"
                         f"{' (' + p.source + ')' if p.source else ''} | {p.range_text()} | {p.help} |")
    return "\n".join(lines)


class Command(BaseCommand):
    help = ("List the registered OOD detectors with their papers, the reference implementation (repository, file, commit) "
            "each is tested against, and their parameters (the evaluate command's flags and the admin form's fields come "
            "from the same declarations), as a Markdown table.")

    def add_arguments(self, parser):
        parser.add_argument("--names", action="store_true", help="only the names, one a line")

    def handle(self, *args, **opts):
        if opts["names"]:
            self.stdout.write("\n".join(detector_names()))
            return
        self.stdout.write(detectors_table())
        self.stdout.write(f"\n{len(DETECTORS)} detectors")
        for name in detector_names():
            if DETECTORS[name].costly:
                self.stdout.write(f"not run unless named (--methods, or ticked in the admin): {name}: {DETECTORS[name].costly}")

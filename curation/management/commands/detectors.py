from django.core.management.base import BaseCommand

from pipelines.detectors import DETECTORS, detector_names, plain_number


def detectors_table() -> str:
    """The registered detectors and their parameters as a Markdown table, made from the
    detectors' own declarations (docs/evaluation.md carries it; a test keeps the two equal)."""
    lines = ["| detector | name | paper | needs | parameter | flag | default | range | what it sets |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in detector_names():
        cls = DETECTORS[name]
        needs = ", ".join(x for x, on in (("ID fit set", cls.needs_fit), ("last layer", cls.needs_head),
                                           ("the images (input-level)", cls.input_level)) if on) or "outputs only"
        rows = cls.parameters or (None,)
        for p in rows:
            if p is None:
                lines.append(f"| {cls.label} | `{name}` | {cls.paper} | {needs} | - | - | - | - | - |")
                continue
            default = "from the data" if p.default is None else f"{p.default:g}"
            lines.append(f"| {cls.label} | `{name}` | {cls.paper} | {needs} | `{p.name}` | `{p.flag(name)}` | {default}"
                         f"{' (' + p.source + ')' if p.source else ''} | {plain_number(p.low)} to {plain_number(p.high)} | {p.help} |")
    return "\n".join(lines)


class Command(BaseCommand):
    help = ("List the registered OOD detectors with their parameters (the evaluate command's flags and the admin form's "
            "fields come from the same declarations), as a Markdown table.")

    def handle(self, *args, **opts):
        self.stdout.write(detectors_table())

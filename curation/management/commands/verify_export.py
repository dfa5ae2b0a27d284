import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from curation.models import Export
from curation.services.exports import export_path, export_verify


def _id(text: str) -> int | None:
    """A row id by the one integer rule (ASCII digits, 64 bits), or None."""
    from pipelines.numbers import row_id

    try:
        return row_id(text, "id")
    except ValueError:
        return None


class Command(BaseCommand):
    help = ("Check an export folder: every file's sha256 against manifest.json, missing and unlisted files, and (when this "
            "database wrote it) the manifest itself. Exit status 1 when anything is wrong, naming each file.")

    def add_arguments(self, parser):
        parser.add_argument("path", nargs="?", help="export folder, or NAME/vN, or an export id")
        parser.add_argument("--all", action="store_true", dest="every",
                            help="every finished export this database knows (e.g. after restoring a backup: docs/backup.md)")

    def handle(self, *args, path=None, every=False, **opts):
        if every == bool(path):
            raise CommandError("give one export (a folder, NAME/vN or an id) or --all")
        if every:
            failed = []
            exports = list(Export.objects.filter(status=Export.Status.DONE).order_by("pk"))
            for export in exports:
                try:
                    self.handle(path=str(export.pk))
                except CommandError as exc:
                    failed.append(f"{export.label}: {exc}")
            if failed:
                raise CommandError(f"{len(failed)} of {len(exports)} export(s) do not verify: " + "; ".join(failed))
            self.stdout.write(self.style.SUCCESS(f"all {len(exports)} finished export(s) verify"))
            return
        target = Path(path)
        if not target.exists():
            export = None
            if _id(path) is not None:
                export = Export.objects.filter(pk=_id(path), status=Export.Status.DONE).first()
            elif "/v" in path:
                name, _, version = path.rpartition("/v")
                export = Export.objects.filter(name=name, version=_id(version) or -1, status=Export.Status.DONE).first()
            if export is None:
                raise CommandError(f"{path}: no such folder, and no finished export by that id or NAME/vN")
            target = export_path(export)
        if not target.is_dir():
            raise CommandError(f"{path}: not an export folder (a folder holding manifest.json), nor NAME/vN or an export id")
        with tqdm(desc=f"verify {target.name}", unit="file", file=sys.stderr, dynamic_ncols=True) as bar:
            v = export_verify(path=target, progress=bar.update)
        if v.ok:
            m = v.manifest
            version = f"v{m['version']}" if m.get("version") is not None else "not a versioned export"
            self.stdout.write(self.style.SUCCESS(f"OK: {target}: {v.checked} files match manifest.json ({m['name']}, {version}, "
                                                 f"{str(m.get('kind', '')).replace('_', '-')})"))
            return
        for problem in v.problems:
            self.stderr.write(f"FAIL {problem}")
        raise CommandError(f"{target}: {len(v.problems)} problem(s); {v.checked} files checked")

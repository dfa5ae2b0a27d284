from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from curation.audit import audit_record
from curation.models import CandidateClass, Source
from pipelines.classes.folders import ClassMapping, map_class_folders, read_class_map
from pipelines.classes.wordnet import load_wordnet
from pipelines.names import InvalidName, check_name
from pipelines.sources.layouts import DEFAULT_LAYOUT, LayoutError, source_layout
from pipelines.sources.layouts.lists import read_path_list
from pipelines.sources.walk import scan_class_folders


class SourceError(ValueError):
    pass


@dataclass
class SourceRegistration:
    source: Source
    created: bool
    classes: list[CandidateClass]

    @property
    def unmapped(self) -> list[CandidateClass]:
        return [c for c in self.classes if c.mapping == CandidateClass.Mapping.UNMAPPED]


def source_register(
    *, name: str, root: str | Path, role: str = Source.Role.CANDIDATE, class_map_path: str | Path | None = None,
    user: User | None = None, restrict_to_allowed_roots: bool = False, layout: str = DEFAULT_LAYOUT,
    layout_options: dict[str, Any] | None = None, list_path: str | Path | None = None, list_format: str = "",
) -> SourceRegistration:
    """Create or update a source and map its class folders to WordNet.

    ``layout`` names how the root holds its images (pipelines/sources/layouts/), with its
    ``layout_options``; ``list_path`` (a published list in ``list_format``) makes the source just
    the members that list names. Classes of a folder source are mapped here; an archive's classes
    are only known once its members are read, so ingest maps them.

    ``restrict_to_allowed_roots`` is set by web entry points: there, a root must lie under
    ``settings.SOURCE_ALLOWED_ROOTS`` so that a browser cannot point the server at any folder.
    """
    try:
        check_name(name, what="source name")
    except InvalidName as exc:
        raise SourceError(str(exc)) from None
    root = Path(root).expanduser()
    if not root.is_dir():
        raise SourceError(f"{root}: no such folder (a source is ROOT/<class folder>/<image files>)")
    root = root.resolve()
    if restrict_to_allowed_roots and not any(root == a or a in root.parents for a in settings.SOURCE_ALLOWED_ROOTS):
        allowed = ", ".join(str(a) for a in settings.SOURCE_ALLOWED_ROOTS)
        raise SourceError(f"{root} is outside the folders sources may come from ({allowed}); set OODC_SOURCE_ROOTS")
    if role not in Source.Role.values:
        raise SourceError(f"role must be one of {', '.join(Source.Role.values)}, not {role!r}")
    options = {k: v for k, v in (layout_options or {}).items() if v not in (None, "")}
    try:
        plugin = source_layout(layout)
        for key in ("wnid_list", "names_file"):  # files the layout reads again at every scan: kept as absolute paths
            if key in options:
                options[key] = str(Path(options[key]).expanduser().resolve())
        plugin.check_options(options)
        if list_path:
            listing = read_path_list(Path(list_path).expanduser().resolve(), list_format or "paths")
            options["list"] = {"path": listing.path, "format": listing.format, "sha256": listing.sha256, "entries": len(listing.entries)}
        elif list_format:
            raise LayoutError("--list-format needs --list FILE")
    except LayoutError as exc:
        raise SourceError(str(exc)) from None
    wn = load_wordnet(settings.NLTK_DATA)
    class_map = read_class_map(class_map_path, wn) if class_map_path else None

    with transaction.atomic():
        source = Source.objects.select_for_update().filter(name=name).first()
        created = source is None
        if created:
            source = Source.objects.create(name=name, root=str(root), role=role, class_map=class_map or {}, created_by=user,
                                           layout=plugin.name, layout_options=options)
        else:
            if source.role != role:
                raise SourceError(f"source {name!r} exists with role {source.role!r}; pick another name or the same role")
            if Path(source.root) != root:
                raise SourceError(f"source {name!r} is registered at {source.root}, not {root}; pick another name")
            if (source.layout or DEFAULT_LAYOUT) != plugin.name:
                raise SourceError(f"source {name!r} is registered with --layout {source.layout}, not {plugin.name}; pick another name")
            if bool((source.layout_options or {}).get("list")) != bool(options.get("list")):
                raise SourceError(f"source {name!r} was registered {'with' if source.layout_options.get('list') else 'without'} "
                                  "a --list; give the same, or pick another name")
            updates = ["layout_options"]
            source.layout_options = options
            if class_map is not None:
                source.class_map = class_map
                updates.append("class_map")
            source.save(update_fields=updates)
        folders = scan_class_folders(root) if plugin.name == DEFAULT_LAYOUT and not options.get("list") else []
        classes = source_sync_classes(source=source, folders=folders, wn=wn) if folders else list(source.classes.all())
        audit_record(
            actor=user, action="source_registered" if created else "source_rescanned", target=source,
            data={"root": str(root), "role": role, "layout": plugin.name, "classes": len(classes),
                  **({"list": options["list"]} if options.get("list") else {}),
                  "unmapped": [c.folder for c in classes if c.mapping == CandidateClass.Mapping.UNMAPPED]},
        )
    return SourceRegistration(source=source, created=created, classes=classes)


def source_sync_classes(*, source: Source, folders: list[str], wn: Any = None) -> list[CandidateClass]:
    """Create or update one CandidateClass per class folder (idempotent)."""
    wn = wn or load_wordnet(settings.NLTK_DATA)
    mappings: list[ClassMapping] = map_class_folders(folders, wn, source.class_map)
    existing = {c.folder: c for c in CandidateClass.objects.filter(source=source)}
    out = []
    for m in mappings:
        values = {
            "wnid": m.wnid, "synset_name": m.name, "lemmas": list(m.lemmas), "gloss": m.gloss,
            "mapping": m.method, "mapping_note": m.note,
        }
        obj = existing.get(m.folder)
        if obj is None:
            obj = CandidateClass.objects.create(source=source, folder=m.folder, **values)
        elif any(getattr(obj, k) != v for k, v in values.items()):
            for k, v in values.items():
                setattr(obj, k, v)
            obj.save()
        out.append(obj)
    return out


def id_source_named(spec: str, *, flag: str) -> Source:
    """The ID reference source ``spec`` names (``NAME`` or ``source:NAME``), else SourceError
    naming ``flag`` and the ID sources there are."""
    source = Source.objects.filter(name=spec.removeprefix("source:")).first()
    if source is None or source.role != Source.Role.ID:
        known = ", ".join(Source.objects.filter(role=Source.Role.ID).order_by("name").values_list("name", flat=True)) or "none"
        raise SourceError(f"{flag} {spec}: not an ID reference source (ID sources: {known})")
    return source

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from curation.audit import audit_record
from curation.models import IdClassSet, Image, Source
from curation.services.sources import SourceError, id_source_named
from pipelines.classes.imagenet import NAMED_LISTS, ClassListError, imagenet_lemmas, read_wnid_file, resolve_class_list
from pipelines.classes.semantic_split import SemanticSplit, SplitError, semantic_split
from pipelines.classes.wordnet import load_wordnet, synset_for_wnid
from pipelines.classes.wordnet_graph import load_noun_graph
from pipelines.export.split_files import write_split
from pipelines.names import InvalidName, atomic_write, check_name


class IdClassSetError(ValueError):
    pass


@transaction.atomic
def id_class_set_register(*, spec: str = "imagenet-1k", name: str | None = None, make_default: bool = True, user: User | None = None) -> IdClassSet:
    """Register (or refresh) an ID class set from a named list or a wnid file.

    Every wnid must be a WordNet 3.0 noun; the error names the first ones that are not.
    """
    wnids = list(resolve_class_list(spec))
    wn = load_wordnet(settings.NLTK_DATA)
    unknown = [w for w in wnids if synset_for_wnid(wn, w) is None]
    if unknown:
        raise IdClassSetError(
            f"{spec}: {len(unknown)} wnid(s) are not WordNet 3.0 nouns: {', '.join(unknown[:10])}"
            + (" ..." if len(unknown) > 10 else "")
        )
    if name is None:
        name = spec if spec in NAMED_LISTS else "custom"
    if make_default:
        IdClassSet.objects.filter(is_default=True).exclude(name=name).update(is_default=False)
    defaults = {"spec": spec, "wnids": wnids}
    if make_default:
        defaults["is_default"] = True  # otherwise an existing set keeps its flag
    obj, created = IdClassSet.objects.update_or_create(name=name, defaults=defaults)
    if created or make_default:
        audit_record(actor=user, action="id_class_set_registered", target=obj, data={"spec": spec, "classes": len(wnids), "default": obj.is_default})
    return obj


def id_classes_resolve(id_spec: str | None) -> tuple[str, list[str]]:
    """(name, wnids) of the ID classes a spec names: ``default`` / None (the default set, else
    ImageNet-1K), a registered set's name, a named list or a wnid file."""
    if not id_spec or id_spec == "default":
        default = IdClassSet.objects.filter(is_default=True).first()
        if default is not None:
            return default.name, list(default.wnids)
        id_spec = "imagenet-1k"
    registered = IdClassSet.objects.filter(name=id_spec).first()
    if registered is not None and id_spec not in NAMED_LISTS:
        return registered.name, list(registered.wnids)
    try:
        return id_spec, list(resolve_class_list(id_spec) if id_spec in NAMED_LISTS else read_wnid_file(id_spec))
    except ClassListError as exc:
        raise IdClassSetError(f"ID classes: {exc}") from None


SPLIT_SIDES = ("id", "ood")


def semantic_split_create(*, id_spec: str | None = "imagenet-1k", out_dir: Path | None = None, seed: int | None = None,
                          register: str | None = None, images: str | None = None,
                          user: User | None = None) -> tuple[SemanticSplit, list[Path], list[IdClassSet]]:
    """Split an ID class set into ID and OOD halves by WordNet parent (ImageNet-X's procedure,
    or its seeded variant; pipelines.classes.semantic_split), write the lists to ``out_dir`` and, with
    ``register``, store the halves as ID class sets ``<register>-id`` and ``<register>-ood``.
    ``images`` (an ID source's name) also writes the image lists of both halves."""
    if register is not None:
        try:
            check_name(register, what="split name", max_length=90)
        except InvalidName as exc:
            raise IdClassSetError(str(exc)) from None
    source = _id_source(images) if images is not None else None  # checked before anything is written
    name, wnids = id_classes_resolve(id_spec)
    graph = load_noun_graph(settings.NLTK_DATA)
    try:
        split = semantic_split(graph, wnids, seed=seed)
    except SplitError as exc:
        raise IdClassSetError(f"ID classes {name}: {exc}") from None
    files = write_split(split, out_dir, names=imagenet_lemmas()) if out_dir is not None else []
    if source is not None and out_dir is not None:
        files += semantic_split_image_lists(split, source=source, out_dir=out_dir)
    sets = []
    if register is not None:
        how = f"seed {seed}" if seed is not None else "ImageNet-X procedure"
        with transaction.atomic():
            for side, side_wnids in zip(SPLIT_SIDES, (split.id_wnids, split.ood_wnids)):
                obj, _ = IdClassSet.objects.update_or_create(
                    name=f"{register}-{side}",
                    defaults={"spec": f"semantic split of {name} ({how}): {side.upper()} half", "wnids": side_wnids,
                              "created_by": user if getattr(user, "pk", None) else None})
                sets.append(obj)
            audit_record(actor=user, action="semantic_split_created", target=sets[0],
                         data={"of": name, "seed": seed, "sets": [s.name for s in sets], **{k: v for k, v in split.summary().items()
                                                                                           if k != "largest_groups"}})
    return split, files, sets


def _id_source(spec: str) -> Source:
    try:
        return id_source_named(spec, flag="--images")
    except SourceError as exc:
        raise IdClassSetError(str(exc)) from None


def semantic_split_image_lists(split: SemanticSplit, *, source: Source, out_dir: Path) -> list[Path]:
    """The images of an ID source (e.g. ImageNet-1K val) on each side of a split, in OpenOOD's
    ``<path> <label>`` format, paths relative to the source's root: ``images_id.txt`` labels each
    image with its class's position in ``id_classes.txt`` (0..n-1), ``images_ood.txt`` with -1."""
    label = {w: i for i, w in enumerate(split.id_wnids)}
    ood = set(split.ood_wnids)
    rows = (Image.objects.filter(source=source, status=Image.Status.OK, candidate_class__wnid__in=[*label, *ood])
            .order_by("candidate_class__wnid", "relative_path").values_list("relative_path", "candidate_class__wnid"))
    id_lines, ood_lines, skipped = [], [], []
    for rel, wnid in rows:
        if any(c.isspace() for c in rel):
            skipped.append(rel)  # OpenOOD's list format cannot hold a path with whitespace: listed apart
            continue
        (id_lines.append(f"{rel} {label[wnid]}") if wnid in label else ood_lines.append(f"{rel} -1"))
    out = []
    lists = [("images_id.txt", id_lines), ("images_ood.txt", ood_lines)] + ([("images_skipped.txt", skipped)] if skipped else [])
    for name, lines in lists:
        path = Path(out_dir) / name
        atomic_write(path, lambda fh, lines=lines: fh.write("".join(line + "\n" for line in lines).encode("utf-8")), root=out_dir)
        out.append(path)
    return out

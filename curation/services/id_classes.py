from __future__ import annotations

from django.conf import settings
from django.db import transaction

from curation.models import IdClassSet
from curation.services.audit import audit_record
from pathlib import Path

from pipelines.imagenet import NAMED_LISTS, ClassListError, imagenet_lemmas, read_wnid_file, resolve_class_list
from pipelines.names import InvalidName, check_name
from pipelines.semantic_split import SemanticSplit, SplitError, semantic_split, write_split
from pipelines.wordnet import load_wordnet, synset_for_wnid
from pipelines.wordnet_graph import load_noun_graph


class IdClassSetError(ValueError):
    pass


@transaction.atomic
def id_class_set_register(*, spec: str = "imagenet-1k", name: str | None = None, make_default: bool = True, user=None) -> IdClassSet:
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
                          register: str | None = None, user=None) -> tuple[SemanticSplit, list[Path], list[IdClassSet]]:
    """Split an ID class set into ID and OOD halves by WordNet parent (ImageNet-X's procedure,
    or its seeded variant; pipelines.semantic_split), write the lists to ``out_dir`` and, with
    ``register``, store the halves as ID class sets ``<register>-id`` and ``<register>-ood``."""
    if register is not None:
        try:
            check_name(register, what="split name", max_length=90)
        except InvalidName as exc:
            raise IdClassSetError(str(exc)) from None
    name, wnids = id_classes_resolve(id_spec)
    graph = load_noun_graph(settings.NLTK_DATA)
    try:
        split = semantic_split(graph, wnids, seed=seed)
    except SplitError as exc:
        raise IdClassSetError(f"ID classes {name}: {exc}") from None
    files = write_split(split, out_dir, names=imagenet_lemmas()) if out_dir is not None else []
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

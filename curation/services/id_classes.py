from __future__ import annotations

from django.conf import settings
from django.db import transaction

from curation.models import IdClassSet
from curation.services.audit import audit_record
from pipelines.imagenet import NAMED_LISTS, resolve_class_list
from pipelines.wordnet import load_wordnet, synset_for_wnid


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

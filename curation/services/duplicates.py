"""A curator's corrections of the duplicate search ("not a duplicate", "keep this one instead"),
kept across re-runs of the search, and what the duplicate-group page shows (docs/browse.md).

The search writes what it found (``ImageEmbedding.search_group`` / ``search_drop``); the
overrides are applied on top (pipelines.features.near_dups.apply_overrides) into ``dup_group`` /
``drop_reason``, which the review queue and every export read."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from curation.audit import audit_record
from curation.models import DuplicateOverride, Image, ImageEmbedding, ReviewItem, Source
from curation.selectors.duplicates import duplicate_group_decided
from curation.services.image_pipeline import duplicate_overrides_of, effective_memberships, load_features
from curation.services.review import review_queue_refresh_if_built
from pipelines.features.near_dups import CONFIRM, KEEP, NOT_DUPLICATE, normalise, pixel_difference, pixel_signature
from pipelines.sources.walk import UnsafePath

MAX_GROUP_SHOWN = 48  # members shown side by side (the rest are counted)


class DuplicateError(ValueError):
    """A correction the duplicate search's result does not allow; the message says why."""


def _embedding(image_id: int, model_name: str) -> ImageEmbedding:
    e = (ImageEmbedding.objects.select_related("image__source").filter(image_id=image_id, model_name=model_name).first())
    if e is None or e.search_group is None:
        raise DuplicateError(f"image {image_id} has no duplicate-search result for {model_name}: run the image pipeline "
                             f"(`python manage.py run_image_pipeline`, or the Sources admin's action) first")
    if e.image.source.role != Source.Role.CANDIDATE:
        raise DuplicateError(f"image {image_id} is an ID reference image; only candidates are grouped")
    return e


def _reapply(raw_group: int, model_name: str) -> list[ImageEmbedding]:
    members = list(ImageEmbedding.objects.select_for_update().filter(model_name=model_name, search_group=raw_group).order_by("image_id"))
    effective_memberships(members, duplicate_overrides_of([e.image_id for e in members], model_name))
    ImageEmbedding.objects.bulk_update(members, ["dup_group", "drop_reason"], batch_size=1000)
    return members


def duplicate_override_set(*, image_id: int, action: str, note: str = "", model_name: str | None = None,
                           user: User | None = None) -> DuplicateOverride:
    """Record a correction for one image, apply it to its group now, and re-apply the review
    queue rules to the source (an image that stays enters the queue; one that is now a
    duplicate leaves it, and no export carries it). Audited; saying it again changes no result."""
    model_name = model_name or settings.DEFAULT_MODEL
    if action not in (NOT_DUPLICATE, KEEP, CONFIRM):
        raise DuplicateError(f"action must be {NOT_DUPLICATE}, {KEEP} or {CONFIRM}, not {action!r}")
    with transaction.atomic():
        e = _embedding(image_id, model_name)
        group_size = ImageEmbedding.objects.filter(model_name=model_name, search_group=e.search_group).count()
        if action == CONFIRM:
            # "the search is right": said of the image the group keeps, on a group nobody corrected
            if group_size < 2:
                raise DuplicateError(f"image {image_id} is in no duplicate group: there is nothing to confirm")
            if e.dup_group != image_id:
                raise DuplicateError(f"image {image_id} is not the one its group keeps (image {e.dup_group} is): confirm the group there")
            if duplicate_group_decided(raw_group=e.search_group, model_name=model_name):
                raise DuplicateError(f"the group of image {image_id} is already decided by a correction; undo it (U) first to confirm the search's own result")
        elif action == KEEP:
            if e.drop_reason.startswith("duplicate_of_id:"):
                raise DuplicateError(f"image {image_id} is a copy of an ID image; say 'not a duplicate' if it is not")
            if e.dup_group == image_id:
                raise DuplicateError(f"image {image_id} is already the one its group keeps")
        elif not e.drop_reason and group_size < 2:
            raise DuplicateError(f"image {image_id} is in no duplicate group and is not dropped: there is nothing to correct")
        elif not e.drop_reason and e.dup_group == image_id == e.search_group:
            raise DuplicateError(f"image {image_id} is the one its group keeps; say 'not a duplicate' on a member to take it out")
        obj, created = DuplicateOverride.objects.update_or_create(
            image_id=image_id, model_name=model_name,
            defaults={"action": action, "note": note[:2000], "created_by": user if getattr(user, "pk", None) else None})
        if not created:  # a changed mind counts from now: a later override wins
            DuplicateOverride.objects.filter(pk=obj.pk).update(created_at=timezone.now())
        before = (e.dup_group, e.drop_reason)
        members = _reapply(e.search_group, model_name)
        after = next(((m.dup_group, m.drop_reason) for m in members if m.image_id == image_id), before)
        audit_record(actor=user, action="duplicate_override_set", target=e.image,
                     data={"action": action, "note": note, "model": model_name, "before": list(before), "after": list(after),
                           "search_group": e.search_group})
    review_queue_refresh_if_built(source=e.image.source, user=user)
    return obj


def duplicate_override_clear(*, image_id: int, model_name: str | None = None, user: User | None = None) -> int:
    """Take a correction back: the search's own result holds again for the image's group."""
    model_name = model_name or settings.DEFAULT_MODEL
    with transaction.atomic():
        e = _embedding(image_id, model_name)
        n, _ = DuplicateOverride.objects.filter(image_id=image_id, model_name=model_name).delete()
        if n:
            _reapply(e.search_group, model_name)
            audit_record(actor=user, action="duplicate_override_cleared", target=e.image, data={"model": model_name})
    if n:
        review_queue_refresh_if_built(source=e.image.source, user=user)
    return n


# -- the group page -------------------------------------------------------------------------------

@dataclass
class GroupMember:
    image: Image
    embedding: ImageEmbedding
    kept: bool  # what the group keeps
    state: str  # kept | near_duplicate | copy_of_id | not_duplicate (an override took it out)
    override: DuplicateOverride | None
    similarity: float | None  # cosine similarity of features to the kept image
    pixel_difference: float | None  # the pixel check's distance to the kept image (0 = same pixels)
    review: ReviewItem | None


@dataclass
class DuplicateGroup:
    raw_group: int
    model_name: str
    kept: int  # image id kept
    members: list[GroupMember] = field(default_factory=list)
    total: int = 0
    id_images: dict[int, Image] = field(default_factory=dict)  # ID images members copy


def _path(image: Image):
    """The image's bytes through its source's layout (None when its file left the root)."""
    try:
        return image.ref()
    except UnsafePath:
        return None


def duplicate_group(*, image_id: int, model_name: str | None = None) -> DuplicateGroup:
    """The group the search put ``image_id`` in, every member with its state, its similarity
    and pixel difference to the image the group keeps, and its review."""
    model_name = model_name or settings.DEFAULT_MODEL
    e = _embedding(image_id, model_name)
    qs = (ImageEmbedding.objects.filter(model_name=model_name, search_group=e.search_group)
          .select_related("image__source", "image__candidate_class", "shard").order_by("image_id"))
    embs = list(qs[:MAX_GROUP_SHOWN])
    total = qs.count()
    overrides = {o.image_id: o for o in DuplicateOverride.objects.filter(image_id__in=[x.image_id for x in embs], model_name=model_name)
                 .select_related("created_by")}
    # the image most members point to (after overrides); the search's choice when all split up
    counts = Counter(x.dup_group for x in embs if x.dup_group is not None)
    kept = counts.most_common(1)[0][0] if counts and counts.most_common(1)[0][1] > 1 else e.search_group
    if kept not in {x.image_id for x in embs}:
        kept = embs[0].image_id
    kept_emb = next(x for x in embs if x.image_id == kept)
    with_features = [x for x in embs if x.shard_id is not None and x.row >= 0]
    sims: dict[int, float] = {}
    if kept_emb in with_features:
        feats = normalise(load_features(with_features))
        ref = feats[with_features.index(kept_emb)]
        sims = {x.image_id: float(np.dot(f, ref)) for x, f in zip(with_features, feats)}
    ref_sig = pixel_signature(p) if (p := _path(kept_emb.image)) else None
    reviews = {r.image_id: r for r in ReviewItem.objects.filter(image_id__in=[x.image_id for x in embs])}
    out = DuplicateGroup(raw_group=e.search_group, model_name=model_name, kept=kept, total=total)
    id_ids = set()
    for x in embs:
        if x.drop_reason.startswith("duplicate_of_id:"):
            state = "copy_of_id"
            id_ids.add(int(x.drop_reason.split(":", 1)[1]))
        elif x.image_id == kept:
            state = "kept"
        elif x.drop_reason:
            state = "near_duplicate"
        else:
            state = "not_duplicate"
        sig = pixel_signature(p) if x.image_id != kept and (p := _path(x.image)) else None
        diff = 0.0 if x.image_id == kept else (pixel_difference(sig, ref_sig) if sig is not None and ref_sig is not None else None)
        out.members.append(GroupMember(image=x.image, embedding=x, kept=x.image_id == kept, state=state, override=overrides.get(x.image_id),
                                       similarity=sims.get(x.image_id), pixel_difference=diff, review=reviews.get(x.image_id)))
    out.id_images = {i.pk: i for i in Image.objects.filter(pk__in=id_ids).select_related("source")}
    out.members.sort(key=lambda m: (not m.kept, m.image.pk))
    return out

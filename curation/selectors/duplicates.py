"""Reading the duplicate search's groups for the list at ``/curate/duplicates/`` and the keys of
a group's page (docs/browse.md, "Duplicate groups").

A group is **decided** once a curator has recorded a correction (a ``DuplicateOverride``) on
at least one of its members; a group nobody has corrected yet **needs attention**."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from django.conf import settings
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet

from curation.models import CandidateClass, DuplicateOverride, ImageEmbedding, Source
from pipelines.features.near_dups import normalise

STATES = ("", "open", "decided")  # every group, those needing attention, those a curator decided
MAX_MEMBERS_COMPARED = 48  # members whose features the list compares with the kept image


class DuplicateListError(ValueError):
    """A list request the selector cannot answer; the message names the input and the fix."""


@dataclass
class GroupSummary:
    raw_group: int  # the image id the search kept (the group's name in URLs)
    size: int
    dropped: int  # members dropped as duplicates (after corrections)
    decided: int  # members a curator corrected
    members: list[int] = field(default_factory=list)  # a few image ids, for thumbnails
    classes: list[str] = field(default_factory=list)  # the members' class names, most members first
    max_similarity: float | None = None  # highest cosine of a member's features to the kept image

    @property
    def resolved(self) -> bool:
        return self.decided > 0


def _dropped_members(model_name: str) -> QuerySet:
    """The group of every member the search dropped for another image (not the one a group keeps,
    whose group is itself): the rows of the partial index emb_dup_members."""
    return (ImageEmbedding.objects.filter(model_name=model_name).exclude(search_drop="").exclude(search_group=F("image_id"))
            .values("search_group"))


def _grouped(model_name: str, source: Source | None) -> QuerySet:
    """One row per group of more than one member: ``search_group``, ``n``, ``dropped``, ``decided``."""
    # a group of more than one member has a member the search dropped (search_drop: every member but
    # the one it kept): only those groups' rows are read, through the partial index emb_dup_members,
    # not every prediction of the pool (issue 45)
    qs = ImageEmbedding.objects.filter(model_name=model_name, search_group__isnull=False, search_group__in=_dropped_members(model_name))
    if source is not None:
        qs = qs.filter(image__source=source)
    corrected = Exists(DuplicateOverride.objects.filter(image_id=OuterRef("image_id"), model_name=model_name))
    return (qs.annotate(corrected=corrected).values("search_group")
            .annotate(n=Count("id"), dropped=Count("id", filter=~Q(drop_reason="")), decided=Count("id", filter=Q(corrected=True)))
            .filter(n__gt=1))


def _only(rows: QuerySet, state: str) -> QuerySet:
    if state == "open":
        return rows.filter(decided=0)
    if state == "decided":
        return rows.filter(decided__gt=0)
    return rows


def duplicate_group_counts(*, model_name: str | None = None, source: Source | None = None) -> dict[str, int]:
    """How many groups there are, and how many still need attention."""
    model_name = model_name or settings.DEFAULT_MODEL
    if source is None:
        # every member of a group but the one the search kept was dropped by it and names that one
        # as its group: the groups of more than one member are the distinct groups of those members
        # (the partial index emb_dup_members alone, no row of the table read), and the decided ones
        # those holding an image a curator corrected (the few overrides)
        dropped = _dropped_members(model_name)
        total = dropped.order_by().values("search_group").distinct().count()
        decided = (ImageEmbedding.objects.filter(model_name=model_name, search_group__in=dropped,
                                                 image_id__in=DuplicateOverride.objects.filter(model_name=model_name).values("image_id"))
                   .order_by().values("search_group").distinct().count())
        return {"total": total, "open": total - decided, "decided": decided}
    rows = _grouped(model_name, source)
    total = rows.count()
    open_ = _only(rows, "open").count()
    return {"total": total, "open": open_, "decided": total - open_}


def _features(embs: list[ImageEmbedding]) -> np.ndarray | None:
    """float32 features of ``embs`` (in order) read from their shards, or None when one cannot
    be read (a shard that moved: the list then shows no similarity rather than failing)."""
    out = None
    shards: dict[int, np.ndarray] = {}
    for pos, e in enumerate(embs):
        try:
            if e.shard_id not in shards:
                shards[e.shard_id] = np.load(Path(settings.FEATURE_STORE) / e.shard.path, mmap_mode="r")
            row = np.asarray(shards[e.shard_id][e.row], dtype=np.float32)
        except (OSError, ValueError, IndexError):
            return None
        if out is None:
            out = np.zeros((len(embs), row.shape[0]), dtype=np.float32)
        out[pos] = row
    return out


def _max_similarity(embs: list[ImageEmbedding], kept: int) -> float | None:
    """The highest cosine similarity of a member's features to the kept image's."""
    with_features = [e for e in embs if e.shard_id is not None and e.row >= 0]
    ref = next((i for i, e in enumerate(with_features) if e.image_id == kept), None)
    if ref is None or len(with_features) < 2:
        return None
    feats = _features(with_features)
    if feats is None:
        return None
    feats = normalise(feats)
    sims = feats @ feats[ref]
    return max(float(s) for i, s in enumerate(sims) if i != ref)


def duplicate_group_list(*, model_name: str | None = None, after: int | None = None, limit: int = 30,
                         source: Source | None = None, state: str = "") -> tuple[list[GroupSummary], int | None]:
    """Groups of more than one member by the id the search kept (keyset-paged: ``after`` is the
    last group of the previous page), each with its class names, size, the highest similarity
    of a member to the kept image and whether a curator decided it; ``state`` "open" lists only
    the groups needing attention, "decided" the others. Returns the rows and the next cursor."""
    model_name = model_name or settings.DEFAULT_MODEL
    if state not in STATES:
        raise DuplicateListError(f"state={state[:40]!r} is not one of open, decided (or empty for every group)")
    rows = _only(_grouped(model_name, source), state)
    if after is not None:
        rows = rows.filter(search_group__gt=after)
    groups = list(rows.order_by("search_group")[:limit + 1])
    more = len(groups) > limit
    groups = groups[:limit]
    ids = [g["search_group"] for g in groups]
    by_group: dict[int, list[ImageEmbedding]] = {}
    for e in (ImageEmbedding.objects.filter(model_name=model_name, search_group__in=ids).select_related("shard", "image")
              .order_by("search_group", "image_id")):
        if len(by_group.setdefault(e.search_group, [])) < MAX_MEMBERS_COMPARED:
            by_group[e.search_group].append(e)
    class_ids = {e.image.candidate_class_id for embs in by_group.values() for e in embs if e.image.candidate_class_id}
    labels = {c.pk: c.label for c in CandidateClass.objects.filter(pk__in=class_ids)}
    out = []
    for g in groups:
        embs = by_group.get(g["search_group"], [])
        # what the group keeps after corrections: the image most members point to, else the search's choice
        pointed = Counter(e.dup_group for e in embs if e.dup_group is not None).most_common(1)
        kept = pointed[0][0] if pointed and pointed[0][1] > 1 else g["search_group"]
        classes = Counter(labels[e.image.candidate_class_id] for e in embs if e.image.candidate_class_id in labels)
        out.append(GroupSummary(raw_group=g["search_group"], size=g["n"], dropped=g["dropped"], decided=g["decided"],
                                members=[e.image_id for e in embs[:6]], classes=[c for c, _ in classes.most_common()],
                                max_similarity=_max_similarity(embs, kept)))
    return out, (out[-1].raw_group if more and out else None)


def duplicate_group_neighbours(*, raw_group: int, model_name: str | None = None) -> tuple[int | None, int | None]:
    """The previous and next group (by the id the search kept) that still needs attention."""
    model_name = model_name or settings.DEFAULT_MODEL
    rows = _only(_grouped(model_name, None), "open")
    prev = rows.filter(search_group__lt=raw_group).order_by("-search_group").values_list("search_group", flat=True).first()
    nxt = rows.filter(search_group__gt=raw_group).order_by("search_group").values_list("search_group", flat=True).first()
    return prev, nxt


def duplicate_group_decided(*, raw_group: int, model_name: str | None = None) -> bool:
    """Whether a curator has recorded a correction on a member of the group (the list's rule)."""
    model_name = model_name or settings.DEFAULT_MODEL
    members = ImageEmbedding.objects.filter(model_name=model_name, search_group=raw_group).values("image_id")
    return DuplicateOverride.objects.filter(model_name=model_name, image_id__in=members).exists()

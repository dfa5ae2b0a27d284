"""The duplicate search as a chunked job (issue 56): planted truth found through the service path,
any cut into work units and a killed-and-resumed run give one pass's result, and a work unit's
statements do not grow with the pool."""
from __future__ import annotations

import dataclasses

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from curation import jobs
from curation.jobs import protocol
from curation.models import Image, ImageEmbedding, Job, JobChunk, Source
from curation.services.image_pipeline import dedup_run_inline, dedup_start
from tests.dup_pool import MODEL, make_pool, search_state

pytestmark = pytest.mark.django_db


class Killed(BaseException):
    pass


@pytest.fixture
def pool(tmp_path, settings, isolated_roots):
    settings.DEFAULT_MODEL = MODEL
    return make_pool(tmp_path / "images", settings.FEATURE_STORE)


def _search(settings, *, exact_below=100, nprobe=16, assign=64, join=50) -> Job:
    settings.NEAR_DUP_EXACT_BELOW, settings.NEAR_DUP_NPROBE = exact_below, nprobe
    settings.DEDUP_ASSIGN_CHUNK, settings.DEDUP_JOIN_CHUNK = assign, join
    return dedup_start(enqueue=False)


def _groups(state):
    by: dict[int, set[int]] = {}
    for image, (group, *_rest) in state.items():
        if group is not None:
            by.setdefault(group, set()).add(image)
    return {frozenset(m) for m in by.values() if len(m) > 1}


def test_the_chunked_search_finds_planted_copies_refuses_look_alikes_and_names_the_id_image(pool, settings):
    job = dedup_run_inline(job=_search(settings))
    assert job.status == Job.Status.DONE, job.message
    assert job.result["cells"] > 1 and not job.result["exact"]  # the search ran in cells, not as one exact product
    kinds = {p["phase"] for p in JobChunk.objects.filter(job=job).values_list("payload", flat=True)}
    assert kinds == {"assign", "join"} and JobChunk.objects.filter(job=job, payload__phase="join").count() > 3
    state = search_state()
    group_of = {i: s[0] for i, s in state.items()}
    for a, b in pool.near_pairs | pool.byte_copies:
        assert group_of[a] == group_of[b], (a, b)
    for a, b in pool.look_alikes:  # features as close as a copy's, another picture: the pixel check refuses
        assert group_of[a] != group_of[b] or (a, b) in pool.near_pairs, (a, b)
    for c, r in pool.id_copies.items():
        assert state[c][1] == f"duplicate_of_id:{r}" and state[c][2] == r
    planted = set().union(*({a, b} for a, b in pool.near_pairs | pool.byte_copies))
    assert set().union(*_groups(state)) == planted  # nothing else grouped
    refs = Image.objects.filter(source__role=Source.Role.ID).values_list("pk", flat=True)
    assert all(state[r] == (None, "", None, None) for r in refs)
    # every dropped member names its group's representative, the largest image and then the oldest
    for group in _groups(state):
        rep = next(iter(group))
        rep = group_of[rep]
        assert rep in group and all(state[m][1] in ("", f"near_duplicate_of:{rep}") or state[m][1].startswith("duplicate_of_id:")
                                    for m in group)
    assert not (settings.FEATURE_STORE / "dedup" / f"job_{job.pk}").exists()  # the work files are cleaned up


def test_any_cut_into_units_and_cells_probing_everything_give_the_exact_single_pass_result(pool, settings):
    one = dedup_run_inline(job=_search(settings, exact_below=10**9, assign=10**9, join=10**9))
    assert one.result["exact"] and JobChunk.objects.filter(job=one).count() == 2  # one assignment, one join
    exact = search_state()
    small = dedup_run_inline(job=_search(settings, exact_below=10**9, assign=7, join=11))
    assert small.status == Job.Status.DONE and search_state() == exact
    cells = dedup_run_inline(job=_search(settings, exact_below=10, nprobe=10**6, assign=33, join=17))
    assert cells.result["cells"] > 1 and search_state() == exact

    # and the single-process search (near_dups.find_duplicates) on the same features agrees
    from curation.services.image_pipeline import load_features
    from pipelines.features.near_dups import PixelCheck, find_duplicates

    base = (ImageEmbedding.objects.filter(model_name=MODEL).select_related("shard", "image__source").order_by("image_id"))
    cands = list(base.filter(image__source__role=Source.Role.CANDIDATE))
    refs = list(base.filter(image__source__role=Source.Role.ID))
    everyone = cands + refs
    verdicts, _g = find_duplicates(
        load_features(cands), load_features(refs), cand_sha256=[e.image.sha256 for e in cands],
        ref_sha256=[e.image.sha256 for e in refs], priority=[(-(e.image.width * e.image.height), e.image_id) for e in cands],
        threshold=settings.NEAR_DUP_THRESHOLD, id_threshold=settings.ID_DUP_THRESHOLD, exact_below=10**9,
        looks_same=PixelCheck([e.image.ref() for e in everyone], [e.image.sha256 for e in everyone], settings.NEAR_DUP_MAX_PIXEL_DIFF))
    for e, v in zip(cands, verdicts):
        rep = cands[v.representative].image_id
        group, drop, near, _sim = exact[e.image_id]
        assert group == rep
        assert drop == {"": "", "near_duplicate_of": f"near_duplicate_of:{rep}",
                        "duplicate_of_id": f"duplicate_of_id:{refs[v.nearest_id].image_id if v.nearest_id is not None else None}"}[v.drop]
        assert near == refs[v.nearest_id].image_id


def test_a_worker_killed_in_the_join_loses_and_duplicates_nothing(pool, settings, monkeypatch):
    whole = dedup_run_inline(job=_search(settings))
    expected = search_state()
    ImageEmbedding.objects.update(search_group=None, search_drop="", dup_group=None, drop_reason="", nearest_id_image=None,
                                  nearest_id_similarity=None)
    job = _search(settings)
    real = jobs.kind_of(Job.Kind.DEDUP)
    calls = []

    def dying(job_id, index, progress=None, on_total=None):
        payload = JobChunk.objects.get(job_id=job_id, index=index).payload
        if payload["phase"] == "join":
            calls.append(index)
            if len(calls) == 3:
                raise Killed()  # the process is gone in the middle of its third join unit
        return real.process(job_id, index, progress, on_total)

    monkeypatch.setitem(protocol._KINDS, Job.Kind.DEDUP, dataclasses.replace(real, process=dying))
    with pytest.raises(Killed):
        jobs.run_inline(job)
    done_before = dict(JobChunk.objects.filter(job=job, done=True).values_list("index", "attempts"))
    monkeypatch.setitem(protocol._KINDS, Job.Kind.DEDUP, real)
    jobs.resume(job, force=True)
    job.refresh_from_db()
    assert job.status == Job.Status.DONE, job.message
    assert all(JobChunk.objects.get(job=job, index=i).attempts == n for i, n in done_before.items())  # not done again
    assert JobChunk.objects.filter(job=job).count() == JobChunk.objects.filter(job=whole).count()  # no phase written twice
    assert search_state() == expected


def _statements(job: Job, phase: str) -> list[int]:
    real = jobs.kind_of(Job.Kind.DEDUP)
    counts = []
    real.plan(job.pk)
    while True:
        todo = list(JobChunk.objects.filter(job=job, done=False).order_by("index").values_list("index", "payload"))
        if not todo:
            out = real.finalize(job.pk)
            if not isinstance(out, protocol.NextPhase):
                return counts
            continue
        for index, payload in todo:
            with CaptureQueriesContext(connection) as q:
                real.process(job.pk, index, None, None)
            if payload["phase"] == phase:
                counts.append(len(q.captured_queries))


@pytest.mark.parametrize("phase", ["assign", "join"])
def test_a_work_units_statements_do_not_grow_with_the_pool(tmp_path, settings, isolated_roots, phase):
    """Each unit reads its rows' vectors from the shards and its matches' images only: a pool three
    times larger costs each unit the same statements (the unit size is fixed)."""
    settings.DEFAULT_MODEL = MODEL
    make_pool(tmp_path / "small", settings.FEATURE_STORE, per_class=20, tag="small", look_alikes=0, id_copies=0, byte_copies=0,
              chains=0)
    small = _statements(_search(settings, assign=40, join=40), phase)
    make_pool(tmp_path / "big", settings.FEATURE_STORE, per_class=60, tag="big", look_alikes=0, id_copies=0, byte_copies=0,
              chains=0, seed=1)
    big = _statements(_search(settings, assign=40, join=40), phase)
    assert len(big) > 2 * len(small) >= 2
    assert max(big) == max(small)

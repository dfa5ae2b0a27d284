"""The embedding map job above its fitting size (issue 56): the rows come as arrays, the features a
block at a time from the shards, a class-stratified sample is fitted and the rest placed; the
page says how the map was made."""
from __future__ import annotations

import numpy as np
import pytest
from django.contrib.auth.models import Group, User

from curation.models import Job, Source
from curation.services.embedding_map import embedding_map_points, embedding_map_start
from tests.dup_pool import MODEL, make_pool

pytestmark = pytest.mark.django_db


def test_a_map_larger_than_its_sample_is_fitted_on_the_sample_and_says_so(tmp_path, settings, isolated_roots, client,
                                                                          django_capture_on_commit_callbacks, role_groups):
    settings.DEFAULT_MODEL = MODEL
    make_pool(tmp_path / "images", settings.FEATURE_STORE, per_class=30)
    settings.EMBEDDING_MAP_FIT_MAX = 60
    source = Source.objects.get(name="pool-cand")
    with django_capture_on_commit_callbacks(execute=True):
        job = embedding_map_start(source=source, method="pca")
    job.refresh_from_db()
    assert job.status == Job.Status.DONE, job.message
    n = job.result["points"]
    assert job.result["fitted"] == 60 and job.result["placed"] == n - 60 > 100
    assert f"class-stratified sample of 60 of the {n} images" in job.result["how"]
    points = embedding_map_points(source=source, method="pca")
    assert points["total"] == n and len(set(points["ids"])) == n
    assert 0 <= min(points["x"]) and max(points["x"]) <= 1
    curator = User.objects.create_user("cur", password="pw")
    curator.groups.add(Group.objects.get(name="curator"))
    client.force_login(curator)
    page = client.get(f"/curate/map/?source={source.pk}&method=pca")
    assert page.status_code == 200
    assert "Made from pca fitted on a class-stratified sample of 60" in page.content.decode()
    assert np.isfinite(points["y"]).all()

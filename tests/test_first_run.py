"""A new user's first run (issue 22): messages that speak plainly, commands that fail fast,
one way to name a class, role-aware pages with the app's own 403 and 404, the class filter
report's search, and plots that stay readable with many detectors."""
from __future__ import annotations

import io
import re

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import CommandError

from curation.models import ClassDecision, Export, ReviewItem
from tests.conftest import REPO, make_image_folder
from tests.review_data import ingest
from tests.test_exports import reviewed_pool
from tests.test_security import cli, one_line_error

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("isolated_roots")]


# -- commands fail fast and speak plainly ------------------------------------------------------------


@pytest.mark.slow
def test_an_unreachable_hub_is_tried_once_without_retry_spam(tmp_path):
    make_image_folder(tmp_path / "pool", n_good=1, classes=["sky"])
    # an empty download cache, and a hub address where nothing listens (refused at once)
    env = {"HF_HOME": str(tmp_path / "hf"), "TORCH_HOME": str(tmp_path / "torch"), "HF_ENDPOINT": "http://127.0.0.1:9",
           "OODC_HUB_TIMEOUT_S": "3"}
    proc = cli("predict", str(tmp_path / "pool"), "--model", "resnet50", "--out", str(tmp_path / "p.csv"), data_dir=tmp_path / "d",
               env_extra=env)
    last = one_line_error(proc, "resnet50", "not in the local cache", "http://127.0.0.1:9", "unreachable", "tried once", "--weights FILE")
    assert "retry" not in proc.stderr.lower() and "retrying" not in proc.stdout.lower(), proc.stderr[-2000:]
    assert len([x for x in proc.stderr.splitlines() if x.strip()]) <= 2, proc.stderr  # the error, not a page of hub chatter
    assert last.startswith("CommandError:")


def test_documented_defaults_are_the_codes(monkeypatch):
    """The README's table of settings gives the defaults the code uses."""
    table = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([A-Z_]+)`[^|]*\| ([^|]+) \|", (REPO / "README.md").read_text(), re.M)}
    for env, setting in (("OODC_MAX_IMAGE_PIXELS", "MAX_IMAGE_PIXELS"), ("OODC_INGEST_CHUNK_SIZE", "INGEST_CHUNK_SIZE"),
                         ("OODC_REVIEW_LEASE_SECONDS", "REVIEW_LEASE_SECONDS"), ("OODC_REVIEW_PREFETCH", "REVIEW_PREFETCH"),
                         ("OODC_EVAL_CHUNK_SIZE", "EVAL_CHUNK_SIZE"), ("OODC_NEAR_DUP_MAX_PIXEL_DIFF", "NEAR_DUP_MAX_PIXEL_DIFF")):
        assert float(table[env].replace(",", "")) == float(getattr(settings, setting)), env
    from pipelines.features.classifiers import hub_timeout

    monkeypatch.delenv("OODC_HUB_TIMEOUT_S", raising=False)
    assert float(table["OODC_HUB_TIMEOUT_S"]) == hub_timeout()


def test_the_bomb_refusal_names_the_documented_limit():
    from fixtures.images import decompression_bomb_png
    from pipelines.sources.images import inspect_image_bytes

    documented = re.search(r"\| `OODC_MAX_IMAGE_PIXELS` \| ([\d,]+) \|", (REPO / "README.md").read_text()).group(1)
    assert int(documented.replace(",", "")) == settings.MAX_IMAGE_PIXELS  # the README's default is the code's
    huge = inspect_image_bytes(decompression_bomb_png(30000, 30000), name="bomb.png", max_pixels=settings.MAX_IMAGE_PIXELS)
    assert huge.error_code == "decompression_bomb"
    assert f"more than the limit of {documented}" in huge.error and "900,000,000 pixels" in huge.error
    assert "178956970" not in huge.error  # Pillow's own (twice the limit) is not what we enforce
    # just over the limit (below Pillow's error threshold): the same words
    over = inspect_image_bytes(decompression_bomb_png(10000, 9000), name="b.png", max_pixels=settings.MAX_IMAGE_PIXELS)
    assert f"90,000,000 pixels is more than the limit of {documented}" in over.error
    # a raised limit is ours to raise: Pillow's guard does not refuse below it
    raised = inspect_image_bytes(decompression_bomb_png(10000, 9000), name="b.png", max_pixels=200_000_000)
    assert raised.error_code != "decompression_bomb", raised.error


def test_an_ambiguous_folder_is_called_ambiguous_by_the_class_filter_too(tmp_path):
    make_image_folder(tmp_path / "pool", n_good=4, classes=["crane", "sky"])
    source = ingest("pool", tmp_path / "pool")
    crane = source.classes.get(folder="crane")
    assert crane.wnid == "" and "ambiguous lemma" in crane.mapping_note
    call_command("filter_classes", candidates="source:pool", out=str(tmp_path / "d.csv"), stdout=io.StringIO())
    d = ClassDecision.objects.get(key="crane")
    assert d.rule == "not_in_wordnet" and "maps to no WordNet synset" not in d.detail
    assert re.search(r"folder 'crane' is not mapped to a WordNet synset \(ambiguous lemma, \d+ noun senses", d.detail), d.detail
    assert "add_source --class-map" in d.detail


def test_unit_tests_name_their_source_and_an_unversioned_set_verifies_plainly(tmp_path):
    make_image_folder(tmp_path / "ids", n_good=4, classes=["n04485082"], size=(80, 60))
    ingest("my-ids", tmp_path / "ids", role="id")
    out = io.StringIO()
    call_command("make_unit_tests", out=str(tmp_path / "ut"), per_test=1, tests="black,white", stdout=out, stderr=io.StringIO())
    assert "mirroring the sizes and formats of 4 ID image(s) of source my-ids" in out.getvalue()
    said = io.StringIO()
    call_command("verify_export", str(tmp_path / "ut"), stdout=said, stderr=io.StringIO())
    assert "vNone" not in said.getvalue() and "(ut, not a versioned export, unit-tests)" in said.getvalue()


def test_a_failed_export_gives_its_version_back(tmp_path, client):
    source, _decided = reviewed_pool(tmp_path, n=15)
    finals = dict(ReviewItem.objects.filter(source=source).values_list("pk", "final_decision"))
    ReviewItem.objects.filter(source=source).update(final_decision="id")  # nothing left to export
    with pytest.raises(CommandError) as failed:
        call_command("export", name="clean", sources=[source.name], stdout=io.StringIO(), stderr=io.StringIO())
    assert "export clean failed, nothing was written and its version number is free again" in str(failed.value)
    attempt = Export.objects.get(name="clean")
    assert attempt.status == Export.Status.FAILED and attempt.label == f"clean (failed attempt #{attempt.pk})"
    for pk, decision in finals.items():
        ReviewItem.objects.filter(pk=pk).update(final_decision=decision)
    call_command("export", name="clean", sources=[source.name], stdout=io.StringIO(), stderr=io.StringIO())
    done = Export.objects.get(name="clean", status=Export.Status.DONE)
    assert done.version == 1 and done.label == "clean-v1"  # not v2: the failed attempt held no version
    cur = User.objects.create_user("cur", password="pw")
    cur.groups.add(Group.objects.get(name="curator"))
    client.force_login(cur)
    page = client.get("/exports/").content.decode()
    assert f"clean (failed attempt #{attempt.pk})" in page and 'data-export="clean-v1"' in page


# -- one way to name a class -----------------------------------------------------------------------


def test_one_way_to_name_a_class():
    from pipelines.names import class_label

    assert class_label("n11517776", "sunset") == "sunset (n11517776)"
    assert class_label("n11517776", "sunset.n.02") == "sunset (n11517776)"
    assert class_label("n09270735", "dune, sand dune") == "dune (n09270735)"
    assert class_label("n03978300", "polka_dot") == "polka dot (n03978300)"
    assert class_label("n09270735", "") == "n09270735"
    assert class_label("", "", "misc_uploads") == "misc_uploads"


def test_review_pages_name_classes_by_lemma_and_wnid_or_folder(tmp_path, client):
    make_image_folder(tmp_path / "pool", n_good=6, classes=["evening_glow", "n09270735", "misc_uploads"])
    (tmp_path / "map.csv").write_text("folder,wnid\nevening_glow,n11517776\n")
    call_command("add_source", "pool", str(tmp_path / "pool"), class_map=str(tmp_path / "map.csv"), stdout=io.StringIO(),
                 stderr=io.StringIO())
    from curation.models import CandidateClass

    labels = {c.folder: c.label for c in CandidateClass.objects.filter(source__name="pool")}
    assert labels == {"evening_glow": "sunset (n11517776)", "n09270735": "dune (n09270735)", "misc_uploads": "misc_uploads"}


# -- navigation by role, the app's own 403 and 404 -----------------------------------------------


def _login(client, role, staff=False):
    u = User.objects.create_user(f"u-{role}", password="pw", is_staff=staff)
    if role:
        u.groups.add(Group.objects.get(name=role))
    client.force_login(u)
    return u


NAV_LINK = re.compile(r'<nav aria-label="main">(.*?)</nav>', re.S)


@pytest.mark.parametrize("role,staff", [("annotator", False), ("curator", True), ("researcher", True), ("researcher", False)])
def test_every_navigation_link_opens_for_the_role_that_sees_it(client, role, staff):
    _login(client, role, staff)
    home = client.get("/")
    assert home.status_code == 200
    links = re.findall(r'href="([^"]+)"', NAV_LINK.search(home.content.decode()).group(1))
    assert links, "no navigation"
    for href in links:
        r = client.get(href)
        assert r.status_code in (200, 302), (role, href, r.status_code)
        if r.status_code == 302:  # the admin index redirects only to log in, which a staff member never needs
            assert staff is False or "/login/" not in r["Location"], (role, href)
        assert NAV_LINK.search(client.get(href, follow=True).content.decode()) or href.startswith("/admin/"), href


def test_403_and_404_pages_are_the_apps_own_with_navigation(client):
    _login(client, "researcher")
    r = client.get("/curate/adjudicate/")
    page = r.content.decode()
    assert r.status_code == 403 and NAV_LINK.search(page) and 'href="/evaluations/"' in page
    assert "This page is not for your role" in page and "this page is for the curator role" in page
    assert "researchers browse the images, read exports, and run and read evaluations" in page
    r = client.get("/no/such/page/")
    page = r.content.decode()
    assert r.status_code == 404 and NAV_LINK.search(page) and "No page at /no/such/page/" in page
    r = client.get("/evaluations/999999/")
    assert r.status_code == 404 and "Nothing here" in r.content.decode()


def test_links_a_role_cannot_follow_are_not_shown(client, tmp_path):
    _login(client, "researcher", staff=False)
    for url, hidden in (("/curate/reviews/", ["/curate/adjudicate/", "/admin/curation/reviewsettings/", "/admin/curation/annotatorscope/"]),
                        ("/exports/", ["/admin/curation/export/add/", 'href="/admin/"']),
                        ("/evaluations/", ['href="/admin/'])):
        page = client.get(url).content.decode()
        for link in hidden:
            assert link not in page, (url, link)


# -- the class filter report: kept classes, search and filters over every row ----------------------


def test_class_filter_report_lists_kept_classes_and_searches_all_rows(client, tmp_path):
    (tmp_path / "cands.txt").write_text("n09270735\nn09436708\nn02123045\nn11517776\nn03978300\n")
    call_command("filter_classes", candidates=str(tmp_path / "cands.txt"), out=str(tmp_path / "d.csv"), stdout=io.StringIO())
    from curation.models import ClassFilterRun

    run = ClassFilterRun.objects.get()
    _login(client, "curator", staff=True)
    page = client.get(f"/class-filter/{run.pk}/").content.decode()
    assert 'id="kept"' in page and "n09270735" in page.split('id="kept"')[1]  # dune is kept and listed
    assert NAV_LINK.search(page)
    page = client.get(f"/class-filter/{run.pk}/?q=dune").content.decode()
    results = page.split('id="search-results"')[1].split("</table>")[0]
    assert "n09270735" in results and "n09436708" not in results and "1 class(es) match" in page
    page = client.get(f"/class-filter/{run.pk}/?decision=remove").content.decode()
    results = page.split('id="search-results"')[1].split("</table>")[0]
    removed = set(ClassDecision.objects.filter(run=run, decision="remove").values_list("wnid", flat=True))
    assert removed and all(w in results for w in removed) and "n09270735" not in results
    assert client.get(f"/class-filter/{run.pk}/?decision=maybe").status_code == 400
    assert client.get(f"/class-filter/{run.pk}/?rule=nope").status_code == 400
    assert client.get(f"/class-filter/{run.pk}/?q=x&page=zz").status_code == 400  # a page number by the app's one rule (issue 47)


# -- plots stay readable with many detectors -----------------------------------------------------------


def test_plots_give_each_of_many_series_its_own_style_and_keep_the_legend_off_the_data():
    import numpy as np

    from pipelines.evaluation.plots import fpr_cdf_figure, series_styles

    styles = series_styles(16)
    assert len({(s["color"], s["linestyle"], s["marker"]) for s in styles}) == 16
    assert len({(s["color"], s["linestyle"]) for s in styles}) == 16  # distinct lines even without markers
    rng = np.random.default_rng(0)
    fig = fpr_cdf_figure({f"detector {i}": list(rng.random(12)) for i in range(16)}, title="t")
    ax = fig.axes[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend, axes = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert legend.x0 >= axes.x1  # to the right of the axes, over no data
    assert len(ax.get_legend().get_texts()) == 16
    import matplotlib.pyplot as plt

    plt.close(fig)


"""Review queues for tests: real files ingested into real sources; predictions either from the
real offline model (browser tests) or written as rows (queue logic, which reads only rows)."""
from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
from django.conf import settings
from django.core.management import call_command

from curation.models import Image, ImageEmbedding, ReviewItem, Source
from curation.services.review import review_queue_sync
from fixtures.images import jpeg_bytes, pattern_image, write

KEPT_CLASSES = ("n09308572", "n11517776", "n09270735")  # iceberg, sunset, dune: kept by the class filter
# Predictions written for queue-logic tests: real ImageNet-1K classes (tabby, espresso, golden
# retriever, volcano, tripod), so the ID-class search and validation see real wnids.
FAKE_TOP5 = [["n02123045", 0.41], ["n07920052", 0.22], ["n02099601", 0.12], ["n09472597", 0.08], ["n04485082", 0.05]]


def write_candidates(root: Path, n: int, classes=KEPT_CLASSES, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    kinds = ("dots", "stripes", "checker", "blobs", "gradient")
    for i in range(n):
        palette = [tuple(int(c) for c in rng.integers(0, 255, 3)) for _ in range(3)]
        im = pattern_image(rng, kinds[i % len(kinds)], palette, (int(rng.integers(160, 320)), int(rng.integers(120, 240))))
        write(root / classes[i % len(classes)] / f"img_{i:04d}.jpg", jpeg_bytes(im))


def ingest(name: str, root: Path, role: str = "candidate") -> Source:
    call_command("add_source", name, str(root), role=role, stdout=io.StringIO(), stderr=io.StringIO())
    return Source.objects.get(name=name)


def fake_predictions(source: Source, *, similarity_step: float = 0.01) -> None:
    """One embedding row per ingested image, as the image pipeline would leave it."""
    rows = []
    for k, img in enumerate(Image.objects.filter(source=source, status=Image.Status.OK).order_by("id")):
        rows.append(ImageEmbedding(image=img, model_name=settings.DEFAULT_MODEL, topk=FAKE_TOP5, top1_wnid=FAKE_TOP5[0][0],
                                   top1_prob=FAKE_TOP5[0][1], nearest_id_similarity=round(0.2 + similarity_step * k, 4)))
    ImageEmbedding.objects.bulk_create(rows)


def queue_with_rows(tmp_path: Path, n: int = 12, name: str = "pool") -> Source:
    """A candidate source with ``n`` images and predictions written as rows, queued."""
    call_command("set_id_classes", "imagenet-1k", stdout=io.StringIO())
    write_candidates(tmp_path / name, n)
    source = ingest(name, tmp_path / name)
    fake_predictions(source)
    review_queue_sync(source=source)
    assert ReviewItem.objects.filter(source=source).count() >= n
    return source


def queue_with_real_model(tmp_path: Path, n: int = 30) -> Source:
    """Candidates and an ID reference (real photos) through the real pipeline, then queued."""
    from tests.conftest import real_photo

    call_command("set_id_classes", "imagenet-1k", stdout=io.StringIO())
    write_candidates(tmp_path / "cands", n)
    for name, wnid in [("coffee.png", "n07920052"), ("camera.png", "n04485082"), ("chelsea.png", "n02123045")]:
        (tmp_path / "ref" / wnid).mkdir(parents=True, exist_ok=True)
        shutil.copy(real_photo(name), tmp_path / "ref" / wnid / name)
    shutil.copy(real_photo("rocket.jpg"), tmp_path / "cands" / KEPT_CLASSES[0] / "rocket_over_the_ice.jpg")
    source = ingest("cands", tmp_path / "cands")
    ingest("ref", tmp_path / "ref", role="id")
    call_command("run_image_pipeline", stdout=io.StringIO(), stderr=io.StringIO())
    review_queue_sync(source=source)
    return source


def id_sets(tmp_path: Path, sizes: dict[str, tuple[int, int]]) -> None:
    """Ingest small ID reference sources: ``{name: (images per class, width)}``, two ImageNet
    classes each, distinct pictures across the sets (no duplicate from one set to another)."""
    from PIL import Image as PILImage

    from pipelines.features.classifiers import imagenet_1k_classes

    wnids = imagenet_1k_classes()[0]
    for name, (n, width) in sizes.items():
        for c in range(2):
            folder = tmp_path / name / wnids[c]
            folder.mkdir(parents=True)
            for i in range(n):
                PILImage.new("RGB", (width, 80), (120 * c + 10 * i, 120, 60)).save(folder / f"{i}.png")
        ingest(name, tmp_path / name, role="id")

"""A pool for the duplicate search with a known truth (issue 56): candidate and ID images on disk,
their rows in the database, and synthetic features in float16 shards with class structure
(a centre per class, images spread around it well below the threshold), planted near-copy
chains (cosine 0.90-0.99, the same picture), look-alikes (features above the threshold, a
different picture: the pixel check must refuse them), ID copies (a candidate showing an ID
image, features near it) and byte-identical files. No model runs: the features are what a model
would have written, so the search is tested on its own."""
from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image as PILImage

from curation.models import CandidateClass, FeatureShard, Image, ImageEmbedding, Source

MODEL = "efficientnet_lite0"


@dataclass
class Truth:
    near_pairs: set[tuple[int, int]] = field(default_factory=set)  # candidate image ids, planted copies (a < b)
    look_alikes: set[tuple[int, int]] = field(default_factory=set)  # feature match, different picture
    id_copies: dict[int, int] = field(default_factory=dict)  # candidate image id -> the ID image it copies
    byte_copies: set[tuple[int, int]] = field(default_factory=set)  # identical files among candidates


def picture(seed: int, size: tuple[int, int] = (40, 32)) -> np.ndarray:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(4, 5, 3)).astype(np.float32)
    big = np.kron(small, np.ones((size[1] // 4, size[0] // 5, 1), dtype=np.float32))
    return np.clip(big + rng.normal(0, 6, big.shape), 0, 255).astype(np.uint8)


def png(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    PILImage.fromarray(a).save(buf, format="PNG")
    return buf.getvalue()


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _near(rng: np.random.Generator, v: np.ndarray, cos: float) -> np.ndarray:
    """A unit vector at cosine ``cos`` from unit vector ``v``."""
    r = rng.normal(size=v.shape)
    r -= (r @ v) * v
    r = _unit(r)
    return cos * v + np.sqrt(1 - cos * cos) * r


def make_pool(root: Path, feature_store: Path, *, n_classes: int = 6, per_class: int = 40, n_refs: int = 60, dim: int = 48,
              chains: int = 8, look_alikes: int = 6, id_copies: int = 6, byte_copies: int = 3, seed: int = 0,
              shards: int = 3, tag: str = "pool") -> Truth:
    rng = np.random.default_rng(seed)
    cand = Source.objects.create(name=f"{tag}-cand", role=Source.Role.CANDIDATE, root=str(root / "cand"))
    ref = Source.objects.create(name=f"{tag}-ref", role=Source.Role.ID, root=str(root / "ref"))
    centres = _unit(rng.normal(size=(n_classes + 1, dim)))
    pictures: list[np.ndarray] = []
    vectors: list[np.ndarray] = []
    rows: list[tuple[Source, CandidateClass | None, str, np.ndarray]] = []  # (source, class, rel, picture)

    def spread(c: int) -> np.ndarray:  # an image of class c: cosine about 0.45 to its centre, about 0.2 to others of it
        return _near(rng, centres[c], 0.45)

    classes = [CandidateClass.objects.create(source=cand, folder=f"c{c}", wnid="", mapping=CandidateClass.Mapping.UNMAPPED)
               for c in range(n_classes)]
    truth_rows: dict[str, list] = {"chain": [], "look": [], "idcopy": [], "bytes": []}
    k = 0
    for c in range(n_classes):
        for i in range(per_class):
            pic = picture(seed * 100_000 + k)
            rows.append((cand, classes[c], f"c{c}/img_{i:04d}.png", pic))
            vectors.append(spread(c))
            pictures.append(pic)
            k += 1
    n_base = len(rows)
    # chains of near-copies: b copies a (cos 0.93-0.99), c copies b
    for ch in range(chains):
        a = int(rng.integers(0, n_base))
        prev = a
        for step in range(2):
            cos = float(rng.uniform(0.90, 0.99))
            pic = np.clip(pictures[prev].astype(np.int16) + rng.integers(-2, 3, pictures[prev].shape), 0, 255).astype(np.uint8)
            rows.append((cand, rows[prev][1], f"chain/ch{ch}_{step}.png", pic))
            vectors.append(_near(rng, vectors[prev], cos))
            pictures.append(pic)
            truth_rows["chain"].append((prev, len(rows) - 1))
            prev = len(rows) - 1
    # look-alikes: features as close as copies, another picture
    for _ in range(look_alikes):
        a = int(rng.integers(0, n_base))
        pic = picture(seed * 100_000 + 50_000 + len(rows))
        rows.append((cand, rows[a][1], f"look/l{len(rows)}.png", pic))
        vectors.append(_near(rng, vectors[a], 0.95))
        pictures.append(pic)
        truth_rows["look"].append((a, len(rows) - 1))
    # ID images (their own class structure: centre n_classes), and candidates that copy some
    ref_start = len(rows)
    for r in range(n_refs):
        pic = picture(seed * 100_000 + 70_000 + r)
        rows.append((ref, None, f"ref/r{r:04d}.png", pic))
        vectors.append(spread(n_classes))
        pictures.append(pic)
    for j, r in enumerate((ref_start + rng.choice(n_refs, size=id_copies, replace=False)).tolist()):  # distinct ID images
        pic = np.clip(pictures[r].astype(np.int16) + rng.integers(-2, 3, pictures[r].shape), 0, 255).astype(np.uint8)
        rows.append((cand, classes[j % n_classes], f"idcopy/i{j}.png", pic))
        vectors.append(_near(rng, vectors[r], float(rng.uniform(0.9, 0.98))))
        pictures.append(pic)
        truth_rows["idcopy"].append((len(rows) - 1, r))
    # byte-identical candidates (the same file twice; features equal up to float16)
    for _ in range(byte_copies):
        a = int(rng.integers(0, n_base))
        rows.append((cand, rows[a][1], f"bytes/b{len(rows)}.png", pictures[a]))
        vectors.append(vectors[a].copy())
        pictures.append(pictures[a])
        truth_rows["bytes"].append((a, len(rows) - 1))

    images = []
    for source, cls, rel, pic in rows:
        data = png(pic)
        path = Path(source.root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        images.append(Image(source=source, candidate_class=cls, relative_path=rel, sha256=hashlib.sha256(data).hexdigest(),
                            width=pic.shape[1], height=pic.shape[0], bytes=len(data), format="PNG", mode="RGB",
                            status=Image.Status.OK))
    Image.objects.bulk_create(images)
    ids = [im.pk for im in Image.objects.filter(source__in=[cand, ref]).order_by("pk")]
    x = np.stack(vectors).astype(np.float16)
    embs = []
    order = rng.permutation(len(rows))  # rows sit in the shards in another order than the images' ids
    per = -(-len(rows) // shards)
    for s in range(shards):
        part = order[s * per:(s + 1) * per]
        rel = f"{MODEL}/{tag}/shard_{s}.npy"
        path = feature_store / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, x[part])
        shard = FeatureShard.objects.create(model_name=MODEL, path=rel, rows=len(part), dim=dim)
        for r, i in enumerate(part.tolist()):
            embs.append(ImageEmbedding(image_id=ids[i], model_name=MODEL, ok=True, shard=shard, row=r, top1_wnid="n01440764",
                                       top1_prob=0.5, max_softmax=0.5, topk=[["n01440764", 0.5]]))
    ImageEmbedding.objects.bulk_create(embs)
    t = Truth()
    t.near_pairs = {tuple(sorted((ids[a], ids[b]))) for a, b in truth_rows["chain"]}
    t.look_alikes = {tuple(sorted((ids[a], ids[b]))) for a, b in truth_rows["look"]}
    t.id_copies = {ids[c]: ids[r] for c, r in truth_rows["idcopy"]}
    t.byte_copies = {tuple(sorted((ids[a], ids[b]))) for a, b in truth_rows["bytes"]}
    return t


def search_state(model: str = MODEL) -> dict[int, tuple]:
    """What the search wrote for every embedding of the model: image -> (group, drop, nearest ID, similarity)."""
    return {i: (g, d, n, None if s is None else round(s, 5)) for i, g, d, n, s in
            ImageEmbedding.objects.filter(model_name=model).values_list("image_id", "search_group", "search_drop", "nearest_id_image_id",
                                                                        "nearest_id_similarity")}

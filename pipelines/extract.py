"""Batched predictions and penultimate features for image files.

One pass per batch gives what every later stage needs: the top-k ImageNet-1K classes with their
probabilities (for the review screen), max softmax, max logit and energy (confidence scores the
detectors and the queue order use), and the penultimate ("pre-logits") features as float16
(near-duplicates, similarity to ID images, feature-based detectors). Files that fail to decode
are returned with their reason and never stop the batch.
"""
from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .images import DEFAULT_MAX_PIXELS, load_rgb_for_model
from .models import LoadedModel

log = logging.getLogger(__name__)


@dataclass
class ImageResult:
    ok: bool
    error: str = ""
    topk: list[tuple[str, float]] = field(default_factory=list)  # (wnid, probability), best first
    max_softmax: float = 0.0
    max_logit: float = 0.0
    energy: float = 0.0  # log sum exp of the logits
    row: int = -1  # row in ``Extraction.features``; -1 for a failed file


@dataclass
class Extraction:
    results: list[ImageResult]  # one per input path, in input order
    features: np.ndarray  # float16 [n_ok, feature_dim] (float32 with keep_logits)
    logits: np.ndarray | None = None  # float32 [n_ok, classes], only with keep_logits


class _Files:
    """A torch Dataset over paths (duck-typed: no torch import at module level)."""

    def __init__(self, paths: Sequence[str], transform, min_side: int, max_pixels: int):
        self.paths, self.transform, self.min_side, self.max_pixels = list(paths), transform, min_side, max_pixels

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        try:
            im = load_rgb_for_model(self.paths[i], min_side=self.min_side, max_pixels=self.max_pixels)
            return i, self.transform(im), ""
        except Exception as exc:  # a bad file is a result, not a crash
            return i, None, f"{self.paths[i]}: cannot decode it for the model ({type(exc).__name__}: {exc})"


def _collate(batch):
    import torch

    good = [(i, t) for i, t, err in batch if t is not None]
    bad = [(i, err) for i, t, err in batch if t is None]
    return [i for i, _ in good], (torch.stack([t for _, t in good]) if good else None), bad


def _threaded_batches(files: _Files, batch_size: int, threads: int, ahead: int = 3):
    """Batches as the DataLoader yields them, decoded by a thread pool a few batches ahead."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    starts = iter(range(0, len(files), batch_size))
    with ThreadPoolExecutor(max_workers=threads) as pool:
        pending: deque = deque()

        def submit() -> bool:
            start = next(starts, None)
            if start is None:
                return False
            pending.append([pool.submit(files.__getitem__, i) for i in range(start, min(start + batch_size, len(files)))])
            return True

        for _ in range(ahead):
            submit()
        while pending:
            batch = [f.result() for f in pending.popleft()]
            submit()
            yield _collate(batch)


def default_loader_workers() -> int:
    return min(4, max(0, (os.cpu_count() or 1) - 1))


def extract(
    lm: LoadedModel, paths: Sequence[str], *, batch_size: int = 32, num_workers: int | None = None, topk: int = 5,
    max_pixels: int = DEFAULT_MAX_PIXELS, progress: Callable[[int], None] | None = None, keep_logits: bool = False,
) -> Extraction:
    """Run ``lm`` over ``paths``; decoding and transforms run in DataLoader workers while the
    model computes, JPEGs decode at reduced size (``draft``), and on a GPU the forward pass
    runs in bfloat16 (float16 where bf16 is unsupported)."""
    import torch
    from torch.utils.data import DataLoader

    n = len(paths)
    results: list[ImageResult | None] = [None] * n
    if n == 0:
        return Extraction(results=[], features=np.zeros((0, lm.feature_dim), dtype=np.float16))
    workers = default_loader_workers() if num_workers is None else num_workers
    workers = min(workers, max(0, (n + batch_size - 1) // batch_size))
    files = _Files(paths, lm.transform, lm.resize_side, max_pixels)
    if workers and multiprocessing.current_process().daemon:
        # A daemonic process (a Celery prefork pool child) may not start the DataLoader's
        # worker processes; threads decode instead (Pillow and the transform release the GIL).
        log.info("extract: daemonic process, decoding with %d threads instead of DataLoader workers", workers)
        loader = _threaded_batches(files, batch_size, workers)
    else:
        loader = DataLoader(
            files, batch_size=batch_size, shuffle=False, num_workers=workers, collate_fn=_collate,
            pin_memory=lm.device.startswith("cuda"), persistent_workers=False, prefetch_factor=4 if workers else None,
        )
    cuda = lm.device.startswith("cuda")
    if cuda:
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        autocast = torch.autocast(device_type="cuda", dtype=dtype)
    else:
        autocast = contextlib.nullcontext()
    k = min(topk, len(lm.wnids))
    chunks: list[np.ndarray] = []
    logit_chunks: list[np.ndarray] = []
    feat_dtype = np.float32 if keep_logits else np.float16
    row = 0
    model = lm.model
    with torch.inference_mode():
        for idx, x, bad in loader:
            for i, err in bad:
                results[i] = ImageResult(ok=False, error=err)
            if x is not None:
                x = x.to(lm.device, non_blocking=True)
                with autocast:
                    pre = model.forward_head(model.forward_features(x), pre_logits=True)
                    logits = model.get_classifier()(pre)
                logits = logits.float()
                probs = logits.softmax(dim=1)
                top_p, top_i = probs.topk(k, dim=1)
                max_logit = logits.max(dim=1).values
                energy = torch.logsumexp(logits, dim=1)
                feats = pre.float().cpu().numpy().astype(feat_dtype)
                if keep_logits:
                    logit_chunks.append(logits.cpu().numpy())
                top_p, top_i = top_p.cpu().numpy(), top_i.cpu().numpy()
                max_logit, energy = max_logit.cpu().numpy(), energy.cpu().numpy()
                for j, i in enumerate(idx):
                    results[i] = ImageResult(
                        ok=True, topk=[(lm.wnids[c], float(p)) for c, p in zip(top_i[j], top_p[j])],
                        max_softmax=float(top_p[j, 0]), max_logit=float(max_logit[j]), energy=float(energy[j]), row=row + j,
                    )
                row += len(idx)
                chunks.append(feats)
            if progress:
                progress(len(idx) + len(bad))
    features = np.concatenate(chunks) if chunks else np.zeros((0, lm.feature_dim), dtype=feat_dtype)
    all_logits = None
    if keep_logits:
        all_logits = np.concatenate(logit_chunks) if logit_chunks else np.zeros((0, len(lm.wnids)), dtype=np.float32)
    return Extraction(results=results, features=features, logits=all_logits)  # type: ignore[arg-type]

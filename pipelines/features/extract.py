"""Batched predictions and penultimate features for image files.

One pass per batch gives what every later stage needs: the top-k ImageNet-1K classes with their
probabilities (for the review screen), max softmax, max logit and energy (confidence scores the
detectors and the queue order use), and the penultimate ("pre-logits") features as float16
(near-duplicates, similarity to ID images, feature-based detectors). Files that fail to decode
are returned with their reason and never stop the batch.
"""
from __future__ import annotations

import functools
import logging
import multiprocessing
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from pipelines.features.classifiers import LoadedModel
from pipelines.sources.images import DEFAULT_MAX_PIXELS, load_rgb_for_model
from pipelines.sources.layouts import MemberRef

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
    """Everything one pass gave, as arrays (rows of the decoded files, in input order); the
    per-file ``results`` view is built from them when asked for."""

    row_of: np.ndarray  # int64 [n_inputs]: row in ``features``, -1 for a file that failed
    errors: dict[int, str]  # input index -> reason
    features: np.ndarray  # float16 [n_ok, feature_dim] (float32 with keep_logits)
    top_index: np.ndarray  # int64 [n_ok, k]: class indices, best first
    top_prob: np.ndarray  # float32 [n_ok, k]
    max_logit: np.ndarray  # float32 [n_ok]
    energy: np.ndarray  # float32 [n_ok]: log sum exp of the logits
    wnids: tuple[str, ...] = ()
    logits: np.ndarray | None = None  # float32 [n_ok, classes], only with keep_logits
    decoder: str = "pil"
    counts: dict = field(default_factory=dict)  # files per decoder (torchvision path)
    notes: list[str] = field(default_factory=list)  # what changed on the way (OOM back-off, the CPU runtime's fallback)
    runtime: str = ""  # what ran the forward pass: "openvino 2026.4.1", "torch (channels_last)", "torch cuda bfloat16"

    @property
    def max_softmax(self) -> np.ndarray:
        return self.top_prob[:, 0] if self.top_prob.shape[1] else np.zeros(len(self.top_prob), dtype=np.float32)

    @functools.cached_property
    def results(self) -> list[ImageResult]:
        out = []
        for i, row in enumerate(self.row_of.tolist()):
            if row < 0:
                out.append(ImageResult(ok=False, error=self.errors.get(i, "not decoded")))
                continue
            probs = self.top_prob[row].tolist()
            out.append(ImageResult(ok=True, topk=[(self.wnids[c], p) for c, p in zip(self.top_index[row].tolist(), probs)],
                                   max_softmax=probs[0], max_logit=float(self.max_logit[row]), energy=float(self.energy[row]), row=row))
        return out


class _Files:
    """A torch Dataset over paths (duck-typed: no torch import at module level)."""

    def __init__(self, paths: Sequence[str], transform, min_side: int, max_pixels: int):
        self.paths, self.transform, self.min_side, self.max_pixels = list(paths), transform, min_side, max_pixels

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        try:
            src = self.paths[i]
            # a source member (pipelines.sources.layouts.MemberRef) is read through its layout, checked
            # against its ingest hash; a plain path is opened as it is
            data = src.read() if isinstance(src, MemberRef) else None
            im = load_rgb_for_model(str(src), min_side=self.min_side, max_pixels=self.max_pixels, data=data)
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
    """DataLoader processes for the Pillow path: one per core but the one the model uses."""
    return max(0, (os.cpu_count() or 1) - 1)


def default_batch_size(device: str) -> int:
    return 256 if str(device).startswith("cuda") else 32


def fast_model(lm: LoadedModel) -> tuple[Any, Any]:
    """(model, input dtype) for torch inference: on CUDA a copy with bfloat16 weights (float16
    where bf16 is unsupported) in channels_last, made once per loaded model (the float32 original
    stays for ODIN's gradients and the saved classifier head); on the CPU a float32 copy in
    channels_last (1.2-1.7x the contiguous layout there; used only where the OpenVINO graph of
    pipelines.features.cpu_runtime cannot run)."""
    import torch

    if not lm.device.startswith("cuda"):
        if "fast_model_cpu" not in lm.extra:
            import copy

            lm.extra["fast_model_cpu"] = (copy.deepcopy(lm.model).to(memory_format=torch.channels_last).eval(), torch.float32)
        return lm.extra["fast_model_cpu"]
    if "fast_model" not in lm.extra:
        import copy

        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        fast = copy.deepcopy(lm.model).to(dtype=dtype).to(memory_format=torch.channels_last).eval()
        lm.extra["fast_model"] = (fast, dtype)
    return lm.extra["fast_model"]


def _pil_batches(lm: LoadedModel, paths: Sequence[str], *, batch_size: int, num_workers: int | None, max_pixels: int):
    from torch.utils.data import DataLoader

    workers = default_loader_workers() if num_workers is None else num_workers
    workers = min(workers, max(0, (len(paths) + batch_size - 1) // batch_size))
    files = _Files(paths, lm.transform, lm.resize_side, max_pixels)
    cuda = lm.device.startswith("cuda")
    if workers and multiprocessing.current_process().daemon:
        # A daemonic process (a Celery prefork pool child) may not start the DataLoader's
        # worker processes; threads decode instead (Pillow and the transform release the GIL).
        log.info("extract: daemonic process, decoding with %d threads instead of DataLoader workers", workers)
        for idx, x, bad in _threaded_batches(files, batch_size, workers):
            yield idx, (x.pin_memory() if cuda and x is not None else x), bad
        return
    # files is a map-style dataset (len, getitem) without torch's Dataset base class
    yield from DataLoader(files, batch_size=batch_size, shuffle=False, num_workers=workers,  # type: ignore[arg-type]
                          collate_fn=_collate, pin_memory=cuda, persistent_workers=False, prefetch_factor=4 if workers else None)


def batches(lm: LoadedModel, paths: Sequence[str], *, decoder: str, batch_size: int, num_workers: int | None = None,
            max_pixels: int = DEFAULT_MAX_PIXELS, dtype: Any = None, channels_last: bool = False,
            counts: dict | None = None) -> Iterator[tuple[Any, Any, list]]:
    """(indices, inputs on lm.device, bad) batches of ``paths`` through ``decoder``."""
    import torch

    from pipelines.features.decode import Preprocess, TensorBatches, check_decoder

    check_decoder(decoder)
    if decoder == "pil":
        for idx, x, bad in _pil_batches(lm, paths, batch_size=batch_size, num_workers=num_workers, max_pixels=max_pixels):
            if x is not None:
                x = x.to(lm.device, non_blocking=True)
                if dtype is not None:
                    x = x.to(dtype)
                if channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
            yield idx, x, bad
        return
    loader = TensorBatches(paths, preprocess=Preprocess.from_data_config(lm.data_config), device=lm.device,
                           batch_size=batch_size, threads=num_workers or None, max_pixels=max_pixels,
                           min_side=lm.resize_side, dtype=dtype, channels_last=channels_last)
    yield from loader
    if counts is not None:
        counts.update(loader.counts)


def decoded(lm: LoadedModel, paths: Sequence[str], *, decoder: str = "pil", batch_size: int = 32, num_workers: int | None = 0,
            max_pixels: int = DEFAULT_MAX_PIXELS) -> list[tuple[list[int], Any, list]]:
    """The batches ``extract`` would decode from ``paths`` for ``lm``, kept in memory (float32 on
    ``lm.device``), to be passed to ``extract(prepared=...)`` of several models with the same
    preprocessing: the images are decoded once."""
    from pipelines.features.decode import check_decoder

    return list(batches(lm, paths, decoder=check_decoder(decoder), batch_size=batch_size, num_workers=num_workers,
                        max_pixels=max_pixels))


class _BackOff:
    """Runs a batch through the model in parts no larger than ``size``; on out-of-memory the
    size halves (down to 1) and the part is tried again, with a note saying so."""

    def __init__(self, size: int, notes: list[str]):
        self.size, self.notes = size, notes

    def __call__(self, fn, x):
        import torch

        outs, s = [], 0
        while s < len(x):
            part = x[s:s + self.size]
            try:
                outs.append(fn(part))
            except torch.cuda.OutOfMemoryError:
                if self.size == 1:
                    raise
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                note = f"out of GPU memory at batch {self.size}; continuing with batch {self.size // 2}"
                log.warning("extract: %s", note)
                self.notes.append(note)
                self.size //= 2
                continue
            s += len(part)
        return outs


def extract(
    lm: LoadedModel, paths: Sequence[str], *, batch_size: int | None = None, num_workers: int | None = None, topk: int = 5,
    max_pixels: int = DEFAULT_MAX_PIXELS, progress: Callable[[int], None] | None = None, keep_logits: bool = False,
    decoder: str | None = None, prepared: Sequence[tuple[list[int], Any, list]] | None = None,
) -> Extraction:
    """Run ``lm`` over ``paths``. ``decoder``: ``torchvision`` (tensor decode and resize,
    nvJPEG on a GPU; ``pipelines.features.decode``) or ``pil`` (Pillow and timm's transform in DataLoader
    workers, JPEGs decoded at reduced size); default torchvision on a GPU, pil otherwise. On a
    GPU the forward pass runs with bfloat16 weights in channels_last, batch 256 unless told
    otherwise, halving on out-of-memory. On the CPU it runs through OpenVINO
    (``pipelines.features.cpu_runtime``: the graph converted once per model and weights, cached), or in
    torch with channels_last where that cannot be had, with a note in ``notes`` saying why.
    Results leave the device once per batch. ``prepared``: batches decoded before (``decoded``),
    used instead of reading ``paths`` again (several networks over the same images)."""
    import torch

    from pipelines.features.decode import check_decoder, default_decoder

    decoder = check_decoder(decoder or default_decoder(lm.device))
    cuda = lm.device.startswith("cuda")
    batch_size = int(batch_size or default_batch_size(lm.device))
    n = len(paths)
    k = min(topk, len(lm.wnids))
    feat_dtype = np.float32 if keep_logits else np.float16
    row_of = np.full(n, -1, dtype=np.int64)
    errors: dict[int, str] = {}
    counts: dict = {}
    notes: list[str] = []
    chunks: dict[str, list[np.ndarray]] = {"feat": [], "top_i": [], "stats": [], "logits": []}
    graph = None
    if not cuda:
        from pipelines.features.cpu_runtime import choose

        choice = choose(lm)
        graph, runtime = choice.graph, choice.runtime
        if choice.note:
            notes.append(choice.note)
    model, dtype = fast_model(lm) if graph is None else (None, None)
    if cuda:
        runtime = f"torch cuda {str(dtype).removeprefix('torch.')} (channels_last)"
    backoff = _BackOff(batch_size, notes)

    def forward(x):
        if graph is not None:  # OpenVINO on the CPU: logits and features in one call
            logits, pre = graph(x.numpy())
            return torch.from_numpy(pre), torch.from_numpy(logits)
        pre = model.forward_head(model.forward_features(x), pre_logits=True)
        return pre, model.get_classifier()(pre)

    inputs: list[int] = []
    with torch.inference_mode():
        source = prepared if prepared is not None else batches(
            lm, paths, decoder=decoder, batch_size=batch_size, num_workers=num_workers, max_pixels=max_pixels,
            dtype=dtype if cuda else None, channels_last=graph is None, counts=counts)
        for idx, x, bad in source:
            for i, err in bad:
                errors[i] = err
            if x is not None:
                parts = backoff(forward, x)
                pre = torch.cat([p for p, _l in parts]) if len(parts) > 1 else parts[0][0]
                logits = (torch.cat([lg for _p, lg in parts]) if len(parts) > 1 else parts[0][1]).float()
                top_p, top_i = logits.softmax(dim=1).topk(k, dim=1)
                # everything leaves the device as one float32 block per batch: top-k probabilities,
                # max logit, energy, top-k indices (exact in float32 below 2^24), features, logits
                parts = [top_p, logits.max(dim=1, keepdim=True).values, torch.logsumexp(logits, dim=1, keepdim=True),
                         top_i.float(), pre.float()] + ([logits] if keep_logits else [])
                block = torch.cat(parts, dim=1).cpu().numpy()
                d = pre.shape[1]
                chunks["stats"].append(block[:, :k + 2])
                chunks["top_i"].append(block[:, k + 2:2 * k + 2].astype(np.int64))
                chunks["feat"].append(block[:, 2 * k + 2:2 * k + 2 + d].astype(feat_dtype))
                if keep_logits:
                    chunks["logits"].append(np.ascontiguousarray(block[:, 2 * k + 2 + d:]))
                inputs.extend(idx)
            if progress:
                progress(len(idx) + len(bad))
    # rows in input order (a batch may come grouped by image size)
    inputs_of_row = np.asarray(inputs, dtype=np.int64)
    perm = np.argsort(inputs_of_row, kind="stable")
    row_of[inputs_of_row[perm]] = np.arange(len(perm))
    in_order = bool((np.diff(inputs_of_row) > 0).all())
    for key in ("stats", "top_i", "feat", "logits"):
        if chunks[key]:
            joined = np.concatenate(chunks[key])
            chunks[key] = [joined if in_order else joined[perm]]
    stats = np.concatenate(chunks["stats"]) if chunks["stats"] else np.zeros((0, k + 2), dtype=np.float32)
    return Extraction(
        row_of=row_of, errors=errors,
        features=np.concatenate(chunks["feat"]) if chunks["feat"] else np.zeros((0, lm.feature_dim), dtype=feat_dtype),
        top_index=np.concatenate(chunks["top_i"]) if chunks["top_i"] else np.zeros((0, k), dtype=np.int64),
        top_prob=np.ascontiguousarray(stats[:, :k]), max_logit=np.ascontiguousarray(stats[:, k]), energy=np.ascontiguousarray(stats[:, k + 1]),
        wnids=tuple(lm.wnids), decoder=decoder, counts=counts, notes=notes, runtime=runtime,
        logits=(np.concatenate(chunks["logits"]) if chunks["logits"] else np.zeros((0, len(lm.wnids)), dtype=np.float32)) if keep_logits else None,
    )

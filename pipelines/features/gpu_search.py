"""Exact inner-product top-k with torch, blockwise: the GPU path of the near-duplicate search
and of the KNN detector (the CPU keeps faiss).

On a GPU the base sits on the device in float16 and each block of queries is one matrix product
and one ``topk``; the best ``k + margin`` candidates are then scored again in float32, so the
similarities returned are float32 inner products and only neighbours within float16's rounding
of the k-th can trade places. On the CPU the same code runs in float32 throughout (exact; the
tests compare it with faiss). Inputs are expected L2-normalised when cosine similarity is meant.
"""
from __future__ import annotations

import numpy as np

# memory for one block of scores (queries x base), bytes: keeps a 1M-row base at about 1,000
# queries per product on the GPU
BLOCK_BYTES = 2 << 30


def preferred_device() -> str | None:
    """'cuda' where torch sees a GPU (searches then run there), None otherwise (faiss on the CPU)."""
    try:
        import torch
    except ImportError:
        return None
    return "cuda" if torch.cuda.is_available() else None


def exact_topk(queries: np.ndarray, base: np.ndarray, k: int, *, device: str = "cpu", margin: int | None = None,
               block: int | None = None, half: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(similarities float32, indices int64), each [n_queries, k], best first, of the ``k``
    largest inner products of every query row with the ``base`` rows. ``half`` (default: on a
    GPU) selects candidates in float16 and rescores them in float32."""
    import torch

    n, nq = len(base), len(queries)
    k = max(0, min(int(k), n))
    if nq == 0 or k == 0:
        return np.zeros((nq, k), dtype=np.float32), np.zeros((nq, k), dtype=np.int64)
    half = str(device).startswith("cuda") if half is None else half
    search_dtype = torch.float16 if half else torch.float32
    xb32 = torch.from_numpy(np.ascontiguousarray(base, dtype=np.float32)).to(device)
    xb = xb32.to(search_dtype) if half else xb32
    kk = min(n, k + (margin if margin is not None else max(8, k // 2))) if half else k
    itemsize = 2 if half else 4
    block = block or max(1, min(nq, BLOCK_BYTES // max(1, n * itemsize)))
    sims = np.empty((nq, k), dtype=np.float32)
    ids = np.empty((nq, k), dtype=np.int64)
    with torch.inference_mode():
        for s in range(0, nq, block):
            q32 = torch.from_numpy(np.ascontiguousarray(queries[s:s + block], dtype=np.float32)).to(device, non_blocking=True)
            scores = (q32.to(search_dtype) @ xb.T)
            top_v, top_i = scores.topk(kk, dim=1)
            del scores
            if half:  # score the candidates again in float32 and keep the best k
                exact = _rescore(q32, xb32, top_i)
                top_v, order = exact.topk(k, dim=1)
                top_i = top_i.gather(1, order)
            sims[s:s + block] = top_v.float().cpu().numpy()
            ids[s:s + block] = top_i.cpu().numpy()
    return sims, ids


def _rescore(q32, xb32, cand, rows: int = 256):
    """float32 inner products of each query with its candidate rows, a few queries at a time
    (the gathered candidates of a whole block would not fit for large k)."""
    import torch

    out = torch.empty(cand.shape, dtype=torch.float32, device=q32.device)
    for s in range(0, len(q32), rows):
        c = xb32[cand[s:s + rows]]  # [r, kk, d]
        out[s:s + rows] = torch.bmm(c, q32[s:s + rows, :, None])[:, :, 0]
    return out

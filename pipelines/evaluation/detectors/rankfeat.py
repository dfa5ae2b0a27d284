"""RankFeat (Song, Sebe, Wang, NeurIPS 2022): remove the rank-1 part of the last feature map
before the head. Per image the map X (channels x positions) loses s1 u1 v1^T, its largest
singular value's part (exact SVD, the reference's default; not its power-iteration shortcut),
then the model's own head (timm's ``forward_head``: pooling and classifier) gives logits and the
score is T * logsumexp(logits / T) (T = 1, OpenOOD's rankfeat.yml).

It reads the network's intermediate activations, so it is input-level, as ODIN: the scores are
computed while extracting and cached under ``rankfeat_t<T>``. The layer it reads is declared
(``layers``): the output of ``forward_features``, the last block's map. OpenOOD also removes the
rank-1 part of the block before (Block 3) and averages the two logits; that needs the network
split at a named block, which timm's models do not share, so only the last block is used here
(the paper's "Block 4" variant), and the results say so."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import OPENOOD, Detector, DetectorError, Head, Outputs, Param, register_detector


def rankfeat_key(temperature: float) -> str:
    return f"rankfeat_t{temperature:g}"


def remove_rank_one(fmap: Any) -> Any:
    """The map minus its top singular component, per image: [B, C, H, W] maps (CNNs) or
    [B, N, C] token sequences (transformers, as channels x tokens)."""
    import torch

    tokens = fmap.dim() == 3
    m = fmap.transpose(1, 2) if tokens else fmap.reshape(fmap.shape[0], fmap.shape[1], -1)
    u, s, vh = torch.linalg.svd(m, full_matrices=False)
    m = m - s[:, 0:1].unsqueeze(2) * u[:, :, 0:1].bmm(vh[:, 0:1, :])
    return m.transpose(1, 2) if tokens else m.reshape(fmap.shape)


@register_detector
class RankFeat(Detector):
    name = "rankfeat"
    label = "RankFeat + Energy"
    paper = "Song, Sebe, Wang, NeurIPS 2022"
    reference = f"{OPENOOD} openood/postprocessors/rankfeat_postprocessor.py (Block 4 branch, SVD)"
    parameters = (Param("temperature", float, 1.0, 1e-3, 1e3, help="energy temperature T", source="OpenOOD's rankfeat.yml"),)
    input_level = True
    layers = ("forward_features: the last block's feature map",)

    @classmethod
    def input_key_for(cls, params: dict) -> str:
        return rankfeat_key(float(params["temperature"]))

    @classmethod
    def input_scores(cls, lm: Any, paths: list, params: dict, *, batch_size: int, max_pixels: int,
                     progress: Callable[[int], None] | None = None, decoder: str | None = None) -> np.ndarray:
        return rankfeat_scores(lm, paths, temperature=float(params["temperature"]), batch_size=batch_size, max_pixels=max_pixels,
                               progress=progress, decoder=decoder or "pil")

    def fit(self, fit: Outputs, head: Head | None = None) -> Detector:
        self.notes.append("RankFeat: the last block's map only (OpenOOD averages it with Block 3's)")
        return self

    def score(self, data: Outputs) -> np.ndarray:
        key = self.input_key_for(self.params)
        if key not in data.extra:
            raise DetectorError(f"RankFeat: no input-level scores {key} for these images; they are computed while extracting "
                                "features with the model (imported .npz outputs cannot give them)")
        return np.asarray(data.extra[key], dtype=np.float64)


def rankfeat_scores(lm: Any, paths: Sequence[str], *, temperature: float = 1.0, batch_size: int = 16, max_pixels: int | None = None,
                    progress: Callable[[int], None] | None = None, decoder: str = "pil") -> np.ndarray:
    """RankFeat scores for image files with a loaded model (pipelines.features.classifiers.LoadedModel whose
    model has timm's forward_features / forward_head); NaN for a file that cannot be decoded."""
    import torch

    from pipelines.features.extract import batches
    from pipelines.sources.images import DEFAULT_MAX_PIXELS

    model = lm.model
    if not (hasattr(model, "forward_features") and hasattr(model, "forward_head")):
        raise DetectorError(f"RankFeat: {lm.name} has no forward_features / forward_head (timm's split of body and head)")
    out = np.full(len(paths), np.nan)
    for idx, x, bad in batches(lm, paths, decoder=decoder, batch_size=batch_size, num_workers=0 if decoder == "pil" else None,
                               max_pixels=max_pixels or DEFAULT_MAX_PIXELS):
        if x is not None:
            with torch.inference_mode():
                fmap = model.forward_features(x)
                logits = model.forward_head(remove_rank_one(fmap.double()).to(fmap.dtype)).double()
                out[idx] = (temperature * torch.logsumexp(logits / temperature, dim=1)).cpu().numpy()
        if progress:
            progress(len(idx) + len(bad))
    if np.isnan(out).all() and len(paths):
        raise DetectorError("RankFeat: none of the images could be decoded")
    return out

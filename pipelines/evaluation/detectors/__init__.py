"""OOD detectors: one registered class per method (OpenOOD's one-class-per-method shape).

Every detector scores images so that higher means "more in-distribution". It sees a model's
outputs as plain arrays (``Outputs``: penultimate features, logits, labels for the fit set) and,
when it needs it, the model's last linear layer (``Head``: logits = features @ weight.T + bias).
``fit`` learns ID statistics from the ID fit set; ``score`` scores any set. Input-level methods
(ODIN) are computed during feature extraction and read from ``Outputs.extra``.

Adding a method is one file in this package with one decorated class; its parameters are
declared on it once, and the evaluation command's flags, the admin form's fields, the checks
and the docs table follow::

    @register_detector
    class MyScore(Detector):
        name = "my_score"
        label = "My score"
        paper = "Someone et al., Venue Year"
        parameters = (Param("temperature", float, 1.0, 0.01, 100.0, help="logit temperature", source="the paper"),)

        def score(self, data):
            return (data.logits / self.params["temperature"]).max(axis=1)

Formulas follow NINCO's appendix C and the original papers, as restated in REFERENCE.md
(Detectors); each module cites its paper.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

import numpy as np


class DetectorError(ValueError):
    """A detector cannot be fitted or applied to these data; the message says why and what to do."""


@dataclass
class Outputs:
    """A model's outputs on one image set."""

    features: np.ndarray  # float32 [n, d] penultimate ("pre-logits") features
    logits: np.ndarray  # float32 [n, C]
    labels: np.ndarray | None = None  # int [n] class index (fit / ID test sets), -1 where unknown
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # input-level scores, e.g. "odin"
    # statistics several detectors derive from the same set (class Gaussians, a principal space),
    # computed once per set by ``shared``; never part of equality or the repr
    cache: dict = field(default_factory=dict, repr=False, compare=False)
    # a vision-language model's local (patch) embeddings [n, P, D], as GL-MCM reads them; None for
    # classifiers (pipelines.evaluation.vlm.encode_images)
    local: np.ndarray | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.features = np.asarray(self.features, dtype=np.float32)
        self.logits = np.asarray(self.logits, dtype=np.float32)
        if self.features.ndim != 2 or self.logits.ndim != 2 or len(self.features) != len(self.logits):
            raise DetectorError(f"features {self.features.shape} and logits {self.logits.shape} must be [n, d] and [n, C] for the same n")
        if self.local is not None and (self.local.ndim != 3 or len(self.local) != len(self.features)):
            raise DetectorError(f"local embeddings {self.local.shape} must be [n, patches, d] for the {len(self.features)} images")
        if self.labels is not None:
            self.labels = np.asarray(self.labels, dtype=np.int64)
            if self.labels.shape != (len(self.features),):
                raise DetectorError(f"labels {self.labels.shape} do not match {len(self.features)} images")

    def __len__(self) -> int:
        return len(self.features)


@dataclass
class Head:
    """The classifier's last layer: logits = features @ weight.T + bias."""

    weight: np.ndarray  # [C, d]
    bias: np.ndarray  # [C]

    def __post_init__(self):
        self.weight = np.asarray(self.weight, dtype=np.float64)
        self.bias = np.asarray(self.bias, dtype=np.float64)

    def restricted(self, keep: np.ndarray) -> "Head":
        """The layer for the classes ``keep`` only (rows of weight and bias, in that order)."""
        if self.weight.ndim != 2 or self.bias.shape != (self.weight.shape[0],):
            raise DetectorError(f"head weight {self.weight.shape} / bias {self.bias.shape} are not [C, d] / [C]")
        keep = np.asarray(keep, dtype=np.int64)
        if keep.size and (keep.min() < 0 or keep.max() >= self.weight.shape[0]):
            raise DetectorError(f"classes to keep must be indices in [0, {self.weight.shape[0] - 1}]")
        return Head(weight=self.weight[keep], bias=self.bias[keep])

    def logits(self, features: np.ndarray) -> np.ndarray:
        return features.astype(np.float64) @ self.weight.T + self.bias


@dataclass
class TextHead:
    """A vision-language model's zero-shot head over the ID classes in force: one unit text
    embedding per class (``embeddings`` [C, D], rows in the order of ``wnids``), the prompt
    template it was made with, and ``encode`` (prompts -> unit embeddings through the same model,
    cached) for detectors that need other texts (NegLabel's negative labels). The logits of a
    zero-shot classifier are ``logit_scale * cos(image, text)`` (CLIP: 100)."""

    wnids: tuple[str, ...]
    names: tuple[str, ...]
    embeddings: np.ndarray
    template: str = ""  # the template key (pipelines.evaluation.vlm.TEMPLATE_KEYS)
    template_text: str = ""  # the template itself, in words, for the results
    names_source: str = ""
    logit_scale: float = 100.0
    encode: Callable[[Sequence[str]], np.ndarray] | None = field(default=None, repr=False, compare=False)
    model: str = ""

    def __post_init__(self):
        self.embeddings = np.asarray(self.embeddings, dtype=np.float64)
        if self.embeddings.ndim != 2 or len(self.embeddings) != len(self.wnids) or len(self.names) != len(self.wnids):
            raise DetectorError(f"text head: {len(self.wnids)} classes, {len(self.names)} names, embeddings {self.embeddings.shape}")

    def restricted(self, keep: np.ndarray) -> "TextHead":
        """The head for the classes ``keep`` only (indices into this head, in that order): the ID
        set in force, e.g. ImageNet-X's 500 ID classes."""
        keep = np.asarray(keep, dtype=np.int64)
        return TextHead(wnids=tuple(self.wnids[i] for i in keep), names=tuple(self.names[i] for i in keep),
                        embeddings=self.embeddings[keep], template=self.template, template_text=self.template_text,
                        names_source=self.names_source, logit_scale=self.logit_scale, encode=self.encode, model=self.model)

    def cosines(self, features: np.ndarray) -> np.ndarray:
        """cos(image, class text) [n, C] from raw image embeddings [n, D] (float64)."""
        f = np.asarray(features, dtype=np.float64)
        f = f / np.linalg.norm(f, axis=-1, keepdims=True)
        return f @ self.embeddings.T


def require_text(text: "TextHead | None", what: str) -> "TextHead":
    if text is None:
        raise DetectorError(f"{what} needs a vision-language model's text head: evaluate a clip:ARCH:WEIGHTS model "
                            "(its zero-shot head over the ID classes); a classifier has none")
    return text


def plain_number(x: float | None) -> str:
    """A number as people write it: 1,000,000 and 0.001, not 1e+06 ("-" for none)."""
    if x is None:
        return "-"
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True)
class Param:
    """A detector's parameter, declared once on its class; the evaluation command's flag
    (``--knn-k``), the admin form's field (``knn_k``), the run's validation, the result labels
    and the docs table (``python manage.py detectors``) are all made from it."""

    name: str  # the detector's own name for it, e.g. "k"
    kind: type  # int, float, or str for a convention chosen among ``choices``
    default: int | float | str | None  # None: the detector works it out (e.g. ViM's rule from the feature dimension)
    low: int | float | None = None
    high: int | float | None = None
    help: str = ""
    source: str = ""  # where the default comes from, e.g. "NINCO"
    choices: tuple[str, ...] = ()  # a convention where reference codes differ (kind str): its named options
    text: str = ""  # what a free-text parameter (kind str, no choices) takes, e.g. "uniform, or a file of weights"
    # a free-text parameter's own check (e.g. that the files it names exist), run with the others before a run starts;
    # it raises DetectorError naming the flag
    validate: Callable[[Any], None] | None = None

    def __post_init__(self):
        if self.choices and (self.kind is not str or self.default not in self.choices):
            raise ValueError(f"parameter {self.name}: a choice parameter is kind str with its default among {self.choices}")

    def key(self, detector: str) -> str:
        """The run settings' key, and the admin field's name: ``knn_k``."""
        return f"{detector}_{self.name}"

    def flag(self, detector: str) -> str:
        """The command-line option: ``--knn-k``."""
        return "--" + self.key(detector).replace("_", "-")

    def format(self, value: Any) -> str:
        """A value of this parameter as the results and tables write it."""
        if value is None:
            return "worked out from the data"
        return str(value) if self.choices or self.kind is str else f"{value:g}"

    def range_text(self) -> str:
        """The values it takes, for tables: "a / b" for a convention, "low to high" for a number."""
        if self.kind is str and not self.choices:
            return self.text or "text"
        return " / ".join(self.choices) if self.choices else f"{plain_number(self.low)} to {plain_number(self.high)}"

    def describe(self) -> str:
        options = f"; one of {', '.join(self.choices)}" if self.choices else ""
        return f"{self.help} (default {self.format(self.default)}{'; ' + self.source if self.source else ''}{options})"

    def check(self, detector: str, value: Any) -> Any:
        """``value`` as this parameter's type and in its range; DetectorError naming the flag otherwise.
        None (and 0 for a parameter the detector works out) means the default."""
        if value is None or value == "" or (self.default is None and value in (0, "0")):
            return self.default
        if self.choices:
            if str(value) not in self.choices:
                raise DetectorError(f"{self.flag(detector)}: {value!r} is not one of {', '.join(self.choices)}")
            return str(value)
        try:
            value = self.kind(value)
        except (TypeError, ValueError):
            raise DetectorError(f"{self.flag(detector)}: {value!r} is not {'a whole number' if self.kind is int else 'a number'}") from None
        if self.validate is not None:
            self.validate(value)
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            raise DetectorError(f"{self.flag(detector)}: {plain_number(value)} must be between {plain_number(self.low)} and {plain_number(self.high)}")
        return value


class Detector:
    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    # The reference implementation its test is checked against: repository, file and commit
    # (``OPENOOD`` / ``PYTORCH_OOD`` below, or the authors' code)
    reference: ClassVar[str] = ""
    needs_fit: ClassVar[bool] = False  # learns statistics from the ID fit set
    needs_head: ClassVar[bool] = False  # needs the classifier's weight and bias
    # needs a vision-language model's zero-shot head (``TextHead``, set as ``self.text`` before
    # ``fit`` by the evaluation); left out of runs without such a model unless named
    needs_text: ClassVar[bool] = False
    # a vision-language detector's local (patch) embeddings (``Outputs.local``)
    needs_local: ClassVar[bool] = False
    parameters: ClassVar[tuple[Param, ...]] = ()  # every setting it takes, declared once
    # Input-level methods (ODIN; MC-dropout would be one) need the network and the images, not
    # only its outputs: they set input_level and say what to compute while extracting
    # (input_scores) and under which name the scores are cached (input_key_for); the
    # evaluation computes, caches and hands them over in Outputs.extra[key].
    input_level: ClassVar[bool] = False
    # An input-level method that also needs its arrays for the ID fit set (per-layer statistics to
    # fit, as the Mahalanobis ensemble); its input_scores may return {"scores": [n, D], "widths": [L]}
    input_fit: ClassVar[bool] = False
    # The intermediate activations an input-level method reads (e.g. RankFeat: the last block's
    # map), declared so the docs and `manage.py detectors` name them
    layers: ClassVar[tuple[str, ...]] = ()
    # Left out of the default selection (the admin form's ticks, `evaluate` without --methods):
    # a sentence on what it costs; chosen by name it runs as any other
    costly: ClassVar[str] = ""

    @classmethod
    def input_key_for(cls, params: dict) -> str:
        """The cache name of this method's input-level scores with these parameters."""
        raise NotImplementedError(f"{cls.name} is not an input-level method")

    @classmethod
    def input_scores(cls, lm: Any, paths: list, params: dict, *, batch_size: int, max_pixels: int, progress: Any = None,
                     decoder: str | None = None) -> np.ndarray:
        """This method's scores for the images at ``paths`` with the loaded model ``lm``."""
        raise NotImplementedError(f"{cls.name} is not an input-level method")

    @classmethod
    def defaults(cls) -> dict:
        return {p.name: p.default for p in cls.parameters}

    def __init__(self, **params):
        known = {p.name for p in self.parameters}
        unknown = set(params) - known
        if unknown:
            raise DetectorError(f"{self.name}: unknown parameter(s) {', '.join(sorted(unknown))}; it takes {sorted(known) or 'none'}")
        self.params = {**self.defaults(), **params}
        self.notes: list[str] = []  # adjustments made while fitting, shown with the results
        self.text: TextHead | None = None  # the zero-shot head, for detectors that need_text

    def fit(self, fit: Outputs, head: Head | None = None) -> "Detector":
        return self

    def score(self, data: Outputs) -> np.ndarray:
        raise NotImplementedError


DETECTORS: dict[str, type[Detector]] = {}

# The reference codes the detectors' tests are written from (tests/pipelines/test_detectors_reference.py)
OPENOOD = "Jingkang50/OpenOOD@3c35632ee91b"
PYTORCH_OOD = "kkirchheim/pytorch-ood@d04767360a38"


def register_detector(cls: type[Detector]) -> type[Detector]:
    if not cls.name or cls.name in DETECTORS:
        raise ValueError(f"detector name {cls.name!r} is empty or registered twice")
    DETECTORS[cls.name] = cls
    return cls


# The order tables list them in (NINCO's tables: output-based first, then feature-based).
PREFERRED_ORDER = ("msp", "maxlogit", "energy", "entropy", "kl_matching", "mahalanobis", "relative_mahalanobis", "vim", "knn",
                   "react", "ash", "cosine", "mcm", "odin",
                   # output-based newcomers, then feature-based (issue 32)
                   "temperature_scaling", "gen", "gradnorm", "dice", "she", "scale", "ash_p", "ash_b", "vra", "nnguide", "relation",
                   "fdbd", "nci", "residual", "mahalanobis_pp", "gmm", "pnml", "rankfeat", "mds_ensemble", "cfood",
                   # vision-language (zero-shot) detectors (issue 46)
                   "clip_mcm", "gl_mcm", "clip_energy", "clip_maxlogit", "neglabel", "csp")


def detector_names() -> list[str]:
    """Every registered detector, in table order (unknown newcomers last, alphabetically)."""
    rank = {n: i for i, n in enumerate(PREFERRED_ORDER)}
    return sorted(DETECTORS, key=lambda n: (rank.get(n, len(rank)), n))


def default_detectors(*, text: bool = False) -> list[str]:
    """The detectors a run uses when it names none: every registered one but the costly ones
    (``Detector.costly``), in table order; those that need a vision-language model's text head
    only when ``text`` (the run has such a model)."""
    return [n for n in detector_names() if not DETECTORS[n].costly and (text or not DETECTORS[n].needs_text)]


def parameters() -> list[tuple[str, Param]]:
    """Every registered detector's parameters, in table order: (detector name, parameter)."""
    return [(name, p) for name in detector_names() for p in DETECTORS[name].parameters]


def method_params(settings: dict) -> dict[str, dict]:
    """Per-detector parameters from a run's settings (keys like ``knn_k``), each checked against
    its declaration; a parameter not set takes its default (left out when that default is None)."""
    out: dict[str, dict] = {}
    for name, p in parameters():
        value = p.check(name, settings.get(p.key(name)))
        if value is not None:
            out.setdefault(name, {})[p.name] = value
    return out


def params_of(name: str, method_params: dict | None = None) -> dict:
    """A detector's parameters for a run: its declared defaults, overridden by the run's own
    (``method_params``: detector name -> {parameter: value}). The one place the two are merged."""
    return {**DETECTORS[name].defaults(), **(method_params or {}).get(name, {})}


def get_detector(name: str, **params: Any) -> Detector:
    if name not in DETECTORS:
        raise DetectorError(f"unknown detector {name!r}; registered: {', '.join(DETECTORS)}")
    return DETECTORS[name](**params)


# -- shared maths ---------------------------------------------------------------------------------


def shared(outputs: Outputs, key: tuple, compute: Any, *keep_alive: Any) -> Any:
    """``compute()`` once per (set, key): detectors fitted on the same set share what they derive
    from it (Mahalanobis and Relative Mahalanobis their class Gaussians, ViM and Residual the
    eigen-decomposition). Objects named in the key by id() are kept alive with the value, so an
    id is never reused while its entry exists."""
    hit = outputs.cache.get(key)
    if hit is None:
        hit = outputs.cache[key] = (compute(), keep_alive)
    return hit[0]


def logsumexp(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True)))[:, 0]


def softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def class_means(fit: Outputs, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(class indices, class-mean features) over the fit set's labelled images."""
    if fit.labels is None or not np.any(fit.labels >= 0):
        raise DetectorError(f"{what} needs class labels on the ID fit set (images in wnid folders of ID classes, or 'labels' in the .npz)")
    keep = fit.labels >= 0
    classes, inverse = np.unique(fit.labels[keep], return_inverse=True)
    feats = fit.features[keep].astype(np.float64)
    sums = np.zeros((len(classes), feats.shape[1]))
    np.add.at(sums, inverse, feats)
    return classes, sums / np.bincount(inverse)[:, None]


def require_head(head: Head | None, what: str) -> Head:
    if head is None:
        raise DetectorError(f"{what} needs the classifier's last layer (weight and bias); import 'weight' and 'bias' with the .npz "
                            "or evaluate a model this toolkit can load")
    return head


def stage_rows(lm: Any, paths: Sequence[str], *, stages: int, per_map: Callable[[Any], Any], what: str, batch_size: int = 16,
               max_pixels: int | None = None, progress: Callable[[int], None] | None = None, decoder: str = "pil") -> dict[str, np.ndarray]:
    """The last ``stages`` stage outputs of ``lm`` (timm's ``forward_intermediates``), each turned
    into one vector per image by ``per_map`` (a [batch, ...] tensor in float64 -> [batch, width]),
    concatenated: {"scores": [n, sum of widths], NaN rows for files that cannot be decoded,
    "widths": each stage's width}. For the detectors that read several layers (Gram, the
    Mahalanobis ensemble); ``what`` names the detector in errors."""
    import torch

    from pipelines.features.extract import batches
    from pipelines.sources.images import DEFAULT_MAX_PIXELS

    model = lm.model
    if not hasattr(model, "forward_intermediates"):
        raise DetectorError(f"{what}: {lm.name} has no forward_intermediates (timm's access to its stages)")
    rows: np.ndarray | None = None
    widths: list[int] = []
    for idx, x, bad in batches(lm, paths, decoder=decoder, batch_size=batch_size, num_workers=0 if decoder == "pil" else None,
                               max_pixels=max_pixels or DEFAULT_MAX_PIXELS):
        if x is not None:
            with torch.inference_mode():
                vecs = [per_map(m.double()) for m in model.forward_intermediates(x, indices=stages, intermediates_only=True)]
            widths = [int(v.shape[1]) for v in vecs]
            if rows is None:
                rows = np.full((len(paths), sum(widths)), np.nan)
            rows[idx] = torch.cat(vecs, dim=1).cpu().numpy()
        if progress:
            progress(len(idx) + len(bad))
    if rows is None:
        if len(paths):
            raise DetectorError(f"{what}: none of the images could be decoded")
        return {"scores": np.zeros((0, 0)), "widths": np.zeros(0, dtype=np.int64)}
    return {"scores": rows, "widths": np.array(widths, dtype=np.int64)}


def _load_all() -> None:
    for mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        importlib.import_module(f"{__name__}.{mod}")


_load_all()

"""Inference on the CPU through OpenVINO: the model's logits and penultimate features in one call.

Measured on the 2-core VM (docs/benchmarks.md, issue 51), batch 32, float32, EfficientNet-Lite2:
OpenVINO's CPU plugin 58 images/s with one stream of two threads and 150 with two streams of
one thread (what CpuGraph does), ONNX Runtime 1.32 37, torch eager with channels_last 13 and
torch as extraction used it before 6.5. So on a CPU the forward pass goes through OpenVINO, and
torch (channels_last) is what is left when that cannot be had.

The graph is converted from the loaded torch module (``torch.export`` then
``openvino.convert_model``; TorchScript tracing where export fails)
with a free batch dimension and the input size of the model's transform, and saved as
OpenVINO IR under a cache folder (``<data folder>/cpu_graphs``): one folder per model name and
digest of its weights, input size and the two libraries' versions. A ``meta.json`` beside it
holds the sha256 of the IR files, checked whenever the graph is loaded; a copy that does not
match is converted again. Right after a conversion the graph's outputs are compared with
torch's on two inputs; a graph that disagrees (or a model that cannot be converted) is not
used, and the reason comes back as a note for the job's record: torch runs instead, never
silently.

Precision: the plugin is told to compute in float32 (``INFERENCE_PRECISION_HINT``), since on
CPUs with bfloat16 units it would otherwise round to bf16 (logits off by a few per cent).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

RUNTIME = "openvino"
ENV_RUNTIME = "OODC_CPU_RUNTIME"  # "torch" turns the fast path off (comparisons, debugging)
ENV_CACHE = "OODC_CPU_GRAPH_DIR"
PARITY_RTOL = 1e-4  # max |difference| over max |torch logit|, checked after each conversion
_LOCK = threading.Lock()


class CpuGraph:
    """A compiled graph: ``graph(x)`` with ``x`` float32 [n, 3, H, W] gives (logits [n, C],
    features [n, d]) as float32 numpy arrays.

    One single-threaded stream per thread: a batch is split into a few parts per stream, which the
    streams take as they come free. On the 2-core VM this ran EfficientNet-Lite2 at 150 images/s where one stream of
    two threads ran 55 (its threads wait for each other after every layer, and on a shared machine
    one of them is often off its core); each image's result is the same either way."""

    def __init__(self, compiled: Any, *, folder: Path, threads: int, parts_per_stream: int = 4):
        import openvino as ov

        self.compiled, self.folder, self.threads = compiled, folder, threads
        self.parts_per_stream = parts_per_stream
        self._queue = ov.AsyncInferQueue(compiled, max(1, threads))
        self._out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._queue.set_callback(self._done)
        self._busy = threading.Lock()  # one batch at a time (a loaded model is shared by a process's threads)

    def _done(self, request: Any, index: int) -> None:
        self._out[index] = (np.array(request.get_output_tensor(0).data, dtype=np.float32),
                            np.array(request.get_output_tensor(1).data, dtype=np.float32))

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # a few parts per stream, handed to whichever stream is free: a stream slowed by another
        # process on its core takes fewer of them instead of holding the batch up
        x = np.ascontiguousarray(x, dtype=np.float32)
        parts = [p for p in np.array_split(x, min(len(x), max(1, self.threads * self.parts_per_stream))) if len(p)]
        with self._busy:
            self._out.clear()
            for i, part in enumerate(parts):
                self._queue.start_async({0: np.ascontiguousarray(part)}, i)
            self._queue.wait_all()
            out = [self._out[i] for i in range(len(parts))]
        if len(out) == 1:
            return out[0]
        return np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out])


@dataclass
class Choice:
    """What runs a model's forward pass on the CPU: ``graph`` (OpenVINO) or None for torch,
    with ``note`` saying why torch (empty when the graph runs)."""

    graph: CpuGraph | None
    note: str = ""

    @property
    def runtime(self) -> str:
        return f"{RUNTIME} {_ov_version()}" if self.graph is not None else "torch (channels_last)"


def wanted() -> bool:
    return os.environ.get(ENV_RUNTIME, RUNTIME).strip().lower() != "torch"


def default_cache_dir() -> Path:
    if os.environ.get(ENV_CACHE):
        return Path(os.environ[ENV_CACHE])
    if os.environ.get("OODC_DATA_DIR"):
        return Path(os.environ["OODC_DATA_DIR"]) / "cpu_graphs"
    return Path.home() / ".cache" / "oodc" / "cpu_graphs"


def _ov_version() -> str:
    import openvino

    return str(openvino.__version__).split("-")[0]


def logits_and_features(model: Any) -> Any:
    """A torch module around a timm-style ``model`` (body, pooling, classifier) that returns
    (logits, penultimate features): what the graph is converted from."""
    import torch

    class Both(torch.nn.Module):
        def __init__(self, m: Any):
            super().__init__()
            self.m = m

        def forward(self, x):
            pre = self.m.forward_head(self.m.forward_features(x), pre_logits=True)
            return self.m.get_classifier()(pre), pre

    return Both(model).eval()


def weights_digest(model: Any) -> str:
    """sha256 over the module's state (names, shapes, dtypes, bytes): the same for the same weights."""
    import torch

    h = hashlib.sha256()
    for key, t in model.state_dict().items():
        a = t.detach().cpu().contiguous()
        h.update(f"{key}|{tuple(a.shape)}|{a.dtype}|".encode())
        h.update(a.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _key(lm: Any) -> tuple[str, dict]:
    import torch

    size = [int(v) for v in lm.data_config["input_size"]]
    meta = {"model": lm.name, "weights": lm.weights, "weights_sha256": weights_digest(lm.model), "input_size": size,
            "torch": torch.__version__, "openvino": _ov_version()}
    digest = hashlib.sha256(json.dumps({k: meta[k] for k in ("weights_sha256", "input_size", "torch", "openvino")},
                                       sort_keys=True).encode()).hexdigest()[:20]
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in lm.name)[:80]
    return f"{safe}-{digest}", meta


def _compile(xml: Path, threads: int) -> Any:
    import openvino as ov

    # one stream per thread, each single-threaded (CpuGraph splits a batch across them)
    return ov.Core().compile_model(str(xml), "CPU", {"PERFORMANCE_HINT": "THROUGHPUT", "NUM_STREAMS": threads,
                                                      "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"})


def _load(folder: Path, meta: dict, threads: int) -> CpuGraph | None:
    """The cached graph in ``folder`` when its files are intact and its record matches ``meta``."""
    try:
        stored = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    if any(stored.get(k) != meta[k] for k in ("weights_sha256", "input_size", "torch", "openvino")):
        return None
    for name in ("model.xml", "model.bin"):
        path = folder / name
        if not path.is_file() or _file_sha(path) != stored.get("files", {}).get(name):
            log.warning("cpu runtime: %s does not match its recorded sha256; converting again", path)
            return None
    return CpuGraph(_compile(folder / "model.xml", threads), folder=folder, threads=threads)


def _to_openvino(both: Any, probe: Any, size: list[int]) -> Any:
    """The OpenVINO model of ``both`` with a free batch size: through ``torch.export`` (3-4 s for a
    ResNet-18 here), else through TorchScript tracing (10-18 s), which more models survive."""
    import openvino as ov
    import torch

    try:
        batch = torch.export.Dim("batch", min=1, max=4096)
        program = torch.export.export(both, (probe,), dynamic_shapes=({0: batch},))
        model = ov.convert_model(program)
        model.reshape({model.inputs[0]: ov.PartialShape([-1, *size])})
        return model
    except Exception as exc:  # noqa: BLE001 - any failure of the newer path: the older one
        log.info("cpu runtime: torch.export path failed (%s: %s); tracing instead", type(exc).__name__, str(exc)[:200])
    with warnings.catch_warnings():  # the converter traces with torch.jit, which warns that it is deprecated
        warnings.simplefilter("ignore", FutureWarning)
        return ov.convert_model(both, example_input=probe, input=[(-1, *size)])


def _convert(lm: Any, folder: Path, meta: dict, threads: int) -> CpuGraph:
    """Trace ``lm.model`` into OpenVINO IR in ``folder`` (written beside it, then renamed into
    place), compile it, and check it against torch; raises ValueError when they disagree."""
    import openvino as ov
    import torch

    size = meta["input_size"]
    both = logits_and_features(lm.model)
    gen = torch.Generator().manual_seed(0)
    probe = torch.randn(2, *size, generator=gen)
    with torch.inference_mode():
        ref_logits, ref_feat = (t.float().numpy() for t in both(probe))
    ov_model = _to_openvino(both, probe, size)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        ov.save_model(ov_model, str(tmp / "model.xml"), compress_to_fp16=False)
        graph = CpuGraph(_compile(tmp / "model.xml", threads), folder=folder, threads=threads)
        logits, feat = graph(probe.numpy())
        scale = float(np.abs(ref_logits).max()) or 1.0
        diff = float(np.abs(logits - ref_logits).max()) / scale
        fdiff = float(np.abs(feat - ref_feat).max()) / (float(np.abs(ref_feat).max()) or 1.0)
        if not (diff <= PARITY_RTOL and fdiff <= PARITY_RTOL):
            raise ValueError(f"the converted graph's outputs differ from torch's (logits {diff:.2e}, features {fdiff:.2e} "
                             f"relative, allowed {PARITY_RTOL:g})")
        files = {name: _file_sha(tmp / name) for name in ("model.xml", "model.bin")}
        (tmp / "meta.json").write_text(json.dumps({**meta, "files": files, "parity": {"logits": diff, "features": fdiff}}, indent=1))
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process put its copy in place first: use that one
            pass
        else:
            tmp = folder
        graph.folder = folder
        return graph
    finally:
        if tmp != folder:
            shutil.rmtree(tmp, ignore_errors=True)


def choose(lm: Any, *, cache_dir: str | Path | None = None, threads: int | None = None) -> Choice:
    """The CPU runtime for ``lm`` (a ``pipelines.features.classifiers.LoadedModel`` on the CPU), decided
    once per loaded model and kept in ``lm.extra``: the OpenVINO graph (loaded from the cache or
    converted into it) or torch with the reason."""
    cached = lm.extra.get("cpu_choice")
    if isinstance(cached, Choice):
        return cached
    with _LOCK:
        if isinstance(lm.extra.get("cpu_choice"), Choice):
            return lm.extra["cpu_choice"]
        choice = _choose(lm, cache_dir, threads)
        if choice.note:
            log.warning("cpu runtime: %s", choice.note)
        lm.extra["cpu_choice"] = choice
        return choice


def _choose(lm: Any, cache_dir: str | Path | None, threads: int | None) -> Choice:
    import torch

    if not wanted():
        return Choice(None, f"{ENV_RUNTIME}=torch: the model runs in torch (channels_last) on the CPU")
    try:
        import openvino  # noqa: F401
    except ImportError as exc:
        return Choice(None, f"OpenVINO is not installed ({exc}); {lm.name} runs in torch (channels_last), about 3x slower "
                            "(pip install -r requirements.txt)")
    model = lm.model
    if not all(hasattr(model, a) for a in ("forward_features", "forward_head", "get_classifier")):
        return Choice(None, f"{lm.name} has no forward_features / forward_head / get_classifier; it runs in torch on the CPU")
    threads = int(threads or torch.get_num_threads())
    root = Path(cache_dir or lm.extra.get("cpu_graph_dir") or default_cache_dir())
    try:
        name, meta = _key(lm)
        folder = root / name
        graph = _load(folder, meta, threads) if folder.is_dir() else None
        if graph is None:
            log.info("cpu runtime: converting %s for OpenVINO into %s (once per model and weights)", lm.name, folder)
            graph = _convert(lm, folder, meta, threads)
        return Choice(graph)
    except Exception as exc:  # any failure to trace, convert, compile or match: torch runs, and says so
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return Choice(None, f"{lm.name} could not run through OpenVINO ({type(exc).__name__}: {first}); "
                            "it ran in torch (channels_last) on the CPU instead")

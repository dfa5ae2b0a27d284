"""Images to model inputs as tensors: torchvision decoding (nvJPEG in batches on a GPU,
libjpeg-turbo on the CPU), then one resize per distinct input size, crop and normalisation as
tensor operations that follow the model's timm data config.

This is the ``torchvision`` decoder; ``pil`` (Pillow and timm's eval transform, in
``pipelines.features.extract``) is the other. Both give what a model should see: EXIF orientation
applied, greyscale as RGB, the decompression-bomb limit checked before any pixel is decoded.
A file nvJPEG should not take (PNG and other formats, CMYK/YCCK, 12-bit, arithmetic-coded) is
decoded by the CPU in the same batch: torchvision's libjpeg-turbo where it is a JPEG it can
read, Pillow otherwise; a file nothing can decode is a result with its reason.

On a GPU, reading files and CPU decodes run in a thread pool (``torchvision.io.read_file``
and ``decode_jpeg`` release the GIL, Python's ``open().read()`` does not); each producer thread
decodes, resizes and normalises its batches on its own CUDA stream and hands them over with an
event, so the forward pass of one batch overlaps the preparation of the next with no host
synchronisation. The same code runs on the CPU, where the tests run it.

The difference between the two decoders is in the resize: Pillow resizes 8-bit pixels (and
decodes JPEGs at a reduced DCT scale first), this path resizes in float32 with antialiasing,
clamped to [0, 255] as Pillow clamps. Parity with the Pillow path is measured and tested
(docs/image_pipeline.md).
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import queue
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterator, Literal, Sequence

import numpy as np
from PIL import UnidentifiedImageError

from pipelines.sources.images import DEFAULT_MAX_PIXELS, load_rgb_for_model
from pipelines.sources.layouts import MemberRef

DECODERS = ("pil", "torchvision")
INTERPOLATIONS = ("nearest", "bilinear", "bicubic")  # what F.interpolate can do for timm's configs
DEFAULT_CROP_PCT = 0.875  # timm's default when a config has none

# torchvision 0.29 deprecates its image I/O in favour of TorchCodec; the functions work and are
# what the GPU machines' torchvision (0.26) offers, so the notice is silenced here, once.
warnings.filterwarnings("ignore", message=r".*image decoding and encoding capabilities of TorchVision.*",
                        category=DeprecationWarning)
warnings.filterwarnings("ignore", message=r".*TorchCodec.*", category=DeprecationWarning)


def default_decoder(device: str) -> str:
    """torchvision on a GPU (the CPU would starve it), Pillow otherwise (fastest on few cores)."""
    return "torchvision" if str(device).startswith("cuda") else "pil"


def check_decoder(name: str) -> str:
    if name not in DECODERS:
        raise ValueError(f"decoder {name!r}: choose one of {', '.join(DECODERS)}")
    return name


def default_threads() -> int:
    """Reader/decoder threads: I/O and decoding release the GIL, so twice the cores, up to 32."""
    return max(2, min(32, 2 * (os.cpu_count() or 1)))


# -- JPEG header ----------------------------------------------------------------------------------

# Start-of-frame markers (ITU T.81 table B.1): 0xC0 baseline, 0xC1 extended sequential,
# 0xC2 progressive, 0xC3 lossless, 0xC5-0xC7 differential, 0xC9-0xCF arithmetic coding.
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_NVJPEG_PROCESSES = frozenset({0xC0, 0xC1, 0xC2})


@dataclass(frozen=True)
class JpegHeader:
    width: int
    height: int
    components: int
    precision: int  # bits per sample
    process: int  # the SOF marker
    orientation: int = 1  # EXIF, 1..8
    adobe_transform: int | None = None  # APP14: 0 = RGB/CMYK as stored, 1 = YCbCr, 2 = YCCK

    @property
    def cpu_decodable(self) -> bool:
        """libjpeg-turbo via torchvision, with colours as Pillow gives them (grey or YCbCr/RGB)."""
        return self.precision == 8 and self.components in (1, 3) and self.process not in (0xC3, 0xC5, 0xC6, 0xC7)

    @property
    def gpu_decodable(self) -> bool:
        """What nvJPEG is given: 8-bit Huffman-coded grey or YCbCr (an Adobe RGB-coded file goes to the CPU)."""
        return self.cpu_decodable and self.process in _NVJPEG_PROCESSES and not (self.components == 3 and self.adobe_transform == 0)


def jpeg_header(data: bytes | np.ndarray) -> JpegHeader | None:
    """The frame header of a JPEG held in ``data`` (bytes or a 1-D uint8 array), read from its
    markers without decoding: None for anything that is not a readable JPEG header."""
    mv = memoryview(data).cast("B") if not isinstance(data, np.ndarray) else np.ascontiguousarray(data, dtype=np.uint8).data
    n = len(mv)
    if n < 4 or mv[0] != 0xFF or mv[1] != 0xD8:
        return None
    i, orientation, adobe, sof = 2, 1, None, None
    while i + 4 <= n:
        if mv[i] != 0xFF:
            return None
        marker = mv[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            i += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, start of scan: the header is over
            break
        length = (mv[i + 2] << 8) | mv[i + 3]
        start, end = i + 4, i + 2 + length
        if length < 2 or end > n:
            return None
        if marker == 0xE1 and orientation == 1 and bytes(mv[start:start + 6]) == b"Exif\x00\x00":
            orientation = _exif_orientation(bytes(mv[start + 6:end]))
        elif marker == 0xEE and length >= 14 and bytes(mv[start:start + 5]) == b"Adobe":
            adobe = mv[start + 11]
        elif marker in _SOF_MARKERS and sof is None and length >= 8:
            sof = (mv[start], (mv[start + 1] << 8) | mv[start + 2], (mv[start + 3] << 8) | mv[start + 4], mv[start + 5], marker)
        i = end
    if sof is None or sof[1] == 0 or sof[2] == 0:
        return None
    precision, height, width, components, process = sof
    return JpegHeader(width=width, height=height, components=components, precision=precision, process=process,
                      orientation=orientation, adobe_transform=adobe)


def _exif_orientation(tiff: bytes) -> int:
    """Tag 0x0112 of IFD0 in an EXIF (TIFF) block; 1 when absent or unreadable (as the Pillow
    path: a broken EXIF block must not hide a good picture)."""
    try:
        orders: dict[bytes, Literal["little", "big"]] = {b"II": "little", b"MM": "big"}
        order = orders[tiff[:2]]
        u16 = lambda o: int.from_bytes(tiff[o:o + 2], order)  # noqa: E731
        ifd = int.from_bytes(tiff[4:8], order)
        for e in range(u16(ifd)):
            entry = ifd + 2 + 12 * e
            if u16(entry) == 0x0112:
                value = u16(entry + 8)
                return value if 1 <= value <= 8 else 1
    except (KeyError, IndexError, ValueError):
        pass
    return 1


def apply_orientation(t: Any, orientation: int) -> Any:
    """A [C, H, W] tensor turned upright by its EXIF orientation (as Pillow's exif_transpose)."""
    if orientation == 2:
        return t.flip(2)
    if orientation == 3:
        return t.flip(1).flip(2)
    if orientation == 4:
        return t.flip(1)
    if orientation == 5:
        return t.transpose(1, 2)
    if orientation == 6:
        return t.transpose(1, 2).flip(2)
    if orientation == 7:
        return t.transpose(1, 2).flip(1).flip(2)
    if orientation == 8:
        return t.transpose(1, 2).flip(1)
    return t


# -- resize, crop, normalise ----------------------------------------------------------------------


def _rgb(values) -> tuple[float, float, float]:
    """A per-channel (R, G, B) triple from a data config's mean or std."""
    r, g, b = (float(v) for v in values)
    return r, g, b


@dataclass(frozen=True)
class Preprocess:
    """timm's eval transform (``transforms_imagenet_eval``) as tensor operations on a batch."""

    input_size: tuple[int, int]  # (H, W) the model takes
    scale_size: tuple[int, int]  # floor(input / crop_pct)
    crop_mode: str  # center, squash or border
    interpolation: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    @classmethod
    def from_data_config(cls, cfg: dict) -> "Preprocess":
        _c, h, w = cfg["input_size"]
        crop_pct = float(cfg.get("crop_pct") or DEFAULT_CROP_PCT)
        mode = cfg.get("crop_mode") or "center"
        interp = cfg.get("interpolation") or "bilinear"
        if interp not in INTERPOLATIONS:
            raise ValueError(f"the torchvision decoder resizes with {', '.join(INTERPOLATIONS)}; this model's data config asks "
                             f"for {interp!r}: use --decoder pil")
        if mode not in ("center", "squash", "border"):
            raise ValueError(f"crop mode {mode!r} is not one timm defines (center, squash, border)")
        return cls(input_size=(int(h), int(w)), scale_size=(math.floor(h / crop_pct), math.floor(w / crop_pct)), crop_mode=mode,
                   interpolation=interp, mean=_rgb(cfg["mean"]), std=_rgb(cfg["std"]))

    def resized_size(self, h: int, w: int) -> tuple[int, int]:
        sh, sw = self.scale_size
        if self.crop_mode == "squash":
            return sh, sw
        if self.crop_mode == "center" and sh == sw:
            # torchvision's Resize(int): the shorter side becomes sh, the longer is truncated to scale
            return (sh, int(sh * w / h)) if h <= w else (int(sh * h / w), sh)
        # timm's ResizeKeepRatio: shortest edge to target (center), longest edge (border)
        longest = 1.0 if self.crop_mode == "border" else 0.0
        rh, rw = h / sh, w / sw
        ratio = max(rh, rw) * longest + min(rh, rw) * (1.0 - longest)
        return round(h / ratio), round(w / ratio)

    def __call__(self, images: list, *, dtype=None, channels_last: bool = False):
        """[N, 3, H, W] normalised inputs from N uint8 [3, h, w] tensors on one device, in input order."""
        x, order = self.batch(images, dtype=dtype, channels_last=channels_last)
        if order == list(range(len(images))):
            return x
        import torch

        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order)] = torch.arange(len(order))
        return x[inverse.to(x.device)]

    def batch(self, images: list, *, dtype: Any = None, channels_last: bool = False) -> tuple[Any, list[int]]:
        """(x, order): the inputs grouped by source size, ``order[j]`` the position in ``images``
        of row j. One resize per distinct size, rows written as contiguous slices: no index
        tensor crosses to the device and nothing waits for it."""
        import torch
        import torch.nn.functional as F

        device = images[0].device
        groups: dict[tuple[int, int], list[int]] = {}
        for j, im in enumerate(images):
            groups.setdefault((int(im.shape[1]), int(im.shape[2])), []).append(j)
        th, tw = self.input_size
        out = torch.empty((len(images), 3, th, tw), dtype=torch.float32, device=device)
        fill = [float(round(255 * m)) for m in self.mean] if self.crop_mode == "border" else [0.0, 0.0, 0.0]
        order: list[int] = []
        for (h, w), members in groups.items():
            x = torch.stack([images[j] for j in members]).float()
            rh, rw = self.resized_size(h, w)
            if (rh, rw) != (h, w):
                antialias = self.interpolation != "nearest"
                x = F.interpolate(x, size=(rh, rw), mode=self.interpolation, antialias=antialias,
                                  align_corners=False if antialias else None)
                if self.interpolation == "bicubic":
                    x = x.clamp_(0.0, 255.0)  # Pillow's 8-bit resize clamps the overshoot
            if th > rh or tw > rw:  # pad to the crop (torchvision's centre crop pads with 0, timm's border with the mean)
                pl, pt = max(tw - rw, 0) // 2, max(th - rh, 0) // 2
                pr, pb = max(tw - rw, 0) - pl, max(th - rh, 0) - pt
                padded = torch.empty((x.shape[0], 3, rh + pt + pb, rw + pl + pr), dtype=x.dtype, device=device)
                for c in range(3):
                    padded[:, c].fill_(fill[c])
                padded[:, :, pt:pt + rh, pl:pl + rw] = x
                x, rh, rw = padded, rh + pt + pb, rw + pl + pr
            top, left = int(round((rh - th) / 2.0)), int(round((rw - tw) / 2.0))
            out[len(order):len(order) + len(members)] = x[:, :, top:top + th, left:left + tw]
            order.extend(members)
        mean, std = _stats(str(device), self.mean, self.std)
        out.sub_(mean).div_(std)
        if dtype is not None and dtype != out.dtype:
            out = out.to(dtype)
        if channels_last:
            out = out.contiguous(memory_format=torch.channels_last)
        return out, order


@functools.lru_cache(maxsize=16)
def _stats(device: str, mean: tuple, std: tuple):
    """Mean and std on the 0-255 scale as [1, 3, 1, 1] tensors, made once per device (a fresh
    host-to-device copy per batch would wait for the device)."""
    import torch

    return (torch.tensor(mean, device=device).view(1, 3, 1, 1) * 255.0, torch.tensor(std, device=device).view(1, 3, 1, 1) * 255.0)


# -- the loader -------------------------------------------------------------------------------------


def _decode_error(path: str, exc: BaseException) -> str:
    # the same wording as the Pillow path's, so a caller sees one kind of message
    return f"{path}: cannot decode it for the model ({type(exc).__name__}: {exc})"


class TensorBatches:
    """Batches ``(indices, x, bad)`` over ``paths`` in order: ``indices`` of the decoded files,
    ``x`` their [n, 3, H, W] inputs on ``device`` (None when none decoded), ``bad`` a list of
    (index, reason). ``counts`` tells how many files each decoder took: ``nvjpeg`` (GPU),
    ``libjpeg`` (torchvision on the CPU), ``pillow`` (fallback)."""

    def __init__(self, paths: Sequence[str], *, preprocess: Preprocess, device: str = "cpu", batch_size: int = 32,
                 threads: int | None = None, producers: int | None = None, max_pixels: int = DEFAULT_MAX_PIXELS,
                 min_side: int = 0, dtype=None, channels_last: bool = False):
        self.paths, self.pre, self.device = list(paths), preprocess, str(device)
        self.batch_size, self.max_pixels, self.min_side = max(1, int(batch_size)), int(max_pixels), int(min_side)
        self.cuda = self.device.startswith("cuda")
        self.threads = threads or default_threads()
        self.producers = producers or (2 if self.cuda else 1)
        self.dtype, self.channels_last = dtype, channels_last
        self.counts = {"nvjpeg": 0, "libjpeg": 0, "pillow": 0}
        self._lock = threading.Lock()

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n

    # one file, in a pool thread: ("gpu", bytes tensor, orientation) | ("img", uint8 CHW tensor) | ("err", reason)
    def _prepare(self, i: int):
        from torchvision.io import ImageReadMode, decode_jpeg, read_file

        path = self.paths[i]
        try:
            if isinstance(path, MemberRef):  # a source member: read through its layout, checked against its ingest hash
                import torch

                data = torch.frombuffer(bytearray(path.read()), dtype=torch.uint8)
            else:
                data = read_file(path)
        except Exception as exc:
            return "err", _decode_error(path, exc)
        head = jpeg_header(data.numpy())
        if head is not None:
            if head.width * head.height > self.max_pixels:
                return "err", _decode_error(path, ValueError(
                    f"{path}: {head.width}x{head.height} pixels is over the limit of {self.max_pixels} (decompression bomb)"))
            if self.cuda and head.gpu_decodable:
                return "gpu", data, head.orientation
            if head.cpu_decodable:
                try:
                    img = decode_jpeg(data, mode=ImageReadMode.RGB)
                except Exception:
                    pass  # Pillow has its say below: it names the damage
                else:
                    self._count("libjpeg")
                    return "img", apply_orientation(img, head.orientation)
        return self._pillow(i, data.numpy().tobytes())

    def _pillow(self, i: int, data: bytes):
        import torch

        path = self.paths[i]
        try:
            im = load_rgb_for_model(path, min_side=self.min_side, max_pixels=self.max_pixels, data=data)
            arr = np.asarray(im, dtype=np.uint8)
        except UnidentifiedImageError:  # its message would name the in-memory buffer, not the file
            return "err", _decode_error(path, ValueError("not an image file Pillow can read"))
        except Exception as exc:  # a bad file is a result, not a crash
            return "err", _decode_error(path, exc)
        self._count("pillow")
        return "img", torch.from_numpy(arr.copy()).permute(2, 0, 1)

    def _assemble(self, items: list[tuple[int, tuple]], stream):
        """Decode the GPU share of one batch, move the rest over, preprocess: (indices, x, bad, event)."""
        import torch
        from torchvision.io import ImageReadMode, decode_jpeg

        images: dict[int, object] = {}
        bad: list[tuple[int, str]] = []
        gpu = [(i, it[1], it[2]) for i, it in items if it[0] == "gpu"]
        ctx = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
        with ctx:
            if gpu:
                try:
                    decoded = decode_jpeg([d for _i, d, _o in gpu], mode=ImageReadMode.RGB, device=self.device)
                except Exception:  # one bad file fails the whole call: decode one by one
                    decoded = []
                    for i, d, _o in gpu:
                        try:
                            decoded.append(decode_jpeg(d, mode=ImageReadMode.RGB, device=self.device))
                        except Exception:
                            decoded.append(None)
                for (i, d, o), img in zip(gpu, decoded):
                    if img is None:
                        kind, *rest = self._pillow(i, d.numpy().tobytes())
                        if kind == "err":
                            bad.append((i, rest[0]))
                        else:
                            images[i] = rest[0].pin_memory().to(self.device, non_blocking=True)
                    else:
                        self._count("nvjpeg")
                        images[i] = apply_orientation(img, o)
            for i, it in items:
                if it[0] == "err":
                    bad.append((i, it[1]))
                elif it[0] == "img":
                    t = it[1]
                    if self.cuda:
                        t = t.pin_memory().to(self.device, non_blocking=True)
                    images[i] = t
            idx, x = sorted(images), None
            if idx:
                x, order = self.pre.batch([images[i] for i in idx], dtype=self.dtype, channels_last=self.channels_last)
                idx = [idx[j] for j in order]  # rows come grouped by source size
            event = None
            if stream is not None:
                event = torch.cuda.Event()
                event.record(stream)
        return idx, x, sorted(bad), event

    def __iter__(self) -> Iterator[tuple[list[int], object, list[tuple[int, str]]]]:
        import torch

        n, bs = len(self.paths), self.batch_size
        starts = list(range(0, n, bs))
        if not starts:
            return
        stop = threading.Event()
        outs: list[queue.Queue] = [queue.Queue(maxsize=2) for _ in range(self.producers)]
        pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="decode")

        def hand_over(p: int, item) -> None:
            """Put ``item`` on producer p's queue unless the consumer has stopped."""
            while not stop.is_set():
                try:
                    outs[p].put(item, timeout=0.1)
                    return
                except queue.Full:
                    continue

        def produce(p: int) -> None:
            stream = torch.cuda.Stream(device=self.device) if self.cuda else None
            try:
                for b in range(p, len(starts), self.producers):
                    if stop.is_set():
                        return
                    s = starts[b]
                    futures = [(i, pool.submit(self._prepare, i)) for i in range(s, min(s + bs, n))]
                    hand_over(p, ("ok", self._assemble([(i, f.result()) for i, f in futures], stream)))
            except BaseException as exc:  # hand it to the consumer, who raises it
                hand_over(p, ("error", exc))

        threads = [threading.Thread(target=produce, args=(p,), daemon=True, name=f"batches-{p}") for p in range(self.producers)]
        for t in threads:
            t.start()
        try:
            for b in range(len(starts)):
                kind, item = outs[b % self.producers].get()
                if kind == "error":
                    raise item
                idx, x, bad, event = item
                if event is not None:
                    current = torch.cuda.current_stream(self.device)
                    current.wait_event(event)  # no host synchronisation: the GPU orders the work
                    if x is not None:
                        x.record_stream(current)
                yield idx, x, bad
        finally:
            stop.set()
            for q in outs:  # unblock producers waiting to put
                while not q.empty():
                    q.get_nowait()
            for t in threads:
                t.join(timeout=5)
            pool.shutdown(wait=True, cancel_futures=True)


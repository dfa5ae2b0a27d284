"""Image checks on the awkward and broken files real folders contain (no database)."""
import hashlib

import numpy as np
import pytest
from PIL import Image

from fixtures.images import awkward_images, broken_files, exif_rotated_jpeg, pattern_image, write
from pipelines.sources.images import inspect_image, load_rgb


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(123)


def test_awkward_but_valid_images_are_accepted_with_their_mode_and_oriented_size(tmp_path, rng):
    expected_modes = {
        "cmyk.jpg": "CMYK", "grey16.png": "I;16", "palette.png": "P", "alpha.png": "RGBA",
        "rotated_exif6.jpg": "RGB", "greyscale.jpg": "L", "tiny.gif": "P", "photo.webp": "RGB",
        "palette_transparent.png": "P",
    }
    for name, data in awkward_images(rng).items():
        write(tmp_path / name, data)
        r = inspect_image(tmp_path / name)
        assert r.ok, (name, r.error)
        assert r.mode == expected_modes[name]
        assert r.sha256 == hashlib.sha256(data).hexdigest()
        assert r.bytes == len(data)
        if name == "rotated_exif6.jpg":
            assert (r.width, r.height, r.orientation) == (80, 120, 6)  # stored 120x80, shown upright
        else:
            assert (r.width, r.height) == (120, 80)


def test_every_kind_of_broken_file_gets_its_reason_and_the_file_name(tmp_path, rng):
    for name, (data, code) in broken_files(rng).items():
        write(tmp_path / name, data)
        r = inspect_image(tmp_path / name)
        assert r.error_code == code, (name, r)
        assert str(tmp_path / name) in r.error
        if data:
            assert r.sha256 == hashlib.sha256(data).hexdigest()


def test_pixel_limit_is_configurable(tmp_path, rng):
    write(tmp_path / "big.png", _png(pattern_image(rng, "gradient", [(0, 0, 0), (9, 9, 9)], (300, 200))))
    assert inspect_image(tmp_path / "big.png").ok
    r = inspect_image(tmp_path / "big.png", max_pixels=50_000)
    assert r.error_code == "decompression_bomb" and "60,000 pixels is more than the limit of 50,000" in r.error


def test_unreadable_file_is_reported_not_raised(tmp_path):
    r = inspect_image(tmp_path / "does_not_exist.jpg")
    assert r.error_code == "unreadable" and "does_not_exist.jpg" in r.error


def test_load_rgb_applies_exif_rotation_and_converts_every_mode(tmp_path, rng):
    base = pattern_image(rng, "stripes", [(200, 40, 40), (30, 30, 200)], (120, 80))
    write(tmp_path / "rot.jpg", exif_rotated_jpeg(base, 6))
    assert load_rgb(tmp_path / "rot.jpg").size == (80, 120)

    for name, data in awkward_images(rng).items():
        write(tmp_path / name, data)
        im = load_rgb(tmp_path / name)
        assert im.mode == "RGB", name

    # 16-bit greyscale keeps its brightness (scaled by bit depth, not clipped to white)
    grey = np.full((10, 10), 32768, np.uint16)
    Image.fromarray(grey).save(tmp_path / "g16.png")
    assert abs(int(np.asarray(load_rgb(tmp_path / "g16.png"))[0, 0, 0]) - 128) <= 1

    # fully transparent pixels are shown on white, not on whatever colour they stored
    rgba = Image.new("RGBA", (4, 4), (255, 0, 0, 0))
    rgba.save(tmp_path / "clear.png")
    assert tuple(np.asarray(load_rgb(tmp_path / "clear.png"))[0, 0]) == (255, 255, 255)

    # CMYK converts to the right colours (pure cyan -> no red)
    Image.new("CMYK", (4, 4), (255, 0, 0, 0)).save(tmp_path / "cyan.jpg")
    r, g, b = np.asarray(load_rgb(tmp_path / "cyan.jpg"))[0, 0]
    assert r < 30 and g > 220 and b > 220


def _png(im):
    import io

    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def test_png_exif_orientation_is_read_from_the_header(tmp_path, rng):
    exif = Image.Exif()
    exif[0x0112] = 8
    pattern_image(rng, "gradient", [(0, 0, 0), (255, 255, 255)], (90, 30)).save(tmp_path / "rot.png", exif=exif.tobytes())
    r = inspect_image(tmp_path / "rot.png")
    assert r.ok and (r.width, r.height, r.orientation) == (30, 90, 8)
    assert load_rgb(tmp_path / "rot.png").size == (30, 90)

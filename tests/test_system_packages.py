"""The system packages come from one list (scripts/system-packages.txt) that scripts/setup.sh and
the Dockerfile both install: each is run here with a recording stand-in for apt-get, and what
they ask apt-get to install is compared with the list read independently. And the list holds
what the installed wheels link against (OpenCV's libGL and GLib: issue 38 found the Docker image
without them, so `make_covariate_shift` failed at import in the containers)."""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

LIST = REPO / "scripts" / "system-packages.txt"
BASE_IMAGE_PACKAGES = {"libc6", "libstdc++6", "libgcc-s1", "zlib1g"}  # in python:3.11-slim-bookworm already


def listed() -> tuple[list[str], list[str]]:
    """(app packages, test-only packages), read from the file by its documented format."""
    app: list[str] = []
    test: list[str] = []
    into = app
    for raw in LIST.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line == "[test]":
            into = test
        elif line:
            into.append(line)
    return app, test


def fake_bin(folder: Path, record: Path) -> Path:
    """``apt-get``, ``dpkg`` and ``rm`` stand-ins: apt-get writes its arguments to ``record`` and
    stops at ``install`` (so the scripts go no further); dpkg says nothing is installed; rm
    removes nothing."""
    folder.mkdir()
    scripts = {
        "apt-get": f'#!/bin/sh\necho "$@" >> "{record}"\ncase " $* " in *" install "*) exit 42;; esac\nexit 0\n',
        "dpkg": "#!/bin/sh\nexit 1\n",
        "rm": "#!/bin/sh\nexit 0\n",
    }
    for name, text in scripts.items():
        path = folder / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def installed_by(record: Path) -> list[str]:
    lines = [line.split() for line in record.read_text().splitlines() if " install " in f" {line} "]
    assert len(lines) == 1, f"one apt-get install expected, got {lines}"
    return [word for word in lines[0] if not word.startswith("-") and word != "install"]


def test_the_list_parses_and_the_reader_agrees():
    app, test = listed()
    assert app and test and not set(app) & set(test)
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9.+-]+", p) for p in app + test)
    read = subprocess.run(["sh", "scripts/system-packages.sh"], cwd=REPO, capture_output=True, text=True, check=True)
    read_test = subprocess.run(["sh", "scripts/system-packages.sh", "--test"], cwd=REPO, capture_output=True, text=True, check=True)
    assert read.stdout.split() == app
    assert read_test.stdout.split() == app + test


@pytest.mark.parametrize("flag", ["", "--test"])
def test_setup_sh_installs_exactly_the_list(tmp_path, flag):
    copy = tmp_path / "repo"
    (copy / "scripts").mkdir(parents=True)
    for name in ("setup.sh", "system-packages.sh", "system-packages.txt"):
        shutil.copy2(REPO / "scripts" / name, copy / "scripts" / name)
    record = tmp_path / "apt.log"
    env = {**os.environ, "PATH": f"{fake_bin(tmp_path / 'bin', record)}:{os.environ['PATH']}"}
    env.pop("SUDO_USER", None)
    out = subprocess.run(["bash", str(copy / "scripts" / "setup.sh"), *([flag] if flag else [])], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and record.is_file(), out.stdout + out.stderr  # stopped at the recorded install
    app, test = listed()
    assert sorted(installed_by(record)) == sorted(app + (test if flag else []))


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_docker_image_installs_exactly_the_apps_part_of_the_list(tmp_path):
    """The Dockerfile's COPY of the list and its apt-get RUN, run here with the copied files in
    a folder of the test's own and apt-get recorded."""
    steps = dockerfile_instructions()
    runs = [rest for word, rest in steps if word == "RUN" and "apt-get" in rest]
    assert len(runs) == 1, "one apt-get RUN in the Dockerfile, reading scripts/system-packages.txt"
    run = runs[0]
    image_root = tmp_path / "image"
    for word, rest in steps:
        if word == "COPY" and "system-packages" in rest:
            *sources, dest = rest.split()
            assert dest.startswith("/") and dest.endswith("/")
            target = image_root / dest.lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            for src in sources:
                shutil.copy2(REPO / src, target / Path(src).name)
            run = run.replace(dest, f"{target}/")
    assert str(image_root) in run, "the apt-get RUN reads the copied list"
    record = tmp_path / "apt.log"
    env = {**os.environ, "PATH": f"{fake_bin(tmp_path / 'bin', record)}:{os.environ['PATH']}"}
    subprocess.run(["sh", "-c", run], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    app, _test = listed()
    assert sorted(installed_by(record)) == sorted(app)


def test_the_list_holds_the_system_libraries_opencv_links_against():
    """Every library that cv2's module and the libraries its wheel ships need (ELF NEEDED) and
    that the wheel does not ship comes from a listed package or from the base image (issue 38: libGL.so.1, libglib-2.0.so.0)."""
    if not shutil.which("dpkg") or not shutil.which("readelf"):
        pytest.skip("needs dpkg and readelf (Debian)")
    import cv2

    module = next(Path(cv2.__file__).parent.glob("cv2*.so"))
    wheel_dir = str(Path(cv2.__file__).parent.parent)
    ldd = subprocess.run(["ldd", str(module)], capture_output=True, text=True).stdout
    resolved = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
    loaded = [str(module)] + [p for p in resolved.values() if p.startswith(wheel_dir)]  # the module and the wheel's own libraries
    needed: set[str] = set()
    for path in loaded:
        dynamic = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
        needed |= set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic))
    app, _test = listed()
    owners = {}
    for lib in sorted(needed):
        if lib.startswith("ld-linux"):
            continue  # the dynamic loader itself (libc6)
        path = resolved.get(lib)
        assert path and path != "not", f"{lib} (needed by OpenCV) is not installed"
        if path.startswith(wheel_dir):
            continue  # shipped in the wheel
        real = Path(path)
        candidates = [str(real), str(real).replace("/lib/", "/usr/lib/", 1) if str(real).startswith("/lib/") else str(real)]
        owner = ""
        for c in candidates:
            q = subprocess.run(["dpkg", "-S", c], capture_output=True, text=True)
            if q.returncode == 0:
                owner = q.stdout.split(":")[0]
                break
        assert owner, f"no Debian package owns {lib} ({path})"
        owners[lib] = owner
    assert {"libGL.so.1", "libglib-2.0.so.0"} <= set(owners)
    missing = {lib: o for lib, o in owners.items() if o not in app and o not in BASE_IMAGE_PACKAGES}
    assert not missing, f"add to scripts/system-packages.txt: {missing}"

"""House rules of the code's shape (issue 18) that no linter here checks on its own: every public
function of pipelines/ and the services says the types it takes and returns (mypy checks
pipelines/ with them in CI), and no module reaches into another's private names."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO


def _public_functions(root: Path):
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))

        def walk(node, owner=""):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and not child.name.startswith("_") and not owner.startswith("_"):
                    yield path, child
                elif isinstance(child, ast.ClassDef) and not child.name.startswith("_"):
                    yield from walk(child, child.name)

        yield from walk(tree)


def test_every_public_function_of_pipelines_and_the_services_is_typed():
    missing = []
    for root in (REPO / "pipelines", REPO / "curation" / "services"):
        for path, fn in _public_functions(root):
            args = [a for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs if a.arg not in ("self", "cls")]
            args += [a for a in (fn.args.vararg, fn.args.kwarg) if a is not None]
            untyped = [a.arg for a in args if a.annotation is None]
            if untyped or fn.returns is None:
                missing.append(f"{path.relative_to(REPO)}:{fn.lineno} {fn.name} {untyped or ''}{' no return type' if fn.returns is None else ''}")
    assert not missing, "\n".join(missing)


def test_no_module_imports_another_modules_private_names():
    found = []
    for package in ("curation", "pipelines", "labeling_ui"):
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                ours = isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").split(".")[0] in
                                                             ("curation", "pipelines", "labeling_ui"))
                if ours:
                    found += [f"{path.relative_to(REPO)}:{node.lineno}: {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    assert not found, found


def test_starting_a_process_with_the_urls_admin_and_tasks_loaded_imports_nothing_heavy():
    """Every command, worker and web process loads the URLs, the admin or the tasks. scipy.stats
    (pipelines.review.certify) and scipy.optimize (the OpenMax detector) added 1.2 s and 0.4 s to each
    start when imported at module level; the functions that need them import them. torch, timm,
    faiss, nltk and the rest load where a job or command uses them, not in every process."""
    import os
    import subprocess
    import sys

    code = ("import sys, django; django.setup(); from django.urls import resolve; resolve('/'); import curation.admin, "
            "curation.tasks; print(sorted(m for m in ('scipy', 'torch', 'timm', 'faiss', 'nltk', 'sklearn', 'cv2', 'matplotlib') if m in sys.modules))")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "curation.settings"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout

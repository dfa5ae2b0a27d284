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


STAGES = ("sources", "classes", "features", "review", "export", "evaluation")  # the flow's order
PLUGIN_PACKAGES = ("pipelines/sources/layouts", "pipelines/export/layouts", "pipelines/evaluation/detectors")


def test_pipelines_top_level_names_the_flow_and_each_stage_says_what_it_computes_and_who_drives_it():
    """Issue 55: ``ls pipelines/`` shows the six stages and the two shared rules, nothing else; each
    stage's __init__ says in at most three lines what it computes and names services that exist."""
    top = sorted(p.name for p in (REPO / "pipelines").iterdir() if p.name != "__pycache__")
    assert top == sorted([*STAGES, "__init__.py", "names.py", "numbers.py"])
    for stage in STAGES:
        doc = ast.get_docstring(ast.parse((REPO / "pipelines" / stage / "__init__.py").read_text(encoding="utf-8")))
        assert doc and len(doc.splitlines()) <= 3, stage
        assert "Driven by curation/services/" in doc, stage
        driven_by = doc.split("Driven by", 1)[1].replace(",", " ").replace(" and ", " ").split()
        services = [REPO / "curation" / "services" / Path(w.rstrip(".")).name for w in driven_by]
        assert services and all(s.is_file() for s in services), (stage, driven_by)


def test_plug_in_packages_find_their_plug_ins_by_discovery_never_by_name():
    """A plug-in package's __init__ imports none of its own modules (they import it); it finds them
    with pkgutil, so adding one is one file and no import circle forms (issue 55)."""
    for pkg in PLUGIN_PACKAGES:
        path = REPO / pkg / "__init__.py"
        dotted = pkg.replace("/", ".")
        own = {p.stem for p in (REPO / pkg).glob("*.py")} - {"__init__"}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                target = (node.module or "") if node.level == 0 else f"{dotted}.{node.module or ''}".rstrip(".")
                names = {a.name for a in node.names}
                assert not (target.startswith(dotted + ".") or (target == dotted and names & own)), \
                    f"{path.relative_to(REPO)}:{node.lineno} imports its plug-in {target} {sorted(names)}"


def import_cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module in grimp's graph of direct imports
    (every import statement, at module level or inside a function)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in modules:  # Tarjan's algorithm, iteratively (no recursion limit)
        if root in order:
            continue
        work = [(root, iter(edges[root]))]
        order[root] = low[root] = len(order)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in order:
                    order[child] = low[child] = len(order)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], order[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == order[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_of_curation_pipelines_or_labeling_ui_is_in_an_import_circle():
    """lint-imports' acyclic contract compares siblings; a package's __init__ importing its own child
    inside a function (while the child imports the package) slipped past it (issue 55). Here every
    import statement counts, module- or function-level, between any two modules."""
    import grimp

    graph = grimp.build_graph("pipelines", "curation", "labeling_ui", cache_dir=None)
    assert import_cycles(graph) == []


def test_the_circle_check_finds_a_function_level_circle(tmp_path, monkeypatch):
    """The check above can fail: a package whose __init__ imports its child inside a function, while
    the child imports the package, is one circle."""
    import grimp

    pkg = tmp_path / "circlepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("def f():\n    from .child import g\n    return g\n")
    (pkg / "child.py").write_text("from . import f\n\ndef g():\n    return f\n")
    (pkg / "alone.py").write_text("import os\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("circlepkg", cache_dir=None)
    assert import_cycles(graph) == [["circlepkg", "circlepkg.child"]]

"""Every commit a detector cites, read from its docstrings, ``paper`` and ``reference`` and from
docs/evaluation.md, agrees with the others (issue 60), and the cited commits hold what is cited.

The second part was checked against the repositories themselves (bare clones, read with
``git show COMMIT:PATH``): deeplearning-wisc/MCM (006fb40c23b6 has the MCM and energy scores and
no max-logit branch; 640657ea67cb, "add support for max-logit", adds it), XueJiang16/NegLabel
(979e142e8054, 5ab9a42151cd, 6884a885e592), AtsuMiyai/GL-MCM, MengyuanChen21/NeurIPS2024-CSP,
Jingkang50/OpenOOD, kkirchheim/pytorch-ood, kobybibas/pnml_ood_detection, Vastlab/libMR and
omah03/weiper at the commits their detectors name. Those facts are in ``VERIFIED`` below; with
clones at hand (``OODC_REFERENCE_MIRRORS=DIR``, holding ``owner+name/repo`` bare clones or
``owner+name`` clones) the test reads them again, and checks that every cited file exists at
its commit."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.evaluation.detectors import DETECTORS, detector_names

REPO = Path(__file__).resolve().parents[2]
HEX = r"[0-9a-f]{7,40}"
# owner/name@commit (a repository: no file extension) and path/file.ext@commit (a file of the last one named)
REPO_AT = re.compile(rf"(?<![\w./-])([A-Za-z0-9][\w-]*/[A-Za-z0-9][\w-]*)@({HEX})\b")
PATH_AT = re.compile(rf"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.\w+)@({HEX})\b")
# a file another code base holds ("Liang et al.'s calData.py") is not a file of the repository named before it
PLAIN_PATH = re.compile(r"(?<![\w./@-])(?<!'s )((?:[\w-]+/)*[\w-]+\.(?:py|cpp|h|yml|yaml|sh))(?![\w@])")


def citations(text: str) -> list[tuple[str, str, str]]:
    """(repository, commit, path or "") for every citation in ``text``: a path inherits the
    repository and commit named last before it; ``path@commit`` its own commit."""
    events = []
    for m in REPO_AT.finditer(text):
        events.append((m.start(), "repo", m.group(1), m.group(2)))
    for m in PATH_AT.finditer(text):
        events.append((m.start(), "path", m.group(1), m.group(2)))
    for m in PLAIN_PATH.finditer(text):
        events.append((m.start(), "path", m.group(1), ""))
    out, repo, commit = [], "", ""
    for _pos, kind, name, hexa in sorted(events):
        if kind == "repo":
            repo, commit = name, hexa
            out.append((repo, commit, ""))
        elif repo:
            out.append((repo, hexa or commit, name))
    return out


def same_commit(a: str, b: str) -> bool:
    return a.startswith(b) or b.startswith(a)


def detector_texts(name: str) -> dict[str, str]:
    cls = DETECTORS[name]
    return {"reference": cls.reference, "paper": cls.paper, "class docstring": cls.__doc__ or "",
            "module docstring": sys.modules[cls.__module__].__doc__ or ""}


def test_the_parser_reads_the_shapes_references_take():
    got = citations("XueJiang16/NegLabel@979e142e8054 mmcls/models/classifiers/multi_modal.py (negative mining), "
                    "mmcls/models/ood/clip_ood.py@5ab9a42151cd (grouped score); Vastlab/libMR@cebbc64dc822 libMR/MetaRecognition.cpp")
    assert got == [("XueJiang16/NegLabel", "979e142e8054", ""),
                   ("XueJiang16/NegLabel", "979e142e8054", "mmcls/models/classifiers/multi_modal.py"),
                   ("XueJiang16/NegLabel", "5ab9a42151cd", "mmcls/models/ood/clip_ood.py"),
                   ("Vastlab/libMR", "cebbc64dc822", ""), ("Vastlab/libMR", "cebbc64dc822", "libMR/MetaRecognition.cpp")]


@pytest.mark.parametrize("name", detector_names())
def test_a_detectors_fields_cite_one_commit_per_file(name):
    """Docstrings, ``paper`` and ``reference``: a repository file is cited at one commit, and
    a repository the docstrings cite is cited by ``reference`` at the same commit."""
    texts = detector_texts(name)
    ref = citations(texts["reference"])
    ref_commits: dict[str, set[str]] = {}
    for repo, commit, _path in ref:
        ref_commits.setdefault(repo, set()).add(commit)
    by_file: dict[tuple[str, str], set[str]] = {}
    for where, text in texts.items():
        for repo, commit, path in citations(text):
            if path:
                by_file.setdefault((repo, path), set()).add(commit)
            if where != "reference" and repo in ref_commits and not path:
                assert any(same_commit(commit, c) for c in ref_commits[repo]), (name, where, repo, commit, ref_commits[repo])
    for (repo, path), commits in by_file.items():
        assert all(same_commit(a, b) for a in commits for b in commits), (name, repo, path, commits)


def _docs() -> str:
    return (REPO / "docs" / "evaluation.md").read_text(encoding="utf-8")


def test_the_vision_language_table_in_the_docs_cites_what_the_detectors_cite():
    """The hand-written table of the zero-shot detectors (docs/evaluation.md): each row's
    commits are the ones its detector's ``reference`` names (the generated table is kept equal to
    the code by tests/test_plugins.py)."""
    rows = [line for line in _docs().splitlines() if re.match(r"\| `(clip_mcm|gl_mcm|clip_energy|clip_maxlogit|neglabel|csp)` \|", line)]
    assert len(rows) == 6
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        name = cells[0].strip("`")
        cited = re.findall(HEX, cells[-1])
        assert cited, (name, cells[-1])
        ref = [commit for _repo, commit, _path in citations(DETECTORS[name].reference)]
        for commit in cited:
            assert any(same_commit(commit, c) for c in ref), (name, commit, ref)
        assert same_commit(cited[0], ref[0]), (name, cited[0], ref[0])


def test_every_repository_commit_in_the_docs_is_one_the_detectors_cite():
    cited: dict[str, set[str]] = {}
    for name in detector_names():
        for repo, commit, _path in citations(DETECTORS[name].reference):
            cited.setdefault(repo, set()).add(commit)
    for m in REPO_AT.finditer(_docs()):
        repo, commit = m.group(1), m.group(2)
        if repo in cited:
            assert any(same_commit(commit, c) for c in cited[repo]), (repo, commit, cited[repo])


def test_clip_maxlogit_cites_the_commit_that_has_its_branch():
    assert citations(DETECTORS["clip_maxlogit"].reference)[0][:2] == ("deeplearning-wisc/MCM", "640657ea67cb")
    for name in ("clip_mcm", "clip_energy"):
        assert citations(DETECTORS[name].reference)[0][:2] == ("deeplearning-wisc/MCM", "006fb40c23b6")


# What the cited commits hold, read from the repositories for issue 60: (detector, repository,
# commit, file, text the file holds there, text it does not hold there or "", whether the
# detector's reference cites that commit: the last row is the commit clip_maxlogit cited before)
VERIFIED = (
    ("clip_mcm", "deeplearning-wisc/MCM", "006fb40c23b6", "utils/detection_util.py", "args.score == 'MCM'", "", True),
    ("clip_energy", "deeplearning-wisc/MCM", "006fb40c23b6", "utils/detection_util.py",
     "args.T*torch.logsumexp(output / args.T, dim=1)", "", True),
    ("clip_energy", "deeplearning-wisc/MCM", "006fb40c23b6", "eval_ood_detection.py", "'--T', type=int, default=1", "", False),
    ("clip_maxlogit", "deeplearning-wisc/MCM", "640657ea67cb", "utils/detection_util.py", "args.score == 'max-logit'", "", True),
    ("neglabel", "XueJiang16/NegLabel", "979e142e8054", "mmcls/models/classifiers/multi_modal.py",
     "txtfiles = os.listdir(wordnet_database)", "", True),
    ("neglabel", "XueJiang16/NegLabel", "6884a885e592", "custom_config/clip.py", "neg_topk=0.15", "", True),
    ("clip_maxlogit", "deeplearning-wisc/MCM", "006fb40c23b6", "utils/detection_util.py", "get_ood_scores_clip", "max-logit", False),
)


def _mirror(repo: str) -> str | None:
    root = os.environ.get("OODC_REFERENCE_MIRRORS")
    if not root:
        return None
    base = Path(root) / repo.replace("/", "+")
    for git_dir in (base / "repo", base / ".git", base):
        if (git_dir / "HEAD").is_file():
            return str(git_dir)
    return None


def _show(git_dir: str, commit: str, path: str) -> str | None:
    done = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


@pytest.mark.parametrize("fact", VERIFIED, ids=[f"{f[0]}-{f[2]}-{f[3].rsplit('/', 1)[-1]}" for f in VERIFIED])
def test_the_cited_commits_hold_what_is_cited(fact):
    name, repo, commit, path, holds, lacks, cited = fact
    named = any(r == repo and same_commit(c, commit) and p == path for r, c, p in citations(DETECTORS[name].reference))
    assert named == cited, fact
    git_dir = _mirror(repo)
    if git_dir is None:
        pytest.skip(f"no clone of {repo} (set OODC_REFERENCE_MIRRORS to read it again)")
    text = _show(git_dir, commit, path)
    assert text is not None, f"{repo}@{commit} has no {path}"
    assert holds in text, (repo, commit, path, holds)
    assert not lacks or lacks not in text, (repo, commit, path, lacks)


def test_every_cited_file_exists_at_its_commit():
    checked, missing = 0, []
    for name in detector_names():
        for repo, commit, path in citations(DETECTORS[name].reference):
            git_dir = _mirror(repo)
            if git_dir is None:
                continue
            tree = subprocess.run(["git", "--git-dir", git_dir, "ls-tree", "-r", "--name-only", commit],
                                  capture_output=True, text=True)
            if tree.returncode != 0:
                missing.append((name, repo, commit, "no such commit"))
                continue
            files = tree.stdout.splitlines()
            if path and not any(f == path or f.endswith("/" + path) for f in files):
                missing.append((name, repo, commit, path))
            checked += 1
    if not checked:
        pytest.skip("no clones of the reference repositories (set OODC_REFERENCE_MIRRORS)")
    assert not missing, missing

"""Class filter speed: all ImageNet-21K classes against ImageNet-1K, cold and warm, with a
plain-NLTK baseline in the same run.

    .venv/bin/python benchmarks/bench_class_filter.py [--repeats 3]

  cold  : a fresh Python process (its start-up and imports counted) that loads WordNet (the
          compact noun graph that `manage.py setup_wordnet` caches) and applies every rule of
          the imagenet-ood preset to the 21,843 classes. Wall time of the whole process.
  warm  : the same rules again in a process that has the graph loaded (a long-lived worker).
  nltk  : the baseline: a fresh process that opens WordNet with NLTK's reader and computes
          only the four rules ImageNet-OOD used (ID class, hypernym, hyponym, organism) with
          NLTK's synset closures.
  build : building the graph cache from NLTK (done once, by setup_wordnet).
No database: this times the rules, not the storage of their decisions.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

COLD = r"""
import time, sys
t0 = time.perf_counter()
from pathlib import Path
from pipelines.classes.wordnet_graph import load_noun_graph
from pipelines.classes.filter import Candidate, load_policy, run_class_filter
from pipelines.classes.imagenet import named_list
g = load_noun_graph(Path(sys.argv[1]), build=False)
t1 = time.perf_counter()
r = run_class_filter(g, [Candidate(key=w, wnid=w) for w in named_list("imagenet-21k")], list(named_list("imagenet-1k")), load_policy("imagenet-ood"))
t2 = time.perf_counter()
print(f"{t1 - t0:.4f} {t2 - t1:.4f} {len(r.decisions)} {sum(d.decision != 'keep' for d in r.decisions)}")
"""

NLTK = r"""
import time, sys
t0 = time.perf_counter()
from pathlib import Path
from pipelines.classes.wordnet import load_wordnet
from pipelines.classes.imagenet import named_list
wn = load_wordnet(Path(sys.argv[1]))
t1 = time.perf_counter()
syn = lambda w: wn.synset_from_pos_and_offset("n", int(w[1:]))
up = lambda s: s.hypernyms() + s.instance_hypernyms()
ids = {syn(w) for w in named_list("imagenet-1k")}
id_ancestors = set()
for s in ids:
    id_ancestors.update(s.closure(up))
organism = wn.synset("organism.n.01")
removed = 0
for w in named_list("imagenet-21k"):
    s = syn(w)
    ancestors = set(s.closure(up))
    if s in ids or s in id_ancestors or ancestors & ids or organism in ancestors or s == organism:
        removed += 1
t2 = time.perf_counter()
print(f"{t1 - t0:.4f} {t2 - t1:.4f} 21843 {removed}")
"""


def run_fresh(code: str, nltk_data: Path) -> tuple[float, float, float, int, int]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, str(nltk_data)], cwd=REPO, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    wall = time.perf_counter() - start
    load, rules, n, removed = out.stdout.split()
    return wall, float(load), float(rules), int(n), int(removed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-build", action="store_true", help="do not time building the graph cache")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "curation.settings")
    from django.conf import settings

    nltk_data = Path(settings.NLTK_DATA)
    from pipelines.classes.filter import Candidate, load_policy, run_class_filter
    from pipelines.classes.imagenet import named_list
    from pipelines.classes.wordnet_graph import NounGraph, load_noun_graph

    graph = load_noun_graph(nltk_data, log_to=print)  # makes sure the cache exists
    cold, nltk = [], []
    for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits both alike
        cold.append(run_fresh(COLD, nltk_data))
        nltk.append(run_fresh(NLTK, nltk_data))
    cands = [Candidate(key=w, wnid=w) for w in named_list("imagenet-21k")]
    ids, policy = list(named_list("imagenet-1k")), load_policy("imagenet-ood")
    warm = []
    for _ in range(max(args.repeats, 5)):
        t = time.perf_counter()
        run_class_filter(graph, cands, ids, policy)
        warm.append(time.perf_counter() - t)
    build = None
    if not args.skip_build:
        from pipelines.classes.wordnet import load_wordnet

        wn = load_wordnet(nltk_data)
        t = time.perf_counter()
        NounGraph.from_nltk(wn)
        build = time.perf_counter() - t

    med = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
    print(f"\nImageNet-21K ({cold[0][3]} classes) against ImageNet-1K, preset imagenet-ood; {args.repeats} repeats, medians; {os.cpu_count()} CPUs")
    print(f"  cold (fresh process, wall)   {med(cold, 0):6.2f} s   [graph load {med(cold, 1):.2f} s incl. imports, rules {med(cold, 2):.2f} s]  goal <= 6 s")
    print(f"  warm (graph loaded)          {statistics.median(warm):6.2f} s   goal <= 1 s")
    print(f"  baseline: NLTK, 4 rules only {med(nltk, 0):6.2f} s   [WordNet load {med(nltk, 1):.2f} s, rules {med(nltk, 2):.2f} s]")
    print(f"  ratio cold / NLTK baseline   {med(cold, 0) / med(nltk, 0):6.2f}x  (all 11 rules vs 4)")
    print(f"  removed: toolkit {cold[0][4]} (any rule's remove or flag), NLTK baseline {nltk[0][4]} (4 rules)")
    if build is not None:
        print(f"  one-time graph cache build from NLTK (setup_wordnet): {build:.1f} s (plus NLTK's own load)")


if __name__ == "__main__":
    main()

"""The WordNet noun search a curator types into when mapping a folder (82,115 nouns): the class
search's index (pipelines/classes/search.py, what /api/wordnet-nouns answers with) against the
noun search it replaced (a loop over every synset's folded lemmas, kept below as it was) as the
baseline, in the same run. Prints per-query median and worst time in ms and the ratio.

    .venv/bin/python benchmarks/bench_class_search.py [--repeat 5]

Needs the WordNet copy under NLTK_DATA (var/nltk_data by default), as the web app does.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

QUERIES = ["a", "ca", "cat", "dog", "stripe", "espresso", "crossword", "sea anemone", "retr", "golden retriever", "n02123045",
           "2123045", "zz"]


def previous_search(graph, text: str, *, limit: int = 12) -> list[int]:
    """The noun search before the class search's rule (pipelines/classes/wordnet_graph.py until issue 31):
    a wnid itself, then exact lemmas, then lemma prefixes, then lemmas containing it."""
    from pipelines.classes.wordnet_graph import lemma_key

    q = lemma_key(text.strip())
    if not q:
        return []
    hits: list[int] = []
    if q.startswith("n") and q[1:].isdigit() and len(q) == 9:
        i = graph.index_of_wnid(q)
        if i is not None:
            hits.append(i)
    exact: list[int] = []
    starts: list[int] = []
    contains: list[int] = []
    for i in range(len(graph.lemmas)):
        keys = graph.lemma_keys(i)
        if q in keys:
            exact.append(i)
        elif len(starts) < limit and any(k.startswith(q) for k in keys):
            starts.append(i)
        elif len(contains) < limit and any(q in k for k in keys):
            contains.append(i)
    for i in exact + starts + contains:
        if i not in hits:
            hits.append(i)
    return hits[:limit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="times each query is run (default 5)")
    args = parser.parse_args()
    from pipelines.classes.search import ClassIndex, SearchEntry
    from pipelines.classes.wordnet_graph import load_noun_graph

    g = load_noun_graph(Path(os.environ.get("NLTK_DATA", REPO / "var" / "nltk_data")), build=False)
    for i in range(len(g.names)):
        g.lemma_keys(i)  # the baseline's own per-synset cache, warm as in a running web process
    t = time.perf_counter()
    index = ClassIndex(SearchEntry(g.label(i), tuple(x.replace("_", " ") for x in g.lemmas[i]), g.glosses[i], g.wnid(i), i)
                       for i in range(len(g.names)))
    print(f"{len(index)} nouns; index made once per process in {time.perf_counter() - t:.2f} s")
    runs = {"previous search (baseline)": lambda q: previous_search(g, q, limit=12), "class_search index": lambda q: index.search(q, limit=12)}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeat):
        for q in QUERIES:
            for name, fn in runs.items():
                t = time.perf_counter()
                fn(q)
                times[name].append((time.perf_counter() - t) * 1000)
    for name, ts in times.items():
        print(f"{name:26s} median {statistics.median(ts):7.1f} ms   worst {max(ts):7.1f} ms   ({len(ts)} queries)")
    base, new = (statistics.median(ts) for ts in times.values())
    print(f"median ratio baseline / index: {base / new:.1f}x")


if __name__ == "__main__":
    main()

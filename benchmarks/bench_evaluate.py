"""Wall time of the demo's evaluation run (every detector, efficientnet_lite0 on the CPU) cold
(no cached model outputs: 50 ID test + 550 ID fit + 115 OOD + 170 unit-test images through the
model, ODIN's extra passes on all but the fit set) and warm (a rerun: outputs cached, detectors,
metrics and plots only).

    .venv/bin/python benchmarks/bench_evaluate.py [--data /tmp/oodc_bench_eval]

Runs the demo (--no-serve) in a scratch data folder first when it has not been run there; then
empties that folder's evaluation cache and times `manage.py evaluate` twice, as a user would."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARGS = ["--export", "demo-clean", "--unit-tests", "demo-unit-tests", "--id-test", "source:demo-id-test",
        "--id-fit", "source:demo-id-fit"]


def manage(env, *args, check=True):
    return subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env, check=check, capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/tmp/oodc_bench_eval")
    a = ap.parse_args()
    data = Path(a.data)
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    env.update({"OODC_DATA_DIR": str(data), "NLTK_DATA": os.environ.get("NLTK_DATA", str(REPO / "var" / "nltk_data"))})
    if not (data / "exports" / "demo-clean" / "v1").is_dir():
        print(f"running the demo in {data} (once) ...", flush=True)
        manage(env, "migrate", "-v", "0")
        manage(env, "demo", "--no-serve")
    manage(env, "shell", "-c", "import shutil; from django.conf import settings; from curation.models import EvalFeatureSet; "
                                "EvalFeatureSet.objects.all().delete(); shutil.rmtree(settings.EVAL_ROOT / 'cache', ignore_errors=True)")
    for label in ("cold (outputs computed)", "warm (outputs cached)"):
        t = time.perf_counter()
        out = manage(env, "evaluate", *ARGS)
        wall = time.perf_counter() - t
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("evaluation #") or "evaluated" in ln]
        print(f"{label:<26} {wall:7.1f} s   {' | '.join(lines)}")


if __name__ == "__main__":
    main()

"""Wall time and peak memory of ``cube report``: the archived records, and a SYNTHETIC 2.5 M-record store.

    python benchmarks/report_scale.py [--fraction 1.0] [--dir DIR] [--skip-synthetic]

Each store is reported twice in one interleaved run, each time as a fresh process: ``cube report
STORE --out DIR`` (the whole job: analysis, every page executed, the site built) and, as the
floor it stands on, ``cube rescore STORE --json`` (reading and verifying every record, one
rescoring). Peak RSS is the largest of the process and its children (the page kernels), from
``resource.getrusage(RUSAGE_CHILDREN)`` of a wrapper per command. Targets (issue 43) on this
project's 2-core machine: the archived records in under 60 s; the synthetic store (``cube
simulate``, 18 models x 12,925 items x 11 cells) in under 3 min and 8 GB. On a shared machine
wall times are noisy: run it quiet, and read the ratio to the rescore floor, which shares the noise.
The numbers are timings of synthetic data, never results.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WRAPPER = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
wall = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
print(json.dumps({"rc": proc.returncode, "wall_s": wall, "peak_rss_mb": peak, "err": proc.stderr[-300:]}))
"""


def measure(argv: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", WRAPPER, *argv], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["rc"] != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {result['err']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=float, default=1.0, help="share of the synthetic items (1.0: 2.56 M records)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the synthetic store and the sites")
    parser.add_argument("--skip-synthetic", action="store_true")
    args = parser.parse_args()
    cube = [sys.executable, "-m", "cube"]
    with tempfile.TemporaryDirectory() as tmp:
        work = args.dir or Path(tmp)
        stores = {"archived records (data/records)": REPO / "data" / "records"}
        if not args.skip_synthetic:
            synthetic = work / "synthetic"
            if not (synthetic / "MANIFEST.json").is_file():
                subprocess.run([*cube, "simulate", str(synthetic), "--fraction", str(args.fraction)], check=True,
                               stdout=subprocess.DEVNULL)
            stores[f"synthetic store ({args.fraction:.0%})"] = synthetic
        rows = []
        for i, (name, store) in enumerate(stores.items()):
            floor = measure([*cube, "rescore", str(store), "--json"])
            report = measure([*cube, "report", str(store), "--out", str(work / f"site-{i}")])
            rows.append((name, report, floor))
        print(f"{'store':<34} {'report s':>9} {'peak MB':>8} {'rescore s':>10} {'ratio':>6}")
        for name, report, floor in rows:
            print(f"{name:<34} {report['wall_s']:>9.1f} {report['peak_rss_mb']:>8.0f} {floor['wall_s']:>10.1f} "
                  f"{report['wall_s'] / floor['wall_s']:>6.1f}")


if __name__ == "__main__":
    main()

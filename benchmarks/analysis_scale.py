"""Wall time and peak memory of the paper's full analysis on the SYNTHETIC cube, 10% to 100%.

    python benchmarks/analysis_scale.py [--fractions 0.1 0.5 1.0] [--B 1000] [--repeat 1]
                                        [--dir DIR]

For each fraction of the items, ``cube.analysis.simulate`` writes a synthetic store (18 models x items
x 11 cells; 2.56 M records at 100%), then a fresh child process runs the analysis on it and
reports its own wall time and peak RSS (``resource.getrusage``; a child per fraction because
peak RSS never goes down within a process):

1. load every record with sha256 verification and all schema/value checks;
2. the confirmation matrix against the frozen audit prediction, plus the partial-collision
   analysis;
3. rescoring of every cell at the subject, category and overall levels;
4. the footrule between the M1-seq ranking and the M6 rankings (strict and lenient extractor)
   with a B = 1000 noise floor, and one per-subject regression table.

Targets (issue 4): <= 60 s and <= 4 GB at 100%, growing linearly with the records. On a shared
machine wall times are noisy: ``--repeat N`` runs each analysis N times and keeps the fastest.
The numbers are timings of synthetic data, never results.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE = dict(scorer="M1-seq", label_set="L1_halfwidth", context="zh_cue", shots=0, order="original")


def analyse(directory: str, B: int) -> dict:
    from cube.analysis.confirm import confirm, model_families, partial_cells, tiebreak_effects
    from cube.analysis.paired_slices import regression_table
    from cube.analysis.ranking_shift import ranking_shift
    from cube.analysis.rescore import rescore
    from cube.analysis.slices import select
    from cube.analysis.simulate import DEFAULT_PREDICTION
    from cube.records.store import read_manifest, read_records
    from cube.tokenizers.audit import read_prediction

    stages: dict[str, float] = {}
    start = last = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal last
        now = time.perf_counter()
        stages[name] = now - last
        last = now

    table = read_records(directory, verify=True)
    lap("load+verify")
    report = confirm(table, read_prediction(DEFAULT_PREDICTION),
                     model_families(read_manifest(directory)))
    effects = tiebreak_effects(table, [c.observed for c in partial_cells(report)])
    lap("confirm")
    rows = sum(rescore(table, level).rows.num_rows for level in ("subject", "category", "overall"))
    lap("rescore")
    base = select(table, **BASE)
    strict = ranking_shift(base, select(table, scorer="M6-strict"), B=B, seed=0)
    lenient = ranking_shift(base, select(table, scorer="M6-lenient"), B=B, seed=0)
    models = sorted(set(base.column("model").to_pylist()))
    regression_table(select(base, model=models[0]), select(base, model=models[1]))
    lap("footrule+regression")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "records": table.num_rows,
        "wall_s": time.perf_counter() - start,
        "peak_rss_mb": usage.ru_maxrss / 1024.0,  # Linux reports KiB
        "stages": stages,
        "confirmed": f"{report.confirmed}/{report.predicted}",
        "partial_cells": len(effects),
        "result_rows": rows,
        "footrule_strict": [strict.observed, strict.multiple_of_mean, strict.multiple_of_p95],
        "footrule_lenient": [lenient.observed, lenient.multiple_of_mean, lenient.multiple_of_p95],
    }


def child(args: list[str]) -> dict:
    done = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True,
                          text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.5, 1.0])
    parser.add_argument("--B", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=1,
                        help="analyses per fraction; the fastest is reported (default: 1)")
    parser.add_argument("--dir", help="where to write the synthetic stores (default: a temp dir)")
    parser.add_argument("--_simulate", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--_analyse", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args._simulate:
        from cube.analysis.simulate import simulate

        out, fraction = args._simulate
        print(json.dumps(simulate(out, fraction=float(fraction))))
        return
    if args._analyse:
        print(json.dumps(analyse(args._analyse, args.B)))
        return

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        results = []
        for fraction in args.fractions:
            store = str(Path(tmp) / f"cube-{fraction:g}")
            t = time.perf_counter()
            child(["--_simulate", store, str(fraction)])
            simulated = time.perf_counter() - t
            runs = [child(["--_analyse", store, "--B", str(args.B)])
                    for _ in range(max(1, args.repeat))]
            result = min(runs, key=lambda r: r["wall_s"])
            result.update(fraction=fraction, simulate_s=simulated)
            results.append(result)
            stages = ", ".join(f"{k} {v:.1f}s" for k, v in result["stages"].items())
            print(f"{fraction:>5.0%}: {result['records']:>9,} records  "
                  f"wall {result['wall_s']:6.1f} s  peak RSS {result['peak_rss_mb']:7.0f} MB  "
                  f"({stages}; simulate {simulated:.1f}s)", flush=True)
        first = results[0]
        print("growth relative to the first fraction (linear = records ratio):")
        for r in results:
            print(f"  {r['fraction']:>5.0%}: records x{r['records'] / first['records']:.2f}  "
                  f"wall x{r['wall_s'] / first['wall_s']:.2f}  "
                  f"peak RSS x{r['peak_rss_mb'] / first['peak_rss_mb']:.2f}  "
                  f"wall per M records {r['wall_s'] / r['records'] * 1e6:.1f} s")
        last = results[-1]
        print(f"targets at {last['fraction']:.0%}: wall {last['wall_s']:.1f} s (<= 60), peak RSS "
              f"{last['peak_rss_mb'] / 1024:.2f} GB (<= 4); confirmation {last['confirmed']}; "
              f"footrule M1-seq vs M6-strict {last['footrule_strict'][0]:.3f} "
              f"(x{last['footrule_strict'][2]:.1f} of floor p95), vs M6-lenient "
              f"{last['footrule_lenient'][0]:.3f} (synthetic)")


if __name__ == "__main__":
    main()

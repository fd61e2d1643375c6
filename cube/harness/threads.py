"""How torch's worker threads wait, chosen once per process before torch loads, and logged.

torch's CPU build runs its parallel regions on GNU OpenMP, whose idle threads spin for about
300,000 iterations before they sleep. On a machine with a neighbour (another 2-thread job on
2 cores), a spinning thread holds the core its descheduled sibling needs to finish the same
region. Measured on Qwen2.5-Coder-0.5B, 10 CMMLU items x the full protocol, fp32, 2 threads,
packed tree (issue 24): beside a 2-thread fp32 matmul job the scoring took 40.3 s with the
default wait, 32.5 s with ``OMP_WAIT_POLICY=PASSIVE``, 30.5 s with ``GOMP_SPINCOUNT=20000`` and
29.3 s with 1000; on the quiet machine 16.3, 15.7, 15.8 and 16.4 s (within run-to-run noise).
So cube sets a short spin, unless the user set either variable, and says which in the run log.

It acts only where torch has not been imported yet: libgomp reads its environment when it loads.
"""

from __future__ import annotations

import os
import sys

WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
CUBE_SPINCOUNT = "20000"

_chosen: dict[str, str] | None = None


def choose_wait_policy() -> dict[str, str]:
    """Set cube's short spin where the user set no wait policy and torch is not loaded yet."""
    global _chosen
    if _chosen is not None:
        return dict(_chosen)
    given = {name: os.environ[name] for name in WAIT_VARIABLES if name in os.environ}
    if given:
        _chosen = {**given, "set_by": "user"}
    elif "torch" in sys.modules:
        _chosen = {"set_by": "nobody: torch was loaded before cube could choose (libgomp's default)"}
    else:
        os.environ["GOMP_SPINCOUNT"] = CUBE_SPINCOUNT
        _chosen = {"GOMP_SPINCOUNT": CUBE_SPINCOUNT, "set_by": "cube"}
    return dict(_chosen)


def thread_log() -> dict:
    """The run log's ``threads`` entry: torch's intra-op threads and how they wait."""
    entry: dict = {"wait": choose_wait_policy()}
    torch = sys.modules.get("torch")
    if torch is not None:
        entry["torch_threads"] = torch.get_num_threads()
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if name in os.environ:
            entry[name] = os.environ[name]
    return entry


__all__ = ["CUBE_SPINCOUNT", "WAIT_VARIABLES", "choose_wait_policy", "thread_log"]

"""cube chooses how torch's threads wait before torch loads, and never overrides the user."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CHILD = r'''
import json, os, sys
from cube.harness.threads import choose_wait_policy, thread_log
if sys.argv[1] == "torch-first":
    import torch
chosen = choose_wait_policy()
import torch
log = thread_log()
print(json.dumps({"chosen": chosen, "log": log, "env": os.environ.get("GOMP_SPINCOUNT")}))
'''


def child(mode: str, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True,
                         env={**clean, **env})
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_cube_sets_a_short_spin_before_torch_loads_and_logs_it():
    got = child("cube-first")
    assert got["chosen"] == {"GOMP_SPINCOUNT": "20000", "set_by": "cube"}
    assert got["env"] == "20000"  # in the process environment that libgomp reads when torch loads
    assert got["log"]["wait"] == got["chosen"] and got["log"]["torch_threads"] >= 1


@pytest.mark.parametrize("name,value", [("OMP_WAIT_POLICY", "ACTIVE"), ("GOMP_SPINCOUNT", "5")])
def test_a_users_own_wait_policy_is_kept(name, value):
    got = child("cube-first", **{name: value})
    assert got["chosen"] == {name: value, "set_by": "user"}
    assert got["env"] == (value if name == "GOMP_SPINCOUNT" else None)


def test_after_torch_loaded_nothing_is_claimed():
    got = child("torch-first")
    assert got["env"] is None and got["chosen"]["set_by"].startswith("nobody")

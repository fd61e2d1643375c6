"""``cube.protocol.data``: installing CMMLU and C-Eval from archives in their official layouts.

The CMMLU archive is built here, in a temp folder, from the shared real copy, exactly as the
upstream repository's archive lays it out (``CMMLU-<commit>/data/<split>/<subject>.csv``); it is
never committed. The C-Eval archive is built from the project's own small fixtures, laid out as
``ceval-exam.zip`` is (``<split>/<subject>_<split>.csv`` at the top).
"""

from __future__ import annotations

import io
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from cube.checksums import sha256_file
from cube.config import REPO_ROOT
from cube.errors import ChecksumError, ItemsError, SourceError
from cube.protocol import data
from cube.protocol.items import default_benchmark_root, load_ceval, load_cmmlu

CEVAL_FIXTURES = REPO_ROOT / "tests" / "fixtures" / "ceval"
COMMIT_DIR = "CMMLU-d6e7b716d8ac694f38969a6c0407437d1fded799/data"


def _zip_folder(folder: Path, out: Path, prefix: str = "", extra: dict[str, bytes] | None = None,
                replace: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(out, "w") as zf:
        for path in sorted(folder.rglob("*.csv")):
            rel = path.relative_to(folder).as_posix()
            body = (replace or {}).get(rel, path.read_bytes())
            zf.writestr(f"{prefix}{rel}", body)
        for name, body in (extra or {}).items():
            zf.writestr(name, body)
    return out


@pytest.fixture(scope="module")
def cmmlu_zip(benchmarks_root, tmp_path_factory) -> Path:
    return _zip_folder(benchmarks_root / "cmmlu", tmp_path_factory.mktemp("archive") / "cmmlu.zip",
                       prefix=f"{COMMIT_DIR}/", extra={"CMMLU-x/README.md": b"readme"})


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An empty data home, and no shared copy or CUBE_BENCHMARKS: a user's fresh machine."""
    monkeypatch.setenv("CUBE_DATA", str(tmp_path / "home"))
    monkeypatch.setenv("CUBE_SHARED_BENCHMARKS", str(tmp_path / "no-shared"))
    monkeypatch.delenv("CUBE_BENCHMARKS", raising=False)
    return tmp_path / "home"


def test_fetch_from_the_upstream_archive_layout_installs_what_the_loader_reads(cmmlu_zip, home, benchmarks_root):
    with pytest.raises(ItemsError, match="cube data fetch cmmlu"):
        default_benchmark_root("cmmlu")
    target = data.fetch("cmmlu", home, cmmlu_zip)
    assert target == home / "cmmlu" and default_benchmark_root("cmmlu") == target
    installed = load_cmmlu(splits=("dev", "test"))
    shared = load_cmmlu(benchmarks_root / "cmmlu", splits=("dev", "test"))
    assert [(i.uid, i.qhash, i.answer, i.subject_zh) for i in installed] == \
        [(i.uid, i.qhash, i.answer, i.subject_zh) for i in shared]
    assert len({i.subject for i in installed}) == 67 and len(installed) == 11_582 + 335
    manifest = data.installed_manifest(target)
    assert manifest["archive_sha256"] == sha256_file(cmmlu_zip)
    assert data.verify_installed(target) == 2 * 67 + 1  # every CSV and the subject map
    assert not list(home.glob(".fetch-*"))  # no staging folder left behind


def test_a_changed_item_in_the_archive_is_refused_and_nothing_is_installed(benchmarks_root, home, tmp_path):
    original = (benchmarks_root / "cmmlu" / "test" / "anatomy.csv").read_bytes()
    tampered = original[:-2] + (b"A" if original[-2:-1] != b"A" else b"B") + original[-1:]
    archive = _zip_folder(benchmarks_root / "cmmlu", tmp_path / "bad.zip", prefix=f"{COMMIT_DIR}/",
                          replace={"test/anatomy.csv": tampered})
    with pytest.raises(ChecksumError, match=r"test/anatomy\.csv has sha256"):
        data.fetch("cmmlu", home, archive)
    assert not (home / "cmmlu").exists() and not list(home.glob(".fetch-*"))


def test_an_archive_missing_a_subject_is_not_the_pinned_release(benchmarks_root, home, tmp_path):
    folder = tmp_path / "partial"
    shutil.copytree(benchmarks_root / "cmmlu", folder)
    (folder / "test" / "virology.csv").unlink()
    with pytest.raises(ChecksumError, match=r"missing test/virology\.csv"):
        data.fetch("cmmlu", home, folder)


def test_member_names_never_become_paths(benchmarks_root, home, tmp_path):
    """A '../' member is not read, let alone written outside the data home."""
    archive = _zip_folder(benchmarks_root / "cmmlu", tmp_path / "slip.zip", prefix=f"{COMMIT_DIR}/",
                          extra={"../../escaped.csv": b"x", "/abs/test/evil.csv": b"x"})
    data.fetch("cmmlu", home, archive)
    assert not (tmp_path / "escaped.csv").exists() and not Path("/abs").exists()
    assert sorted(p.name for p in (home / "cmmlu").iterdir()) == ["MANIFEST.json", "dev", "subjects.json", "test"]


def test_an_installed_file_edited_after_the_fetch_fails_the_load(cmmlu_zip, home):
    target = data.fetch("cmmlu", home, cmmlu_zip)
    path = target / "test" / "marketing.csv"
    body = path.read_bytes()
    path.write_bytes(body.replace(b",A\n", b",B\n", 1) if b",A\n" in body else body + b"\n")
    with pytest.raises(ChecksumError, match="marketing.csv: sha256"):
        load_cmmlu(subjects=["marketing"])
    with pytest.raises(ChecksumError, match="marketing.csv"):
        data.verify_installed(target)
    path.write_bytes(body)
    (target / "test" / "added.csv").write_bytes((target / "test" / "marketing.csv").read_bytes())
    with pytest.raises(ChecksumError, match="added.csv: not listed"):
        load_cmmlu()


def test_ceval_archive_in_the_official_layout_with_a_pinned_sha(home, tmp_path):
    archive = _zip_folder(CEVAL_FIXTURES, tmp_path / "ceval-exam.zip")
    with pytest.raises(ChecksumError, match="sha256 mismatch"):
        data.fetch("ceval", home, archive, sha256="0" * 64)
    target = data.fetch("ceval", home, archive, sha256=sha256_file(archive))
    assert (target / "subject_mapping.json").is_file()  # cube's shipped official map
    for split in ("dev", "val", "test"):
        got = load_ceval(splits=(split,))
        want = load_ceval(CEVAL_FIXTURES, splits=(split,))
        assert [(i.uid, i.qhash, i.answer) for i in got] == [(i.uid, i.qhash, i.answer) for i in want]
        assert {i.subject_zh for i in got} == {"计算机网络", "高中物理"}


def test_a_tar_archive_works_as_the_zip_does(home, tmp_path):
    archive = tmp_path / "ceval.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(CEVAL_FIXTURES, arcname="ceval-exam")
    target = data.fetch("ceval", home, archive)
    assert len(load_ceval(target, splits=("val",))) == len(load_ceval(CEVAL_FIXTURES, splits=("val",)))


def test_a_download_with_nothing_to_check_it_against_refuses_before_any_request(home, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("no request may be made")

    monkeypatch.setattr(data.urllib.request, "urlopen", no_network)
    with pytest.raises(ChecksumError, match="no sha256 is pinned"):
        data.fetch("ceval", home)


def test_the_download_streams_verifies_and_installs(cmmlu_zip, home, monkeypatch):
    """The real download code, fed the archive's bytes where the network would be."""
    class Response(io.BytesIO):
        headers = {"Content-Length": str(cmmlu_zip.stat().st_size)}

    seen = []

    def urlopen(request, timeout):
        seen.append(request.full_url)
        return Response(cmmlu_zip.read_bytes())

    monkeypatch.setattr(data.urllib.request, "urlopen", urlopen)
    target = data.fetch("cmmlu", home)
    assert seen == [data.release("cmmlu").url]
    assert data.installed_manifest(target)["source"] == seen[0]
    with pytest.raises(ChecksumError, match="sha256 mismatch"):
        data.fetch("cmmlu", home, sha256="f" * 64, force=True)
    assert data.verify_installed(target) == 135  # the failed re-fetch left the install alone


def test_an_unreachable_url_is_one_line_naming_the_way_out(home, tmp_path):
    with pytest.raises(SourceError, match=r"cannot download http.*--from FILE") as exc:
        data.download("https://cube-no-such-host.invalid/x.zip", tmp_path / "x.zip", None, "cmmlu")
    assert "\n" not in str(exc.value)
    with pytest.raises(SourceError, match="only https"):
        data.download("http://example.org/x.zip", tmp_path / "x.zip", None)


def test_lookup_order_explicit_then_env_then_home_then_shared(cmmlu_zip, home, benchmarks_root, monkeypatch, tmp_path):
    monkeypatch.setenv("CUBE_SHARED_BENCHMARKS", str(benchmarks_root))
    assert default_benchmark_root("cmmlu") == benchmarks_root / "cmmlu"
    data.fetch("cmmlu", home, cmmlu_zip)
    assert default_benchmark_root("cmmlu") == home / "cmmlu"
    monkeypatch.setenv("CUBE_BENCHMARKS", str(tmp_path / "elsewhere"))
    with pytest.raises(ItemsError, match="CUBE_BENCHMARKS"):  # set but empty: an error, not a fallback
        default_benchmark_root("cmmlu")
    assert default_benchmark_root("cmmlu", explicit=benchmarks_root / "cmmlu") == benchmarks_root / "cmmlu"
    with pytest.raises(ItemsError, match="does not exist"):
        default_benchmark_root("cmmlu", explicit=tmp_path / "nope")


def test_cli_fetch_list_and_bad_input(cmmlu_zip, home, capsys):
    from cube.cli import main

    assert main(["data", "fetch", "mmlu"]) == 2
    assert "unknown benchmark 'mmlu'" in capsys.readouterr().err
    assert main(["data", "fetch", "cmmlu", "--from", str(home / "missing.zip")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["data", "fetch", "cmmlu", "--from", str(cmmlu_zip), "--sha256", "xyz"]) == 2
    assert "'xyz' is not 64" in capsys.readouterr().err
    assert main(["data", "fetch", "cmmlu", "--from", str(cmmlu_zip)]) == 0
    assert "135 files verified" in capsys.readouterr().err
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    assert f"cmmlu: {home / 'cmmlu'} (installed by cube data fetch" in out
    assert "ceval: not found (get it with `cube data fetch ceval`)" in out
    assert main(["data", "verify", "cmmlu"]) == 0


# ---- hostile archives and full disks (issue 22, section 3) -------------------------------------


def test_declared_sizes_are_checked_before_any_member_is_read(tmp_path):
    """A 1 MB zip of 4 x 255 MiB zeros in CMMLU's layout reached 1.35 GB of memory before the
    per-file bound refused it. Now its declared sizes refuse it: the fetch (a subprocess, so that
    its peak memory is its own) stays far below one member's size."""
    import subprocess
    import sys

    archive = tmp_path / "bomb.zip"
    block = bytes(1 << 20)
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name in ("dev/a.csv", "dev/b.csv", "test/a.csv", "test/b.csv"):
            with zf.open(name, "w") as fh:
                for _ in range(255):
                    fh.write(block)
    assert archive.stat().st_size < 2 << 20
    # VmHWM is this process image's own peak: ru_maxrss would carry over the forking pytest
    # process's peak across exec (gigabytes late in a full run), whatever the fetch used
    script = ("import re, sys\nfrom cube.cli import main\n"
              f"code = main(['data', 'fetch', 'cmmlu', '--from', {str(archive)!r}])\n"
              "status = open('/proc/self/status').read()\n"
              "print(re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1))\nsys.exit(code)\n")
    env = {**__import__("os").environ, "CUBE_DATA": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("cube: error: ")
    assert "declare 1,069,547,520 bytes together, more than 256 MiB" in proc.stderr
    peak_mib = int(proc.stdout.split()[-1]) >> 10
    assert peak_mib < 200, f"the refused fetch peaked at {peak_mib} MiB"
    assert not (tmp_path / "home" / "cmmlu").exists()


def test_one_member_declaring_more_than_the_bound_is_named(tmp_path):
    archive = tmp_path / "big.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("dev/a.csv", b"q,A,B,C,D,Answer\n")
        with zf.open("test/a.csv", "w") as fh:
            for _ in range(257):
                fh.write(bytes(1 << 20))
    with pytest.raises(SourceError, match=r"test/a\.csv declares 269,484,032 bytes, more than 256 MiB"):
        data.fetch("cmmlu", tmp_path / "home", archive)


def test_a_full_disk_during_a_fetch_is_one_line_and_leaves_nothing(cmmlu_zip, full_disk, capsys, monkeypatch):
    from cube.cli import main

    monkeypatch.setenv("CUBE_DATA", str(full_disk))
    assert main(["data", "fetch", "cmmlu", "--from", str(cmmlu_zip)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cube: error: cannot install cmmlu into"), err
    assert "No space left on device" in err[0]
    assert list(full_disk.iterdir()) == [], "the temp folder of the fetch was left behind"


# ---- make test gets its own data (issue 23, section 1) -----------------------------------------


def _refused_proxy() -> str:
    """An https proxy on a local port nothing listens on: every download is refused at once, as on
    a machine whose network does not reach the release (a real connection, no patched urlopen)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# The environment of the outer run that would change what ``make test-data`` finds or does.
ISOLATED_FROM_THE_SUITE = ("CMMLU_FROM", "CUBE_DATA", "CUBE_BENCHMARKS", "CUBE_SHARED_BENCHMARKS",
                           "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "no_proxy", "NO_PROXY")


def _make_test_data(tmp_path: Path, **env: str):
    """``make test-data`` (the step ``make test`` runs first) as on a clone with no shared copy:
    an empty data home, no CUBE_BENCHMARKS, downloads refused; the venv running this test stands
    for the one ``make`` installs (``-o`` keeps make from reinstalling it). Nothing of how the
    suite itself was started leaks in: ``make test CMMLU_FROM=...`` exports CMMLU_FROM to this
    process, and a user's CUBE_DATA or CUBE_BENCHMARKS would find a copy; only ``env`` sets them."""
    import os
    import subprocess
    import sys
    import time

    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "cube").is_file() or shutil.which("make") is None:
        pytest.skip("needs make and the cube entry point beside this interpreter")
    base = {k: v for k, v in os.environ.items()
            if k not in ISOLATED_FROM_THE_SUITE}
    proxy = _refused_proxy()
    base.update(CUBE_DATA=str(tmp_path / "home"), CUBE_SHARED_BENCHMARKS=str(tmp_path / "no-shared"),
                https_proxy=proxy, HTTPS_PROXY=proxy, **env)
    start = time.monotonic()
    proc = subprocess.run(["make", "-s", "-o", ".venv/.installed", f"BIN={bin_dir}", "test-data"],
                          cwd=REPO_ROOT, env=base, capture_output=True, text=True, timeout=300)
    return proc, time.monotonic() - start


def test_make_test_fetches_cmmlu_from_a_local_archive_where_none_is_found(cmmlu_zip, tmp_path, benchmarks_root):
    proc, _ = _make_test_data(tmp_path, CMMLU_FROM=str(cmmlu_zip))
    assert proc.returncode == 0, proc.stderr
    assert "135 files verified and installed" in proc.stderr
    installed = tmp_path / "home" / "cmmlu"
    assert data.verify_installed(installed) == 135
    got = load_cmmlu(installed, splits=("dev", "test"))
    assert [i.qhash for i in got] == [i.qhash for i in load_cmmlu(benchmarks_root / "cmmlu", splits=("dev", "test"))]
    proc, _ = _make_test_data(tmp_path)  # found now: nothing fetched, nothing hashed
    assert proc.returncode == 0 and proc.stderr.strip() == f"cmmlu: found in {installed}; nothing to fetch"


def test_make_test_without_cmmlu_and_no_network_stops_at_once_with_one_line(tmp_path, monkeypatch):
    # The suite started the user's way, `make test CMMLU_FROM=...` with a data home of their own:
    # none of it reaches the inner make, which sees a machine without cmmlu.
    (tmp_path / "outer-copy").mkdir()
    monkeypatch.setenv("CMMLU_FROM", str(tmp_path / "outer-copy"))
    monkeypatch.setenv("CUBE_DATA", str(tmp_path / "outer-home"))
    proc, _ = _make_test_data(tmp_path)
    assert proc.returncode != 0  # at once: the refused proxy fails the first request, no retries
    lines = proc.stderr.strip().splitlines()
    ours = [line for line in lines if not line.startswith("make: ***")]  # make's own trailer aside
    assert len(ours) == 1 and ours[0].startswith("cube: error: cmmlu is not on this machine"), proc.stderr
    assert "`cube data fetch cmmlu --from FILE`" in ours[0] and "CUBE_BENCHMARKS=DIR" in ours[0]
    assert not (tmp_path / "home" / "cmmlu").exists() and "Traceback" not in proc.stderr
    # CUBE_BENCHMARKS is an instruction: set without cmmlu, fetching into the data home would not help
    (tmp_path / "mine").mkdir()
    proc, _ = _make_test_data(tmp_path, CUBE_BENCHMARKS=str(tmp_path / "mine"))
    ours = [line for line in proc.stderr.strip().splitlines() if not line.startswith("make: ***")]
    assert proc.returncode != 0
    assert ours == [f"cube: error: CUBE_BENCHMARKS={tmp_path / 'mine'} has no cmmlu/ folder; point it at a "
                    "folder that holds one, or unset it to fetch cmmlu into the data home"]

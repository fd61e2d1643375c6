"""The release bundle: scrubbed records, the frozen prediction, checksums and what a reader needs.

A bundle lets anyone re-score every protocol slice without a model and without us redistributing
C-Eval or CMMLU, whose licences (CC BY-NC-SA 4.0) forbid it. Records carry an item's ``uid`` and
``qhash`` only; the one free-text column (a generation) may quote the item, so it is scrubbed
against the record's own item, and the scrubbed records must then pass the leakage audit against
every item before anything is written (a model may quote another item, which the scrub cannot
know to remove). Scrub and audit apply their rules to the normal form and to the text as written
(the raw form: a LaTeX option the normal form shortens below its minimum is still an option;
``cube.records.leakage``). Layout of ``BUNDLE/``::

    records/                      scrubbed Parquet shards + their MANIFEST.json (cube.records.store)
    runs/<model>.runlog.jsonl     each model's run log (versions, run times) where present; kept
                                  outside records/ because the bundle repacks the shards, and a
                                  store's run log vouches for the shard names it wrote
    predictions/audit_frozen.json the pre-registered tokenizer audit
    MANIFEST.json                 schema, models + source hashes, protocols, item counts, licences
    CLAIMS.md                     each claim of the paper -> notebook + command
    CITATION.cff, README.md
    SHA256SUMS                    ``sha256sum`` format over every other file

The bundle is built in a temp folder beside the target and renamed into place, as is
``BUNDLE.tar.gz``, so an interrupted build leaves neither half-written. Folder and tarball are one
unit: the two renames run with SIGINT, SIGTERM and SIGHUP held back (a rename that fails puts the
previous pair back), so a signal leaves both new or both old; only SIGKILL can stop a build
between them, and then ``verify_bundle`` says that the folder and the tarball are not one build
(their SHA256SUMS differ) and which is the older, and the next build (under an exclusive lock on
the folder they live in) removes what the killed one left (``.BUNDLE.*.tmp``, ``.BUNDLE.*.old``).
``verify_bundle`` re-checks every checksum, the records' own manifest, the bundle manifest's
counts and flags against the records, the prediction's content hash and, given the items, the
leakage audit.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from cube import __version__
from cube.checksums import parse_sums, sha256_file, sums_text
from cube.errors import CubeError, RecordsError, WriteError
from cube.files import read_json
from cube.models_config import ModelsConfig
from cube.protocol.items import Item
from cube.records import leakage
from cube.records.leakage.tables import (
    ScrubStats,
    audit_parquet,
    audit_table,
    describe_hit,
    open_parquet,
    parquet_files,
    scrub_records,
)
from cube.records.schema import RUNLOG_NAME, SCHEMA_VERSION  # RUNLOG_NAME: the harness's per-model run log
from cube.records.store import protocols
from cube.release.claims import claims, claims_checklist
from cube.release.layout import (  # noqa: F401 (re-exported)
    BUNDLE_SCHEMA,
    MANIFEST_NAME,
    PREDICTION_PATH,
    RECORDS_DIR,
    RUNS_DIR,
    SUMS_NAME,
)
from cube.release.manifest import (  # noqa: F401 (re-exported)
    BENCHMARK_LICENCES,
    check_manifest,
    item_counts,
    manifest_problems,
    model_sources,
)
from cube.release.texts import bundle_readme, citation_cff
from cube.release.uids import ESCAPE_RULE, release_ids, released_uid


def __getattr__(name: str) -> Any:
    """``CLAIMS``, once a hand-written list, is now read from the book's plan when asked for."""
    if name == "CLAIMS":
        from cube.paper.plan import load_plan

        return claims(load_plan())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def bundle_files(root: Path) -> list[str]:
    """Every file below ``root`` except SHA256SUMS, as sorted POSIX paths relative to it."""
    return sorted(p.relative_to(root).as_posix() for p in Path(root).rglob("*")
                  if p.is_file() and p.relative_to(root).as_posix() != SUMS_NAME)


def sha256sums(root: Path) -> str:
    """The bundle's SHA256SUMS text, so that ``sha256sum -c`` checks it too."""
    return sums_text({name: sha256_file(root / name) for name in bundle_files(root)})


def parse_sha256sums(text: str) -> tuple[dict[str, str], list[str]]:
    """(path -> sha256, problems); a malformed or unsafe line is a problem, not an exception."""
    return parse_sums(text, SUMS_NAME)


# --------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildResult:
    bundle: Path
    tarball: Path
    n_records: int
    n_files: int
    scrub: ScrubStats
    n_items_audited: int
    incomplete: list[str] = field(default_factory=list)  # built with allow_incomplete: the cells short


def tarball_path(bundle: Path) -> Path:
    return bundle.with_name(bundle.name + ".tar.gz")


def build_bundle(
    records: str | Path,
    out: str | Path,
    items: Sequence[Item],
    prediction: str | Path,
    *,
    force: bool = False,
    index: leakage.LeakageIndex | None = None,
    models_config: ModelsConfig | None = None,
    plan: Sequence[Any] | None = None,
    allow_incomplete: bool = False,
    licences: Mapping[str, Mapping[str, str]] | None = None,
) -> BuildResult:
    """Scrub, audit and package a records store as ``out/`` and ``out.tar.gz``.

    ``items`` are the benchmark items the records were made on (CMMLU dev + test): each record is
    scrubbed against its own item, then the scrubbed records are audited against all of them,
    and any hit refuses the build before a file is written (``index``: one already built from
    ``items``, to save its seconds). The bundle is assembled in a temp
    folder beside ``out`` and renamed into place; on any failure (or Ctrl-C) the temp folder and
    the temp tarball are removed, so no partial bundle is ever left behind. A store with a cell
    short of what its configuration promises (a killed run) is refused unless ``allow_incomplete``.
    ``licences``: the licence notes of benchmarks the registry does not hold (a user's file: its
    card's licence and source), listed beside the registered ones, so that a bundle of a user's
    records names that benchmark's terms, not only CMMLU's and C-Eval's.
    """
    from cube.analysis.confirm import model_families
    from cube.paper.plan import load_plan
    from cube.records.store import check_items, read_manifest, read_records, unfinished_cells
    from cube.tokenizers.audit import read_prediction

    records, out = Path(records), Path(out)
    tarball = tarball_path(out)
    for target in (out, tarball):
        if target.exists() and not force:
            raise CubeError(f"{target} already exists; remove it or pass --force to replace it")
    if out.resolve() == records.resolve() or records.resolve() in out.resolve().parents:
        raise CubeError(f"--out {out} is inside the records {records}; write the bundle elsewhere")

    doc = read_prediction(Path(prediction))
    records_manifest = read_manifest(records)
    table = read_records(records, verify=True, progress=sys.stderr.isatty(), allow_incomplete=allow_incomplete)
    # The repacked records lose the cell configurations that tell a reader a cell is short, so the
    # lines say it instead, in the bundle's manifest and README and in the records' own manifest.
    incomplete = unfinished_cells(records_manifest)
    by_uid = {item.uid: item for item in items}
    known = pc.is_in(table.column("uid"), value_set=pa.array(list(by_uid), type=pa.string()))
    check_items(table.filter(known), {u: i.qhash for u, i in by_uid.items()}, str(records))

    scrubbed, stats = scrub_records(table, by_uid)
    scrubbed, escapes = release_ids(scrubbed)  # a user's string ids and Chinese subjects: escaped, mapped back
    index = index if index is not None else leakage.build_index(items)
    hits = audit_table(scrubbed, index)
    if hits:
        raise RecordsError(
            f"{records}: refusing to build: the leakage audit finds {len(hits)} hit(s) in the "
            f"scrubbed records (first: {describe_hit(hits[0])}); they quote an item the own-item "
            "scrub does not remove; `cube release audit` lists them all"
        )

    plan = plan if plan is not None else load_plan()
    metadata = records_manifest.get("metadata") or {}
    families = model_families(records_manifest)
    manifest = {
        "bundle_schema": BUNDLE_SCHEMA,
        "records_schema": SCHEMA_VERSION,
        "cube_version": __version__,
        "synthetic": bool(records_manifest.get("synthetic")),
        "n_records": table.num_rows,
        "models": model_sources(pc.unique(table.column("model")).to_pylist(), models_config,
                                doc, families),
        "protocols": protocols(table),
        "items": item_counts(scrubbed),
        "benchmark_licences": {**BENCHMARK_LICENCES, **{k: dict(v) for k, v in (licences or {}).items()}},
        "records_carry": "uid + qhash only (sha256 of the question, 16 hex digits); "
                         "no question or option text",
        "prediction": {"path": PREDICTION_PATH, "content_sha256": doc["content_sha256"]},
        "scrub": asdict(stats) | {"marker": leakage.MARKER},
        "leakage_audit": {"items": " + ".join(sorted({f"{i.benchmark} {i.split}" for i in items})),
                          "n_items": index.n_items,
                          "thresholds": index.thresholds(), "hits": 0},
    }
    if escapes:
        manifest["uid_form"] = ESCAPE_RULE
        manifest["uid_escapes"] = escapes
    if metadata:
        manifest["records_metadata"] = metadata
    if incomplete:
        manifest["incomplete"] = incomplete
    texts, meta_hits = leakage.audit_metadata(manifest, index)  # records_metadata: an import's configs
    if meta_hits:
        hit = meta_hits[0]
        raise RecordsError(
            f"{records}: refusing to build: the leakage audit finds {len(meta_hits)} hit(s) in the metadata "
            f"{MANIFEST_NAME} would carry (first: a {hit.kind}{f', {hit.encoding}' if hit.encoding else ''} at "
            f"offset {hit.offset} of a {len(texts[hit.text])}-character string, item {hit.item_uid}); the records' "
            f"metadata quotes the benchmark (an imported config?)"
        )

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(f"cannot create {out.parent}: {exc.strerror or exc}") from None
    with _build_lock(out):
        _clean_leftovers(out)
        return _write_bundle(out, tarball, records, prediction, plan, records_manifest, metadata,
                             manifest, scrubbed, stats, table.num_rows, index.n_items, incomplete)


def _write_bundle(out: Path, tarball: Path, records: Path, prediction: str | Path, plan: Sequence[Any],
                  records_manifest: Mapping[str, Any], metadata: Mapping[str, Any],
                  manifest: Mapping[str, Any], scrubbed: pa.Table, stats: ScrubStats, n_records: int,
                  n_items: int, incomplete: Sequence[str] = ()) -> BuildResult:
    """Stage every file, then swap folder and tarball into place as one unit (see the module)."""
    from cube.config import REPO_ROOT
    from cube.records.store import write_records

    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    tar_tmp: Path | None = None
    try:
        write_records(staging / RECORDS_DIR, scrubbed, synthetic=bool(records_manifest.get("synthetic")),
                      metadata=metadata, incomplete=incomplete)
        (staging / RECORDS_DIR / ".manifest.lock").unlink(missing_ok=True)
        for runlog in sorted(records.glob(f"*/{RUNLOG_NAME}")):  # how each model's run went
            _write(staging / RUNS_DIR / f"{runlog.parent.name}.{RUNLOG_NAME}", runlog.read_bytes())
        _write(staging / PREDICTION_PATH, Path(prediction).read_bytes())
        _write(staging / MANIFEST_NAME,
               (json.dumps(manifest, ensure_ascii=False, indent=1, sort_keys=True) + "\n").encode())
        _write(staging / "CLAIMS.md", claims_checklist(plan, REPO_ROOT).encode())
        _write(staging / "CITATION.cff", citation_cff().encode())
        # rendered from the manifest as MANIFEST.json holds it (sorted keys), so verify can re-render it
        _write(staging / "README.md", bundle_readme(json.loads(json.dumps(manifest, sort_keys=True))).encode())
        _write(staging / SUMS_NAME, sha256sums(staging).encode())
        n_files = len(bundle_files(staging)) + 1

        fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{tarball.name}.", suffix=".tmp")
        tar_tmp = Path(name)
        with os.fdopen(fd, "wb") as fh:
            write_tarball(staging, out.name, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tar_tmp, 0o644)
        os.chmod(staging, 0o755)
        with _signals_held():
            _swap_into_place(staging, tar_tmp, out, tarball)
        staging = tar_tmp = None  # now the bundle itself: never cleaned up from here on
    except OSError as exc:  # a full disk above all: one line; the finally removes the temp files
        raise WriteError(f"cannot write the bundle {out}: {exc.strerror or exc}; nothing was replaced") from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if tar_tmp is not None:
            tar_tmp.unlink(missing_ok=True)
    return BuildResult(out, tarball, n_records, n_files, stats, n_items, list(incomplete))


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _swap_into_place(staging: Path, tar_tmp: Path, out: Path, tarball: Path) -> None:
    """Rename ``staging`` to ``out`` and ``tar_tmp`` to ``tarball``: both, or (on an error) neither.

    An existing ``out`` (``--force``) is moved aside first, replaced rather than merged, and put
    back if either rename fails; the tarball's rename is the commit point.
    """
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
        os.rename(out, old / "bundle")
    try:
        os.rename(staging, out)
        try:
            os.replace(tar_tmp, tarball)
        except BaseException:
            os.rename(out, staging)  # the new folder back to its temp name, removed by the caller
            raise
    except BaseException:
        if old is not None:
            os.rename(old / "bundle", out)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP until the block ends, then act on the first that came.

    The block is a few renames: a ``kill`` (or Ctrl-C) in it left ``bundle/`` new beside
    ``bundle.tar.gz`` old, each of which verified on its own. Only the main thread can set
    handlers; elsewhere the block runs unguarded (and verify still tells a mixed pair).
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
    previous = {sig: signal.signal(sig, lambda number, frame: caught.append(number)) for sig in held}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if caught:
            signal.raise_signal(caught[0])  # as if it came now: SIGTERM ends the process, SIGINT raises


@contextlib.contextmanager
def _build_lock(out: Path) -> Iterator[None]:
    """An exclusive lock on the folder that holds ``out``, for the whole write of a bundle.

    A build removes the temp files a killed build left beside ``out``; without the lock it could
    remove those of a build running now. The lock is on the folder itself (no lock file is left
    behind) and goes with the process, however it ends.
    """
    import fcntl

    fd = os.open(out.parent, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CubeError(f"another `cube release build` is writing into {out.parent}; wait for it to "
                            "finish") from None
        yield
    finally:
        os.close(fd)


def leftovers(out: Path) -> list[Path]:
    """What killed builds of ``out`` left beside it: temp folders and tarballs, and moved-aside bundles."""
    import glob

    out = Path(out)
    prefix = glob.escape(f".{out.name}.")
    return sorted({*out.parent.glob(prefix + "*.tmp"), *out.parent.glob(prefix + "*.old")})


def _clean_leftovers(out: Path) -> None:
    """Remove what killed builds left; first put a moved-aside bundle back where none is in place.

    A build killed between moving the old folder aside and renaming the new one in leaves no
    ``out`` at all: the old folder (``.out.*.old/bundle``) is the one that matches the old tarball.
    """
    found = leftovers(out)
    if not out.exists():
        moved = [p / "bundle" for p in found if p.suffix == ".old" and (p / "bundle").is_dir()]
        if moved:
            os.rename(max(moved, key=lambda p: p.stat().st_mtime), out)
    for path in found:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def write_tarball(root: Path, arcname: str, fh) -> None:
    """A reproducible .tar.gz of ``root`` under ``arcname/``: sorted, zero mtimes and owners."""
    with gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = sorted(Path(root).rglob("*"), key=lambda p: p.relative_to(root).as_posix())
        for path in [Path(root), *paths]:
            rel = path.relative_to(root).as_posix()
            info = tarfile.TarInfo(arcname if rel == "." else f"{arcname}/{rel}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.mode, info.size = 0o644, path.stat().st_size
                with path.open("rb") as data:
                    tar.addfile(info, data)


# --------------------------------------------------------------------------------------------
# Verify
# --------------------------------------------------------------------------------------------


@dataclass
class VerifyReport:
    bundle: Path
    n_files: int = 0
    n_records: int | None = None
    n_items_audited: int | None = None
    problems: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)  # the records' own mark (a --allow-incomplete build)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_bundle(
    bundle: str | Path,
    items: Sequence[Item] | None = None,
    index: leakage.LeakageIndex | None = None,
) -> VerifyReport:
    """Re-check a bundle folder or ``.tar.gz``: every checksum, the records, the prediction and,
    given ``items``, the leakage audit. Each problem is one line naming the file."""
    bundle = Path(bundle)
    if bundle.is_file() and bundle.name.endswith((".tar.gz", ".tgz")):
        with tempfile.TemporaryDirectory(prefix="cube-verify-") as tmp:
            root = _extract(bundle, Path(tmp))
            report = _verify_folder(root, items, index)
            report.problems = [p.replace(str(root), str(bundle)) for p in report.problems]
            report.bundle = bundle
            folder = bundle.with_name(bundle.name.removesuffix(".tar.gz").removesuffix(".tgz"))
            if (folder / SUMS_NAME).is_file():
                report.problems += _pair_problems(folder, bundle, (root / SUMS_NAME).read_bytes())
            return report
    if not bundle.is_dir():
        moved = [p / "bundle" for p in leftovers(bundle) if p.suffix == ".old" and (p / "bundle").is_dir()]
        if moved:  # a build killed (SIGKILL) between moving the old folder aside and renaming the new in
            old = max(moved, key=lambda p: p.stat().st_mtime)
            raise CubeError(f"bundle not found: {bundle}; a killed `cube release build --force` left the previous "
                            f"bundle at {old}: move it back (mv {old} {bundle}) or run the build again, which "
                            "puts it back first")
        raise CubeError(f"bundle not found: {bundle} (a bundle folder or its .tar.gz)")
    report = _verify_folder(bundle, items, index)
    tarball = tarball_path(bundle)
    if tarball.is_file() and (bundle / SUMS_NAME).is_file():
        report.problems += _pair_problems(bundle, tarball, _tarball_sums(tarball))
    return report


def _tarball_sums(tarball: Path) -> bytes | None:
    """The tarball's ``<top>/SHA256SUMS``, read as a stream (it is among the first members)."""
    try:
        with tarfile.open(tarball, "r|gz") as tar:
            for member in tar:
                parts = member.name.split("/")
                if len(parts) == 2 and parts[1] == SUMS_NAME and member.isfile():
                    fh = tar.extractfile(member)
                    return fh.read(64 << 20) if fh is not None else None
    except (tarfile.TarError, OSError, EOFError, gzip.BadGzipFile):
        return None
    return None


def _pair_problems(folder: Path, tarball: Path, tar_sums: bytes | None) -> list[str]:
    """One problem if the folder and the tarball beside it are not one build.

    Each build's SHA256SUMS covers all of its files, so equal SHA256SUMS mean equal contents; a
    killed ``release build --force`` left the new folder beside the old tarball, each valid.
    Which is older comes from the files' modification times (the folder's SHA256SUMS is written
    just before its tarball), so it is a hint, not proof.
    """
    from cube.checksums import sha256_bytes

    if tar_sums is None:
        return [f"{tarball}: not a readable bundle tarball, although it lies beside the bundle {folder}"]
    folder_sums = (folder / SUMS_NAME).read_bytes()
    if folder_sums == tar_sums:
        return []
    stale = tarball if tarball.stat().st_mtime < (folder / SUMS_NAME).stat().st_mtime else folder
    return [f"{folder} and {tarball} are not one build: their {SUMS_NAME} differ (sha256 "
            f"{sha256_bytes(folder_sums)[:12]}… and {sha256_bytes(tar_sums)[:12]}…); {stale} is the older "
            "(a killed `cube release build --force`?); build both again with --force"]


def _extract(tarball: Path, dest: Path) -> Path:
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            tops = {name.split("/", 1)[0] for name in tar.getnames()}
            if len(tops) != 1:
                raise CubeError(f"{tarball}: expected one top-level folder, found {len(tops)}")
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError, EOFError, gzip.BadGzipFile) as exc:
        raise CubeError(f"{tarball}: not a readable .tar.gz ({exc})") from None
    return dest / tops.pop()


def _verify_folder(root: Path, items: Sequence[Item] | None, index) -> VerifyReport:
    from cube.records.store import check_items, read_manifest, read_records, unfinished_cells
    from cube.tokenizers.audit import read_prediction

    report = VerifyReport(root)
    sums = root / SUMS_NAME
    if not sums.is_file():
        raise CubeError(f"{root}: no {SUMS_NAME}; not a release bundle")
    listed, report.problems = parse_sha256sums(sums.read_text(encoding="utf-8", errors="replace"))
    on_disk = set(bundle_files(root))
    for name, digest in tqdm(sorted(listed.items()), desc="sha256", unit="file", disable=None):
        path = root / name
        if name not in on_disk:
            report.problems.append(f"{path}: listed in {SUMS_NAME} but missing")
        elif sha256_file(path) != digest:
            report.problems.append(f"{path}: sha256 does not match {SUMS_NAME} (file changed)")
    for name in sorted(on_disk - set(listed)):
        report.problems.append(f"{root / name}: not listed in {SUMS_NAME}")
    report.n_files = len(listed)
    if report.problems:  # the deeper checks would only restate a changed file
        return report

    for check in (lambda: check_manifest(root / MANIFEST_NAME),
                  lambda: read_prediction(root / PREDICTION_PATH)):
        try:
            check()
        except CubeError as exc:
            report.problems.append(str(exc))
    try:
        # an incomplete bundle is still checked in full; the caller says it is incomplete
        table = read_records(root / RECORDS_DIR, verify=True, allow_incomplete=True)
        report.n_records = table.num_rows
        report.incomplete = unfinished_cells(read_manifest(root / RECORDS_DIR))
    except CubeError as exc:
        report.problems.append(str(exc))
        return report
    report.problems += manifest_problems(root, table)
    if items is None:
        return report

    by_uid = {released_uid(item.uid): item.qhash for item in items}  # as the build released them
    known = pc.is_in(table.column("uid"), value_set=pa.array(list(by_uid), type=pa.string()))
    try:
        check_items(table.filter(known), by_uid, str(root / RECORDS_DIR))
    except CubeError as exc:
        report.problems.append(str(exc))
    index = index if index is not None else leakage.build_index(items)
    report.n_items_audited = index.n_items
    for path in parquet_files(root / RECORDS_DIR):
        parquet, columns = open_parquet(path)
        for hit in audit_parquet(parquet, columns, index, str(path)):
            report.problems.append(f"{path}:{hit.row}: leak {describe_hit(hit)}")
    # the manifests' free text (an import's logged configs) is audited as a generation is
    for path in (root / MANIFEST_NAME, root / RECORDS_DIR / MANIFEST_NAME):
        try:
            texts, hits = leakage.audit_metadata(read_json(path, CubeError, "manifest"), index)
        except CubeError as exc:
            report.problems.append(str(exc))
            continue
        for hit in hits:
            encoded = f" encoding={hit.encoding}" if hit.encoding else ""
            report.problems.append(f"{path}: leak in string {hit.text} ({len(texts[hit.text])} characters) "
                                   f"offset={hit.offset} chars={hit.n_chars} kind={hit.kind}{encoded} "
                                   f"item={hit.item_uid}")
    return report



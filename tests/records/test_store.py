"""The records store: round trip, manifest, and one clear error per kind of bad store."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cube.checksums import sha256_file
from cube.errors import RecordsError
from cube.protocol.items import load_cmmlu
from cube.records.schema import RECORD_SCHEMA, SCHEMA_METADATA_KEY, SCHEMA_VERSION
from cube.records.store import (
    MANIFEST_NAME,
    conform,
    from_columns,
    group_ids,
    read_manifest,
    read_records,
    write_records,
    write_shard,
)
from tests.record_tables import record, scores_for, table


def small(model: str = "m1", n: int = 4, scorer: str = "M1-seq") -> pa.Table:
    """``n`` records, every third one wrong."""
    preds = [(i + 1) % 4 if i % 3 == 0 else i % 4 for i in range(n)]
    return table(
        record(model=model, uid=f"cmmlu/agronomy/test/{i}", scorer=scorer, gold=i % 4,
               pred=pred, scores=scores_for(pred))
        for i, pred in enumerate(preds)
    )


def rows_sorted(t: pa.Table) -> list[dict]:
    return sorted(t.to_pylist(), key=lambda r: (r["model"], r["uid"], r["scorer"]))


def write_raw(store, name: str, data: pa.Table, version: str = SCHEMA_VERSION) -> None:
    """Write a shard bypassing write_records' checks, and list it in the manifest."""
    path = store / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data.replace_schema_metadata({SCHEMA_METADATA_KEY: version.encode()}), path)
    manifest_path = store / MANIFEST_NAME
    manifest = (json.loads(manifest_path.read_text()) if manifest_path.exists()
                else {"schema_version": SCHEMA_VERSION, "files": {}})
    manifest["files"][name] = {"sha256": sha256_file(path), "rows": data.num_rows}
    manifest_path.write_text(json.dumps(manifest))


# --- round trip ---------------------------------------------------------------------------------


def test_round_trip_partitions_by_model_and_pins_every_file(tmp_path):
    data = pa.concat_tables([small("m1"), small("m2", n=3)])
    written = write_records(tmp_path, data, metadata={"run": "unit"})
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == [
        "m1/part-00000.parquet", "m2/part-00000.parquet"]
    manifest = read_manifest(tmp_path)
    assert manifest["schema_version"] == SCHEMA_VERSION
    assert manifest["synthetic"] is False and manifest["metadata"] == {"run": "unit"}
    for name, entry in manifest["files"].items():
        assert entry["sha256"] == sha256_file(tmp_path / name)
    back = read_records(tmp_path)
    assert back.schema.equals(RECORD_SCHEMA)
    assert rows_sorted(back) == rows_sorted(data)


def test_append_adds_a_shard_and_synthetic_sticks(tmp_path):
    write_records(tmp_path, small("m1"), synthetic=True)
    write_records(tmp_path, small("m1", scorer="M1-strict"))
    assert sorted(read_manifest(tmp_path)["files"]) == [
        "m1/part-00000.parquet", "m1/part-00001.parquet"]
    assert read_manifest(tmp_path)["synthetic"] is True
    assert read_records(tmp_path).num_rows == 8


def test_named_shards_replace_and_heal_after_a_crash(tmp_path):
    name = "m1/label--L1_halfwidth__zh_cue--00003.parquet"
    write_shard(tmp_path, name, small(n=2))
    write_shard(tmp_path, name, small(n=3))  # a re-run job replaces its shard
    assert read_manifest(tmp_path)["files"][name]["rows"] == 3
    assert read_records(tmp_path).num_rows == 3
    (tmp_path / name).unlink()  # as if killed between the manifest entry and the rename
    with pytest.raises(RecordsError, match="listed in MANIFEST.json but missing"):
        read_records(tmp_path)
    write_shard(tmp_path, name, small(n=3))  # the resumed job heals the store
    assert read_records(tmp_path).num_rows == 3
    assert not list(tmp_path.glob("m1/.*.tmp"))


@pytest.mark.parametrize("name", ["m2/x.parquet", "m1/x.csv", "x.parquet", "m1/.hidden.parquet"])
def test_shard_name_must_sit_in_its_models_folder(tmp_path, name):
    with pytest.raises(RecordsError, match="expected 'm1/<file>.parquet'"):
        write_shard(tmp_path, name, small())


def _write_many(directory: str, worker: int) -> None:
    for i, scorer in enumerate(("M1-seq", "M1-strict", "M2", "M3", "M4")):
        write_shard(directory, f"m{worker}/part-{i:05d}.parquet",
                    small(f"m{worker}", n=2, scorer=scorer))


def test_parallel_writers_keep_every_manifest_entry(tmp_path):
    import multiprocessing

    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_write_many, args=(str(tmp_path), w)) for w in (1, 2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert all(w.exitcode == 0 for w in workers)
    assert len(read_manifest(tmp_path)["files"]) == 10
    assert read_records(tmp_path).num_rows == 20


def test_harness_generation_rows_round_trip(tmp_path):
    """The harness stores M6 rows with NaN scores and a one-hot (or all-zero) distribution."""
    nan = float("nan")
    rows = [record(scorer="M6-strict", pred=-1, scores=[nan] * 4, probs=[0.0] * 4,
                   generation="made-up text"),
            record(scorer="M6-lenient", pred=2, scores=[nan] * 4, probs=[0.0, 0.0, 1.0, 0.0],
                   generation="made-up text")]
    write_shard(tmp_path, "m1/gen--L1_halfwidth__zh_cue--00000.parquet",
                pa.Table.from_pylist(rows, schema=RECORD_SCHEMA))
    back = read_records(tmp_path)
    assert back.column("parse_failed").to_pylist() == [True, False]


def test_columns_subset_keeps_essential_columns(tmp_path):
    write_records(tmp_path, small())
    back = read_records(tmp_path, columns=["probs"])
    assert "probs" in back.column_names and "generation" not in back.column_names
    assert "correct" in back.column_names and "uid" in back.column_names


def test_from_columns_turns_2d_arrays_into_list_columns():
    n = 3
    scores = np.array([[-1.0, -2.0, -3.0, -4.0]] * n)
    t = from_columns({
        "model": ["m"] * n, "uid": [f"cmmlu/agronomy/test/{i}" for i in range(n)],
        "qhash": ["0" * 16] * n, "benchmark": ["cmmlu"] * n, "subject": ["agronomy"] * n,
        "scorer": ["M1-seq"] * n, "label_set": ["L1"] * n, "context": ["c"] * n,
        "shots": np.zeros(n, dtype=np.int64), "order": ["original"] * n,
        "gold": np.zeros(n), "pred": np.zeros(n), "correct": np.ones(n, bool),
        "parse_failed": np.zeros(n, bool), "tied": np.zeros(n, bool), "tie_groups": [""] * n,
        "scores": scores, "probs": np.full((n, 4), 0.25, dtype=np.float32),
    })
    assert t.schema.equals(RECORD_SCHEMA)
    assert t.column("scores").to_pylist()[2] == [-1.0, -2.0, -3.0, -4.0]
    assert t.column("generation").null_count == n


def test_group_ids_match_a_naive_grouping():
    rng = np.random.default_rng(1)
    models = rng.choice(["a", "b", "c"], 200)
    shots = rng.choice([0, 5], 200)
    t = pa.table({"model": models, "shots": pa.array(shots, pa.int8())})
    ids, keys = group_ids(t, ("model", "shots"))
    naive = {}
    for m, s, i in zip(models, shots, ids):
        assert naive.setdefault((str(m), int(s)), i) == i
    assert {keys[i] for i in naive.values()} == set(naive)
    assert len(keys) == len(naive)


# --- one clear error per problem --------------------------------------------------------------


def test_checksum_mismatch_names_the_file(tmp_path):
    write_records(tmp_path, small())
    path = tmp_path / "m1" / "part-00000.parquet"
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    manifest["files"]["m1/part-00000.parquet"]["sha256"] = "0" * 64
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(RecordsError, match=r"part-00000\.parquet: sha256 .* does not match"):
        read_records(tmp_path)
    assert read_records(tmp_path, verify=False).num_rows == 4  # --no-verify skips only that
    assert path.is_file()


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_parquet_is_one_clear_error(tmp_path, damage):
    write_records(tmp_path, small())
    path = tmp_path / "m1" / "part-00000.parquet"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"x" * len(data))
    with pytest.raises(RecordsError, match="sha256"):
        read_records(tmp_path)
    unreadable = r"part-00000\.parquet: not a readable Parquet file"
    with pytest.raises(RecordsError, match=unreadable) as err:
        read_records(tmp_path, verify=False)
    assert "\n" not in str(err.value)


def test_wrong_schema_version_in_manifest(tmp_path):
    write_records(tmp_path, small())
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    manifest["schema_version"] = "cube.records/0"
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(RecordsError, match=r"schema_version 'cube.records/0' is not"):
        read_records(tmp_path)


def test_wrong_schema_version_in_file(tmp_path):
    write_raw(tmp_path, "m1/part-00000.parquet", conform(small()), version="cube.records/9")
    with pytest.raises(RecordsError, match=r"part-00000\.parquet: schema version 'cube.records/9'"):
        read_records(tmp_path)


def test_missing_column_names_file_and_column(tmp_path):
    write_raw(tmp_path, "m1/part-00000.parquet", conform(small()).drop_columns(["tied"]))
    with pytest.raises(RecordsError, match=r"part-00000\.parquet: column tied is missing"):
        read_records(tmp_path)


def test_mistyped_column_names_file_and_column(tmp_path):
    data = conform(small())
    data = data.set_column(data.schema.get_field_index("shots"), "shots",
                           data.column("shots").cast(pa.int64()))
    write_raw(tmp_path, "m1/part-00000.parquet", data)
    with pytest.raises(RecordsError, match=r"column shots has type int64, expected int8"):
        read_records(tmp_path)


def test_extra_column_is_refused(tmp_path):
    data = conform(small())
    write_raw(tmp_path, "m1/part-00000.parquet", data.append_column("note", pa.array(["x"] * 4)))
    with pytest.raises(RecordsError, match="column note is not in schema"):
        read_records(tmp_path)


def test_probability_outside_unit_interval(tmp_path):
    bad = table([record(uid="cmmlu/agronomy/test/0"),
                 record(uid="cmmlu/agronomy/test/1", probs=[0.5, 1.25, 0.0, 0.0])])
    with pytest.raises(RecordsError, match=r"column probs, row 1: 1.25 is not a probability"):
        write_records(tmp_path, bad)
    assert not (tmp_path / MANIFEST_NAME).exists()  # nothing written half-way
    write_raw(tmp_path, "m1/part-00000.parquet", bad)
    with pytest.raises(RecordsError, match=r"part-00000\.parquet: column probs, row 1"):
        read_records(tmp_path)


def test_nan_probability_is_refused(tmp_path):
    bad = table([record(probs=[float("nan"), 0.5, 0.25, 0.25])])
    write_raw(tmp_path, "m1/part-00000.parquet", bad)
    with pytest.raises(RecordsError, match="column probs, row 0: nan"):
        read_records(tmp_path)


def test_duplicate_key_across_shards_names_both_files(tmp_path):
    write_records(tmp_path, small())
    write_records(tmp_path, small())
    with pytest.raises(RecordsError, match=r"part-00001\.parquet: column uid: duplicate key .*"
                                           r"also in .*part-00000\.parquet"):
        read_records(tmp_path)


def test_duplicate_key_within_a_table_is_refused_at_write(tmp_path):
    with pytest.raises(RecordsError, match="duplicate key"):
        write_records(tmp_path, pa.concat_tables([small(), small()]))


def test_correct_must_agree_with_pred_and_gold(tmp_path):
    with pytest.raises(RecordsError, match=r"column correct, row 0: True but pred 1 and gold 0"):
        write_records(tmp_path, table([record(pred=1, gold=0, correct=True,
                                               scores=scores_for(1))]))


def test_parse_failed_must_match_pred_minus_one(tmp_path):
    with pytest.raises(RecordsError, match=r"column parse_failed, row 0"):
        write_records(tmp_path, table([record(scorer="M6-strict", pred=-1, parse_failed=False)]))


def test_unknown_scorer_and_bad_qhash(tmp_path):
    with pytest.raises(RecordsError, match=r"column scorer, row 0: 'M9'"):
        write_records(tmp_path, table([record(scorer="M9")]))
    with pytest.raises(RecordsError, match=r"column qhash, row 0: 'XYZ'"):
        write_records(tmp_path, table([record(qhash="XYZ")]))


def test_one_uid_two_qhashes(tmp_path):
    write_records(tmp_path, table([record(qhash="0" * 16)]))
    write_records(tmp_path, table([record(qhash="1" * 16, scorer="M1-strict")]))
    with pytest.raises(RecordsError, match=r"column qhash, row of uid 'cmmlu/agronomy/test/0'"):
        read_records(tmp_path)


def test_unlisted_and_missing_files(tmp_path):
    write_records(tmp_path, small())
    stray = tmp_path / "m1" / "part-00007.parquet"
    stray.write_bytes((tmp_path / "m1" / "part-00000.parquet").read_bytes())
    with pytest.raises(RecordsError, match=r"part-00007\.parquet: not listed in MANIFEST"):
        read_records(tmp_path)
    stray.unlink()
    (tmp_path / "m1" / "part-00000.parquet").unlink()
    with pytest.raises(RecordsError, match="listed in MANIFEST.json but missing"):
        read_records(tmp_path)


def test_no_manifest_and_bad_model_folder(tmp_path):
    with pytest.raises(RecordsError, match="no manifest"):
        read_records(tmp_path)
    with pytest.raises(RecordsError, match="cannot name a folder"):
        write_records(tmp_path, table([record(model="../evil")]))
    write_raw(tmp_path, "m2/part-00000.parquet", small("m1"))
    with pytest.raises(RecordsError, match="column model holds 'm1' in the folder of 'm2'"):
        read_records(tmp_path)


# --- qhash against the real item set ------------------------------------------------------------


@pytest.fixture(scope="module")
def agronomy(benchmarks_root):
    return load_cmmlu(benchmarks_root / "cmmlu", subjects=["agronomy"])


def test_qhash_matches_the_items_in_use(tmp_path, agronomy):
    recs = [record(uid=item.uid, qhash=item.qhash, gold=item.answer, pred=item.answer,
                   scores=scores_for(item.answer)) for item in agronomy[:5]]
    write_records(tmp_path, table(recs))
    assert read_records(tmp_path, items=agronomy).num_rows == 5
    assert read_records(tmp_path, items={i.uid: i.qhash for i in agronomy}).num_rows == 5


def test_qhash_of_different_question_text_is_refused(tmp_path, agronomy):
    item = agronomy[3]
    write_records(tmp_path, table([record(uid=item.uid, qhash="f" * 16)]))
    with pytest.raises(RecordsError, match=rf"column qhash: uid '{item.uid}' has qhash 'ffff"):
        read_records(tmp_path, items=agronomy)


def test_uid_outside_the_item_set_is_refused(tmp_path, agronomy):
    write_records(tmp_path, table([record(uid="cmmlu/agronomy/test/999999")]))
    with pytest.raises(RecordsError, match=r"column uid: 'cmmlu/agronomy/test/999999' is not in"):
        read_records(tmp_path, items=agronomy)


# --- issue 11: bad input that must be one clear error -------------------------------------------


def test_a_full_disk_is_one_line_error_and_leaves_no_temp_file(tmp_path, monkeypatch):
    import errno
    import os

    from cube.errors import CubeError

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(CubeError, match="No space left on device") as caught:
        write_records(tmp_path, small())
    assert "\n" not in str(caught.value) and "part-00000.parquet" in str(caught.value)
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_file_given_as_store_is_one_clear_error(tmp_path):
    path = tmp_path / "records.parquet"
    path.write_bytes(b"not a folder")
    with pytest.raises(RecordsError, match="is not a folder"):
        read_records(path)


@pytest.mark.parametrize("name", ["../x.parquet", "/tmp/x.parquet", "m1/../../x.parquet",
                                  "m1/sub/x.parquet", "m1/.x.parquet", "m1/x.csv"])
def test_manifest_entries_outside_the_store_are_refused(tmp_path, name):
    write_records(tmp_path, small())
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    manifest["files"][name] = dict(manifest["files"]["m1/part-00000.parquet"])
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(RecordsError, match="outside the store|not '<model>/<file>.parquet'"):
        read_records(tmp_path)


@pytest.mark.parametrize("scorer, change, needle", [
    ("M1-seq", {"pred": 2, "correct": False}, "column pred, row 0: 2 but the argmax of scores is 0"),
    ("TF", {"pred": 1, "correct": False}, "column pred, row 0: 1 but the argmax of scores is 0"),
    ("M1-strict", {"scores": [-0.5, -0.5, -2.0, -3.0], "tied": False}, "column tied, row 0"),
    ("M1-seq", {"scores": [-0.5, float("nan"), -2.0, -3.0], "probs": [0.25] * 4}, "column scores, row 0: NaN"),
    ("M6-strict", {"scores": [float("nan")] * 4, "pred": 1, "correct": False,
                   "probs": [1.0, 0.0, 0.0, 0.0]}, "column pred, row 0: 1 but probs"),
])
def test_a_forged_pred_is_refused(tmp_path, scorer, change, needle):
    write_raw(tmp_path, "m1/part-00000.parquet", table([record(scorer=scorer, **change)]))
    with pytest.raises(RecordsError, match=needle):
        read_records(tmp_path)


def test_tied_scores_and_generations_keep_their_own_rules(tmp_path):
    tie = record(scorer="M1-strict", scores=[-0.5, -0.5, -2.0, -3.0], tie_groups="0=1")  # first max
    parse_fail = record(uid="cmmlu/agronomy/test/1", scorer="M6-strict", scores=[float("nan")] * 4,
                        pred=-1, probs=[0.0] * 4, generation="x")
    answered = record(uid="cmmlu/agronomy/test/2", scorer="M6-lenient", scores=[float("nan")] * 4,
                      pred=2, probs=[0.0, 0.0, 1.0, 0.0], generation="y")
    write_records(tmp_path, table([tie, parse_fail, answered]))
    assert read_records(tmp_path).num_rows == 3


# --- issue 22: what a harness cell promises, and a store that falls short of it -----------------


def _harness_store(folder, n_items: int = 30, shard_size: int = 5, chunks=range(2), dtype: str | None = None):
    """A harness store holding ``chunks`` of one label cell (M1-seq, M1-strict) of ``n_items`` invented
    items, written as the runner writes them: each shard with its cell's configuration."""
    from cube.harness.run_spec import RunSpec, cell_configs, plan_jobs
    from cube.harness.runner import write_job_shard
    from cube.protocol.items import Item
    from cube.protocol.label_sets import LabelSet
    from cube.protocol.prompts import Cell

    items = tuple(Item("cmmlu", "agronomy", "test", i, f"虚构问题{i}", ("甲", "乙", "丙", "丁"), i % 4)
                  for i in range(n_items))
    from cube.harness.run_config import RunSettings

    spec = RunSpec(model="m1", items=items, cells=(Cell(LabelSet("L1", ("A", "B", "C", "D")), "zh_cue", 0),),
                   scorers=("M1-seq", "M1-strict"), shard_size=shard_size, settings=RunSettings(dtype=dtype))
    configs = cell_configs(spec)
    for job in plan_jobs(spec):
        if job.chunk in chunks:
            rows = [record(model="m1", uid=it.uid, qhash=it.qhash, scorer=s, label_set="L1", gold=it.answer,
                           pred=it.answer, scores=scores_for(it.answer), dtype=dtype)
                    for it in job.items for s in ("M1-seq", "M1-strict")]
            write_job_shard(folder, "m1", job, rows, configs[f"m1/{job.cell_name}"])
    return spec


CELL = "m1/label--L1__zh_cue__0shot__original"


def test_a_store_short_of_its_cells_promise_is_refused_unless_allowed(tmp_path, monkeypatch):
    from cube.records.store import unfinished_cells

    _harness_store(tmp_path)
    assert unfinished_cells(read_manifest(tmp_path)) == [
        f"{CELL}: 2 of 6 shards, 10 of 30 items (missing e.g. {CELL}--00002.parquet)"]
    with pytest.raises(RecordsError, match=rf"incomplete store: {CELL}: 2 of 6 shards, 10 of 30 items") as caught:
        read_records(tmp_path)
    assert "\n" not in str(caught.value) and "--allow-incomplete" in str(caught.value)
    assert read_records(tmp_path, allow_incomplete=True).num_rows == 20
    monkeypatch.setenv("CUBE_ALLOW_INCOMPLETE", "1")  # how `cube book execute --allow-incomplete` reaches notebooks
    assert read_records(tmp_path).num_rows == 20
    monkeypatch.delenv("CUBE_ALLOW_INCOMPLETE")
    _harness_store(tmp_path, chunks=range(2, 6))  # the resumed run finishes the cell
    assert unfinished_cells(read_manifest(tmp_path)) == []
    assert read_records(tmp_path).num_rows == 60


def test_rows_are_checked_against_the_manifest_and_the_cells_promise(tmp_path):
    from cube.records.store import unfinished_cells

    _harness_store(tmp_path, n_items=7, shard_size=5, chunks=range(2))  # shards of 5 and 2 items
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert [manifest["files"][f"{CELL}--0000{i}.parquet"]["rows"] for i in (0, 1)] == [10, 4]
    assert read_records(tmp_path).num_rows == 14
    # a manifest that lists other rows than the file holds: changed after writing
    manifest["files"][f"{CELL}--00001.parquet"]["rows"] = 2
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert unfinished_cells(read_manifest(tmp_path)) == [f"{CELL}: {CELL}--00001.parquet lists 2 rows where "
                                                          "the cell promises 4"]
    with pytest.raises(RecordsError, match=r"00001.parquet: 4 rows where MANIFEST.json lists 2"):
        read_records(tmp_path, allow_incomplete=True)


def test_promised_shards_are_the_runners_plan():
    """The store's promise and the runner's plan are two readings of one configuration: they agree."""
    from dataclasses import replace

    from cube.harness.run_spec import cell_configs, plan_jobs
    from cube.records.store import promised_shards

    for n_items, size in ((30, 5), (7, 5), (1, 50), (134, 50)):
        base = _harness_store(None, n_items=n_items, shard_size=size, chunks=())  # writes nothing
        for scorers in (("M1-seq",), ("M1-seq", "M1-strict", "M2", "M5", "M6", "M6-cot", "TF")):
            spec = replace(base, scorers=scorers)
            per_scorer = {"label": sum(s in scorers for s in ("M1-seq", "M1-strict")),
                          "cloze": sum(s in scorers for s in ("M2", "M3", "M4", "M5")), "gen": 2, "cot": 2, "tf": 1}
            planned = {}
            for job in plan_jobs(spec):
                planned.setdefault(f"m1/{job.cell_name}", {})[f"m1/{job.filename}"] = len(job.items) * per_scorer[job.kind]
            configs = cell_configs(spec)
            assert set(configs) == set(planned)
            for cell, config in configs.items():
                assert promised_shards(cell, config) == planned[cell]


# --- issue 32 §2: the writer lock never writes through a link, and cannot be deleted away ----------


def test_issue32_a_writer_lock_that_is_a_symlink_never_truncates_the_users_file(tmp_path):
    """A store received from someone else with `.writer.lock -> ~/notes.txt`: `cube run` and `cube
    merge` truncated the user's file and wrote their pid into it."""
    import os

    from cube.records.store import WRITER_LOCK, writer_lock
    from cube.records.store.layout import MANIFEST_LOCK

    precious = tmp_path / "notes.txt"
    precious.write_text("precious line 1\nprecious line 2\n", encoding="utf-8")
    store = tmp_path / "store"
    store.mkdir()
    os.symlink(precious, store / WRITER_LOCK)
    with writer_lock(store):
        write_records(store, table([record()]))
    assert precious.read_text(encoding="utf-8") == "precious line 1\nprecious line 2\n"
    assert (store / WRITER_LOCK).read_text().strip() == str(os.getpid())  # the link replaced, not followed
    os.symlink(precious, tmp_path / "other-lock")
    os.replace(tmp_path / "other-lock", store / MANIFEST_LOCK)  # the manifest's lock, linked too
    with pytest.raises(RecordsError, match="symbolic link"):
        write_records(store, table([record(uid="cmmlu/agronomy/test/1")]))
    assert precious.read_text(encoding="utf-8") == "precious line 1\nprecious line 2\n"


def test_issue32_deleting_the_lock_file_during_a_run_lets_no_second_writer_in(tmp_path):
    """`rm DIR/.writer.lock` while a run held it: a second writer locked a new file (both rc 0)."""
    import subprocess
    import sys

    from cube.config import REPO_ROOT
    from cube.records.store import WRITER_LOCK, writer_lock

    store = tmp_path / "store"
    child = ("import sys\nfrom cube.errors import StoreBusy\nfrom cube.records.store import writer_lock\n"
             "try:\n    with writer_lock(sys.argv[1]):\n        print('got the lock')\n"
             "except StoreBusy as exc:\n    print(exc)\n")
    with writer_lock(store):
        (store / WRITER_LOCK).unlink()
        second = subprocess.run([sys.executable, "-c", child, str(store)], capture_output=True, text=True,
                                cwd=REPO_ROOT, env={**__import__("os").environ, "PYTHONPATH": str(REPO_ROOT)},
                                timeout=120)
    assert second.returncode == 0, second.stderr
    assert "another process (pid unknown) is writing to this store" in second.stdout, second.stdout


@pytest.mark.parametrize("field, value", [("n_items", 10**12), ("shard_size", 0), ("n_items", -1),
                                          ("n_items", "30"), ("shard_size", True)])
def test_issue32_an_absurd_cell_configuration_is_one_line(tmp_path, field, value):
    """n_items 10**12 made every reader plan 10**12 shards (unfinished_cells never returned)."""
    _harness_store(tmp_path)
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    manifest["cells"][CELL][field] = value
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(RecordsError, match=rf"cell '{CELL}' has {field} .*, not a whole number from") as caught:
        read_records(tmp_path, allow_incomplete=True)
    assert "\n" not in str(caught.value)


def _rewrite_with_manifest(folder, name, table_):
    """Rewrite a shard and its manifest entry together (a tool that 'fixed' it): sha256 and rows agree."""
    path = folder / name
    pq.write_table(table_, path)
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    manifest["files"][name] = {"sha256": sha256_file(path), "rows": table_.num_rows}
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))


def _damage(kind, shard: pa.Table) -> pa.Table:
    meta = shard.schema.metadata
    if kind == "no schema version":
        return shard.replace_schema_metadata({})
    if kind == "another schema version":
        return shard.replace_schema_metadata({**meta, SCHEMA_METADATA_KEY: b"records-v0"})
    if kind == "a column of another type":
        i = shard.schema.get_field_index("shots")
        return shard.set_column(i, pa.field("shots", pa.string()), pa.array(["0"] * shard.num_rows)).replace_schema_metadata(meta)
    if kind == "a missing column":
        return shard.drop_columns(["correct"]).replace_schema_metadata(meta)
    if kind == "pred against its scores":
        i = shard.schema.get_field_index("pred")
        pred = [(p + 1) % 4 for p in shard.column("pred").to_pylist()]
        return shard.set_column(i, shard.schema.field("pred"), pa.array(pred, pa.int8()))
    if kind == "another model's records":
        i = shard.schema.get_field_index("model")
        return shard.set_column(i, shard.schema.field("model"), pa.array(["m2"] * shard.num_rows))
    if kind == "a key twice":
        return pa.concat_tables([shard.slice(0, shard.num_rows - 1), shard.slice(0, 1)])
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["no schema version", "another schema version", "a column of another type",
                                  "a missing column", "pred against its scores", "another model's records",
                                  "a key twice"])
def test_issue32_a_resume_finds_the_schema_level_damage_the_readers_find(tmp_path, kind):
    """Issue 32 §5: after each of these (shard and manifest entry rewritten together), resume said
    "0 shards to run" while every reader refused the store, so the store never healed."""
    from cube.harness.resume import resume_plan

    spec = _harness_store(tmp_path, n_items=10, shard_size=5, chunks=range(2))
    name = f"{CELL}--00000.parquet"
    _rewrite_with_manifest(tmp_path, name, _damage(kind, pq.read_table(tmp_path / name)))
    with pytest.raises(RecordsError):
        read_records(tmp_path)  # what every reader says
    plan = resume_plan(spec, tmp_path)
    assert [j.chunk for j in plan.todo] == [0] and len(plan.broken) == 1, plan.broken
    assert plan.broken[0].startswith(f"{tmp_path / name}: ") and plan.broken[0].endswith("; running it again")


# --- schema 1, read forward ----------------------------------------------------------------------


def test_a_schema_1_store_is_read_forward_with_the_precision_its_run_log_recorded(tmp_path):
    """A store written before schema 2 (no dtype, gen_tokens, finish_reason columns; manifest and
    footer say cube.records/1): every record comes back in schema 2, its precision the one the
    run log line that lists its shard recorded, per shard, and its generation length not recorded
    (null), never a guess. A shard no line lists has no recorded precision (null)."""
    from cube.records.schema import SCHEMA_V1, V1_SCHEMA

    v1 = conform(small(n=6)).select(V1_SCHEMA.names)
    assert "dtype" not in v1.column_names
    write_raw(tmp_path, "m1/label--a--00000.parquet", v1.slice(0, 2), version=SCHEMA_V1)
    write_raw(tmp_path, "m1/label--b--00000.parquet", v1.slice(2, 2), version=SCHEMA_V1)
    write_raw(tmp_path, "m1/label--c--00000.parquet", v1.slice(4, 2), version=SCHEMA_V1)
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    manifest["schema_version"] = SCHEMA_V1
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    (tmp_path / "m1" / "runlog.jsonl").write_text(
        json.dumps({"model": "m1", "dtype": "bfloat16", "files": ["m1/label--a--00000.parquet"]}) + "\n"
        + json.dumps({"model": "m1", "dtype": "float32", "files": ["m1/label--b--00000.parquet"]}) + "\n")

    got = read_records(tmp_path)
    assert got.schema == RECORD_SCHEMA
    by_uid = {r["uid"]: r for r in got.to_pylist()}
    want = {f"cmmlu/agronomy/test/{i}": d for i, d in enumerate(["bfloat16"] * 2 + ["float32"] * 2 + [None] * 2)}
    assert {u: r["dtype"] for u, r in by_uid.items()} == want
    assert all(r["gen_tokens"] is None and r["finish_reason"] is None for r in by_uid.values())
    assert all(r["thinking"] is None and r["thinking_tokens"] is None for r in by_uid.values())  # schema 3's too
    # every other column as written
    assert rows_sorted(got.select(V1_SCHEMA.names)) == rows_sorted(v1)
    # a column subset still carries the precision (an essential column)
    assert set(read_records(tmp_path, columns=["probs"]).column("dtype").to_pylist()) == {"bfloat16", "float32", None}


def test_a_schema_2_store_is_read_forward_with_its_thinking_not_recorded(tmp_path):
    """A store written before schema 3 (issue 49: no thinking, thinking_tokens columns) reads back in
    schema 3 with both null, not recorded (never re-read from the scrubbed text), every other column
    as written; a run may add schema-3 shards beside its schema-2 ones and both read."""
    from cube.records.schema import SCHEMA_V2, V2_SCHEMA

    v2 = conform(small(n=4)).select(V2_SCHEMA.names)
    write_raw(tmp_path, "m1/label--a--00000.parquet", v2.slice(0, 2), version=SCHEMA_V2)
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    manifest["schema_version"] = SCHEMA_V2
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    got = read_records(tmp_path)
    assert got.schema == RECORD_SCHEMA and got.num_rows == 2
    assert got.column("thinking").null_count == got.column("thinking_tokens").null_count == 2
    assert rows_sorted(got.select(V2_SCHEMA.names)) == rows_sorted(v2.slice(0, 2))
    assert read_records(tmp_path, columns=["thinking"]).column("thinking").to_pylist() == [None, None]
    write_raw(tmp_path, "m1/label--b--00000.parquet", conform(small(n=4)).slice(2, 2))
    assert read_records(tmp_path).num_rows == 4


def test_a_thinking_outcome_outside_the_known_ones_is_refused(tmp_path):
    bad = conform(small(n=2)).set_column(RECORD_SCHEMA.get_field_index("thinking"), "thinking",
                                         pa.array(["answered", "pondered"]))
    write_raw(tmp_path, "m1/part-00000.parquet", bad)
    with pytest.raises(RecordsError, match=r"thinking, row 1: 'pondered' is not one of none, answered, "
                                           r"truncated_in_thinking, no_answer_after_thinking"):
        read_records(tmp_path)


def test_a_finish_reason_outside_stop_and_length_is_refused(tmp_path):
    bad = conform(small(n=2)).set_column(RECORD_SCHEMA.get_field_index("finish_reason"), "finish_reason",
                                         pa.array(["stop", "eos"]))
    write_raw(tmp_path, "m1/part-00000.parquet", bad)
    with pytest.raises(RecordsError, match=r"finish_reason, row 1: 'eos' is not one of stop, length"):
        read_records(tmp_path)


@pytest.mark.parametrize("forged", ["float32", None])
def test_records_whose_dtype_disagrees_with_their_manifest_cell_are_refused_by_readers_and_resume(tmp_path, forged):
    """Issue 48: records rewritten (with their manifest entry) to say another precision, or none,
    than the cell their manifest records passed every reader, so the precision guard of a paired
    comparison was told what the records said; the reader and resume now both refuse them."""
    from cube.harness.resume import resume_plan

    spec = _harness_store(tmp_path, n_items=10, shard_size=5, chunks=range(2), dtype="bfloat16")
    assert set(read_records(tmp_path).column("dtype").to_pylist()) == {"bfloat16"}
    name = f"{CELL}--00000.parquet"
    shard = pq.read_table(tmp_path / name)
    i = shard.schema.get_field_index("dtype")
    _rewrite_with_manifest(tmp_path, name, shard.set_column(i, shard.schema.field("dtype"),
                                                            pa.array([forged] * shard.num_rows, pa.string())))
    with pytest.raises(RecordsError, match=rf"records in dtype {forged or 'not recorded'} where the manifest's cell "
                                           r"was run in bfloat16"):
        read_records(tmp_path)
    with pytest.raises(RecordsError, match=r"where the manifest's cell was run in bfloat16"):
        read_records(tmp_path, columns=["probs"])
    plan = resume_plan(spec, tmp_path)
    assert [j.chunk for j in plan.todo] == [0] and "where the manifest's cell was run in bfloat16" in plan.broken[0]


@pytest.mark.parametrize("column, value, needle", [
    ("gen_tokens", -3, "column gen_tokens, row 1: -3 is not a token count"),
    ("finish_reason", "eos", "column finish_reason, row 1: 'eos' is not one of stop, length"),
])
def test_a_reader_of_some_columns_makes_the_checks_resume_makes(tmp_path, column, value, needle):
    """Issue 48: rescore and confirm read a column subset, and the values only resume checked
    (a bogus finish_reason, a negative gen_tokens) passed them."""
    bad = conform(small(n=2))
    i = RECORD_SCHEMA.get_field_index(column)
    bad = bad.set_column(i, RECORD_SCHEMA.field(column), pa.array([None, value], RECORD_SCHEMA.field(column).type))
    write_raw(tmp_path, "m1/part-00000.parquet", bad)
    with pytest.raises(RecordsError, match=needle):
        read_records(tmp_path, columns=["probs"])
    with pytest.raises(RecordsError, match=needle):
        read_records(tmp_path)

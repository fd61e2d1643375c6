"""inspect_ai task: multiple-choice items from a local CSV folder, inspect's own multiple_choice solver
and choice scorer (the task of the inspect_ai section of data/imported/README.md).

``$CUBE_INSPECT_ITEMS`` names a folder of ``<subject>.csv`` files (columns row, question, A, B, C, D,
answer) that ``scripts/write_inspect_items.py`` writes from cube's items into a scratch folder: they
hold benchmark text, so they live outside the repository and only this reader is committed.
"""
import csv, glob, os
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import choice
from inspect_ai.solver import multiple_choice

ROOT = os.environ["CUBE_INSPECT_ITEMS"]


@task
def cube_items():
    samples = []
    for path in sorted(glob.glob(os.path.join(ROOT, "*.csv"))):
        subject = os.path.basename(path)[: -len(".csv")]
        with open(path, encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f):
                samples.append(Sample(input=row["question"], choices=[row[k] for k in "ABCD"], target=row["answer"],
                                      id=f"{subject}/{row['row']}", metadata={"subject": subject, "row": int(row["row"])}))
    return Task(dataset=MemoryDataset(samples), solver=multiple_choice(), scorer=choice())

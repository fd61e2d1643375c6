"""An OpenCompass run's dumped configuration (``configs/*.py``), read as a syntax tree.

mmengine dumps the whole run's configuration as Python source. It is read with ``ast`` and only
literals and ``dict(...)`` calls are evaluated: nothing of it is executed, and a name that is not
plain data reads as None. Apart from reading the folder because it is the one place that turns
source code from a folder a user was given into data, and must stay that narrow.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from cube.errors import HarnessImportError
from cube.files import read_text


class _Unsupported(ValueError):
    pass


def _value(node: ast.AST) -> Any:
    """The value of a dumped config expression: literals and ``dict(...)`` only, nothing run."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return {kw.arg: _value(kw.value) for kw in node.keywords}
    raise _Unsupported(type(node).__name__)


def read_config(path: Path, within: Path | None = None) -> dict[str, Any]:
    """The top-level names of a dumped OpenCompass config (those that are not plain data: None);
    ``within``: the run folder, which a link must not lead out of."""
    text = read_text(path, HarnessImportError, "OpenCompass config", within=within).removeprefix("\ufeff")  # a BOM
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise HarnessImportError(f"{path}: not a Python config file: line {exc.lineno}: {exc.msg} (truncated, or "
                                 "not the config OpenCompass dumped?)") from None
    except (ValueError, RecursionError) as exc:
        reason = "it nests too deep" if isinstance(exc, RecursionError) else str(exc).splitlines()[0]
        raise HarnessImportError(f"{path}: not a Python config file ({reason})") from None
    out: dict[str, Any] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                out[stmt.targets[0].id] = _value(stmt.value)
            except (_Unsupported, RecursionError):
                out[stmt.targets[0].id] = None
    return out

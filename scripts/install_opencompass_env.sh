#!/usr/bin/env bash
# Build .venv-opencompass: OpenCompass 0.5.4 in an environment of its own.
#
# What it is for: `cube import opencompass` is checked on REAL OpenCompass output. The committed
# fixture (data/imported/opencompass-smollm2) was written by this environment, and
# tests/importers/test_opencompass.py runs OpenCompass from here when it exists.
# cube itself is not installed here: cube reads OpenCompass's output folder, it never imports it.
#
# Why not `pip install opencompass==0.5.4`: it pins ~50 dependencies for every benchmark it
# knows (code sandboxes, rouge metrics, OCR, sentence embeddings, tree-sitter parsers), several of
# them sdist-only, and this project never builds an sdist. OpenCompass's wheel goes in with
# --no-deps and only what its multiple-choice path (HuggingFace model class, PPL and gen
# inferencers, the CMMLU reader, accuracy evaluators, `opencompass CONFIG --debug`) imports
# is installed, from wheels only (--only-binary :all:), at pinned versions.
#
# Left out, and why (none is imported on that path; see the stub list in [4/5]):
#   jieba, rouge_score, timeout_decorator, rouge, rouge_chinese, fuzzywuzzy, python-Levenshtein,
#     rank_bm25, sacrebleu, nltk (metrics of generation benchmarks; jieba, rouge_score and
#     timeout_decorator are sdist-only)
#   tree-sitter, tree_sitter_languages, func_timeout, h5py, opencv-python-headless (code and
#     vision benchmarks)
#   sentence_transformers, openai, gradio-client, httpx, tiktoken, cpm_kernels, einops (API
#     models, judges and other model classes)
#   seaborn, prettytable, typer, retrying, immutabledict, json5, jsonlines, absl-py (reports and
#     other datasets)
# opencompass/datasets/__init__.py imports every dataset module at once, so the modules of those
# other benchmarks would fail on import; [4/5] writes a sitecustomize that gives each left-out
# top-level module an empty stand-in which raises if anything is *used* from it. A run of the
# multiple-choice path therefore either uses none of them or fails loudly.
#
# Usage: scripts/install_opencompass_env.sh          (idempotent: re-running skips a finished build)
#        OPENCOMPASS_VENV=/path/to/venv PY=python3.11 scripts/install_opencompass_env.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-python3}
VENV=${OPENCOMPASS_VENV:-.venv-opencompass}
OC_VERSION=0.5.4
BIN="$VENV/bin"
STAMP="$VENV/.installed"

if [[ -f "$STAMP" && "$STAMP" -nt "$0" ]]; then
    echo "$VENV is up to date (delete $STAMP to reinstall)"
    exit 0
fi

start=$(date +%s)
test -x "$BIN/python" || "$PY" -m venv "$VENV"
PIP=("$BIN/python" -m pip install -q --only-binary :all:)

echo "[1/5] torch==2.13.0 (the only torch this project installs)"
"${PIP[@]}" "torch==2.13.0"

echo "[2/5] opencompass==$OC_VERSION, its wheel alone (--no-deps: several of its deps are sdist-only)"
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
"$BIN/python" -m pip download -q --no-deps --only-binary :all: "opencompass==$OC_VERSION" -d "$wheels"
"$BIN/python" -m pip install -q --no-deps "$wheels"/opencompass-"$OC_VERSION"-py3-none-any.whl

echo "[3/5] the dependencies the multiple-choice path imports, wheels only, pinned"
"${PIP[@]}" "mmengine-lite==0.11.0rc3" "datasets==3.6.0" "numpy==1.26.4" "pandas==2.2.3" \
    "scikit-learn==1.5.0" "scipy==1.13.1" "pyarrow==19.0.1" "transformers>=5.16.1,<5.20" "tokenizers==0.23.3" \
    "accelerate==1.10.1" safetensors "evaluate==0.4.6" "tabulate==0.9.0" "rich" \
    "sympy" "requests>=2.31.0" "tqdm>=4.64.1" "protobuf" "importlib-metadata" "pyyaml" "regex" \
    "huggingface_hub" "mmh3" "addict" "yapf" "termcolor"

echo "[4/5] stand-ins for the left-out modules (see the header)"
site=$("$BIN/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cat > "$site/sitecustomize.py" <<'EOF'
# Written by scripts/install_opencompass_env.sh: OpenCompass imports every benchmark's module at
# once; these top-level modules were left out of this environment on purpose (the script's header
# says why). Each is an empty stand-in: importing it works, using anything from it raises.
import importlib.abc, importlib.machinery, sys, types

LEFT_OUT = {
    "jieba", "rouge_score", "timeout_decorator", "rouge", "rouge_chinese", "fuzzywuzzy", "Levenshtein",
    "rank_bm25", "sacrebleu", "nltk", "tree_sitter", "tree_sitter_languages", "func_timeout",
    "h5py", "cv2", "sentence_transformers", "openai", "gradio_client", "httpx", "tiktoken",
    "cpm_kernels", "einops", "seaborn", "prettytable", "typer", "retrying", "immutabledict",
    "json5", "jsonlines", "absl", "matplotlib", "pypinyin", "networkx", "Bio", "ltp",
}


class _LeftOut(types.ModuleType):
    __path__ = []  # a package, so `from x.y import z` resolves to another stand-in

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        stub = _LeftOut(f"{self.__name__}.{name}")
        return stub

    def __call__(self, *args, **kwargs):
        # A decorator applied at import time (@timeout_decorator.timeout(10)) must not fail the
        # import: the function it wraps raises when called instead.
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], _LeftOut):
            name = self.__name__

            def left_out(*a, **k):
                raise ImportError(f"{name} was left out of .venv-opencompass "
                                  "(scripts/install_opencompass_env.sh says why)")
            return left_out
        return _LeftOut(f"{self.__name__}()")

    def __mro_entries__(self, bases):
        return (object,)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in LEFT_OUT and importlib.machinery.PathFinder.find_spec(
                name.split(".")[0]) is None:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _LeftOut(spec.name)

    def exec_module(self, module):
        pass


sys.meta_path.append(_Finder())


# OpenCompass 0.5.4 tokenizes with ``tokenizer.batch_encode_plus(texts, **kw)``, which transformers 5
# removed; its documented equivalent is ``tokenizer(texts, **kw)``. transformers 4 is no option:
# cube's model folders are written by transformers 5 (config.json's rope_parameters, which
# transformers 4 would silently read as the default rope_theta). The method is put back, as that
# call, once transformers' tokenizer base class is imported.
class _BatchEncodePlus(importlib.abc.MetaPathFinder):
    TARGET = "transformers.tokenization_utils_base"

    def find_spec(self, name, path, target=None):
        if name != self.TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            base = module.PreTrainedTokenizerBase
            if not hasattr(base, "batch_encode_plus"):
                base.batch_encode_plus = lambda self, texts, **kw: self(texts, **kw)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _BatchEncodePlus())
EOF

echo "[5/5] checking the environment imports"
HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 "$BIN/python" - <<'EOF'
import opencompass.datasets, opencompass.models, opencompass.openicl  # noqa: F401
import opencompass.cli.main, opencompass.tasks.openicl_infer, opencompass.tasks.openicl_eval  # noqa: F401
from opencompass.datasets import CMMLUDataset  # noqa: F401
from opencompass.models import HuggingFacewithChatTemplate, HuggingFaceBaseModel  # noqa: F401
import importlib.metadata as md
import torch, transformers
print("opencompass", md.version("opencompass"), "| torch", torch.__version__,
      "| transformers", transformers.__version__, "| tokenizers", md.version("tokenizers"))
EOF
touch "$STAMP"
echo "done in $(( $(date +%s) - start )) s"

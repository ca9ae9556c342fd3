#!/usr/bin/env bash
# The package on Colab's own runtime: Python 3.13 with torch 2.11.0 and Colab's versions of numpy,
# matplotlib, ipywidgets, ipykernel and tqdm (tests/colab_runtime.txt says where they come from).
# Runs the package's fast tests (README) and executes chapters 1 and 2 with nbval there.
#
#   bash scripts/colab_py313_check.sh [PYTHON3.13] [ENV_DIR]
#
# A documented job, not a CI step: torch 2.11.0 for Python 3.13 is about 4.5 GB with its CUDA
# libraries from PyPI (set TORCH_INDEX=https://download.pytorch.org/whl/cpu for the CPU build where
# that index is reachable). The environment is kept in ENV_DIR (default .venv-py313) and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${1:-python3.13}
ENV=${2:-.venv-py313}
COLAB_PINS=$(grep -v '^#' tests/colab_runtime.txt | grep -v '^torch==' | tr '\n' ' ')

if [ ! -x "$ENV/bin/python" ]; then
  "$PYTHON" -m venv "$ENV"
fi
"$ENV/bin/python" -c 'import sys; assert sys.version_info[:2] == (3, 13), sys.version' \
  || { echo "$ENV is not Python 3.13: pass a Python 3.13 interpreter" >&2; exit 2; }
if [ -n "${TORCH_INDEX:-}" ]; then
  "$ENV/bin/pip" install -q torch==2.11.0 --index-url "$TORCH_INDEX"
else
  "$ENV/bin/pip" install -q torch==2.11.0
fi
# shellcheck disable=SC2086  # the pins are separate words
"$ENV/bin/pip" install -q $COLAB_PINS pytest==9.2.0 nbval==0.11.0 nbformat nbclient pyyaml jupyter_client pyzmq
"$ENV/bin/pip" install -q --no-deps -e .

echo "== $("$ENV/bin/python" --version), torch $("$ENV/bin/python" -c 'import torch; print(torch.__version__)')"
# the fast tests of the README, minus those that need the course's full pinned environment
# (the book's build tools, the workflow schema, the citation schema, the notebooks' ruff/codespell)
"$ENV/bin/python" -m pytest -q -p no:cacheprovider tests \
  --ignore=tests/test_browser.py --ignore=tests/test_colab_like.py --ignore=tests/test_grading.py \
  --ignore=tests/test_workflows.py --ignore=tests/test_citation.py --ignore=tests/test_binder.py
MPLBACKEND=Agg BAYESATTN_PROGRESS=0 "$ENV/bin/python" -m pytest -q -p no:cacheprovider \
  book/01_attention_block.ipynb book/02_score_gradient.ipynb

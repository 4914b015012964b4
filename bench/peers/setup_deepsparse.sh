#!/usr/bin/env bash
# DeepSparse 1.8 in its own environment (it needs numpy < 2 and onnx 1.14, which graphselect's
# environment does not have): a benchmark peer only, never a dependency of graphselect.
#   bash bench/peers/setup_deepsparse.sh [VENV]      (default ~/.cache/graphselect/deepsparse-venv)
# then bench/e2e.py --deepsparse finds it there (or pass --deepsparse-python VENV/bin/python).
set -euo pipefail
venv="${1:-$HOME/.cache/graphselect/deepsparse-venv}"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet "deepsparse==1.8.0" "numpy<2" "onnx==1.14.1"
"$venv/bin/python" -c "import deepsparse; print('deepsparse', deepsparse.__version__, 'in', '$venv')"

#!/usr/bin/env bash
# Builds my-policy.wasm (a WebAssembly component) from app.py with
# componentize-py: installs it from PyPI (requirements.txt) into a virtual
# environment on the first run, runs the native tests, then componentizes
# (about 15 s; an 18 MB component). Needs Python 3.10 or later.
#
# The virtual environment lives outside this directory (componentize-py
# bundles what it finds on its Python path): $POLICY_VENV, by default
# ~/.cache/lockbroker-policy-python.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

venv=${POLICY_VENV:-$HOME/.cache/lockbroker-policy-python}
python=${PYTHON:-python3}
if [[ ! -x $venv/bin/componentize-py ]]; then
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet -r requirements.txt
fi

# The bindings as plain Python, for the native tests only (componentize
# generates its own).
rm -rf bindings
"$venv/bin/componentize-py" -d wit/policy.wit -w policy bindings bindings
PYTHONPATH=bindings "$venv/bin/python" -m unittest --quiet test_app

"$venv/bin/componentize-py" -d wit/policy.wit -w policy componentize app -o my-policy.wasm
echo "built $PWD/my-policy.wasm ($(wc -c <my-policy.wasm) bytes)"

#!/usr/bin/env bash
# Builds my-policy.wasm (a WebAssembly component) from policy.js: installs
# componentize-js (the exact version package.json names) from npm on the
# first run (into node_modules/: about 25 s and 385 MB), runs the native
# tests, then componentizes (about 26 s; a 12 MB component that imports
# nothing).
# Needs node 18 or later and npm.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

if [[ ! -x node_modules/.bin/componentize-js ]]; then
    npm install --no-audit --no-fund
fi
npm test
npm run build
echo "built $PWD/my-policy.wasm ($(wc -c <my-policy.wasm) bytes)"

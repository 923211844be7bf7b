#!/usr/bin/env bash
# Run gearlb locally in front of three small web backends (examples/backend.py).
# Proxy: http://127.0.0.1:8080/  Status: http://127.0.0.1:8081/gearlb-status.json
# Ctrl-C stops everything this script started.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
python3 examples/backend.py 9001 9002 9003 &
backends=$!
trap 'kill "$backends" 2>/dev/null || true' EXIT
sleep 0.5
echo "try: curl -s http://127.0.0.1:8080/   and   target/release/gearlb ctl --config examples/local.toml status"
target/release/gearlb run --config examples/local.toml

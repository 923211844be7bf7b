#!/bin/bash
# Assemble an installable cartridge directory: bin/ hooks/ metadata/ env/ plus the
# release binary. Usage: bash cartridge/package.sh OUT_DIR
# (GEARLB_BIN=path uses an already built binary instead of `cargo build --release`.)
set -euo pipefail
out="${1:?usage: package.sh OUT_DIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${GEARLB_BIN:-}"
if [ -z "$bin" ]; then
  (cd "$root" && cargo build --release --locked --quiet)
  bin="$root/target/release/gearlb"
fi
mkdir -p "$out/bin" "$out/hooks" "$out/metadata" "$out/env"
cp "$root"/cartridge/bin/setup "$root"/cartridge/bin/control "$out/bin/"
cp "$bin" "$out/bin/gearlb"
cp "$root"/hooks/* "$out/hooks/"
cp "$root"/metadata/* "$out/metadata/"
cp "$root"/cartridge/env/* "$out/env/"
chmod 0755 "$out"/bin/* "$out"/hooks/*
echo "cartridge assembled in $out"

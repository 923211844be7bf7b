#!/bin/bash
# Assemble an installable cartridge directory: bin/ hooks/ metadata/ env/ usr/ plus the gearlb
# binary as bin/gearlb. Usage: bash cartridge/package.sh OUT_DIR
#
# The binary is built to run on the oldest node gearlb targets, RHEL/CentOS 7 (glibc 2.17,
# Linux 3.10): `cargo zigbuild --release --locked --target x86_64-unknown-linux-gnu.2.17`
# links against glibc 2.17's symbols (zig's stubs) with the host's x86_64-unknown-linux-gnu
# std, and zig's clang builds the C parts (mimalloc, ring). The result is stripped and
# checked with cartridge/check-glibc.sh. zig and cargo-zigbuild come from PyPI, pinned,
# into a virtualenv (ZIGBUILD_VENV, default target/zigbuild-venv) made on first use.
#
# GEARLB_BIN=path copies that binary as it is instead of building (no strip, no check).
set -euo pipefail
out="${1:?usage: package.sh OUT_DIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
triple=x86_64-unknown-linux-gnu
glibc=2.17
ziglang_version=0.17.1
zigbuild_version=0.24.0

# The pinned zig and cargo-zigbuild, in a virtualenv of their own (no system Python is
# touched). A stamp file names the versions installed; a mismatch reinstalls.
zig_tools() {
  local venv="${ZIGBUILD_VENV:-$target_dir/zigbuild-venv}"
  local want="ziglang==$ziglang_version cargo-zigbuild==$zigbuild_version"
  if [ "$(cat "$venv/gearlb-pins" 2>/dev/null)" != "$want" ]; then
    echo "installing $want with pip into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    # shellcheck disable=SC2086 # $want is two requirement words
    "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check $want
    echo "$want" >"$venv/gearlb-pins"
  fi
  # cargo-zigbuild finds zig as `python3 -m ziglang`: the venv's python3 comes first.
  PATH="$venv/bin:$PATH"
  export PATH
}

bin="${GEARLB_BIN:-}"
if [ -z "$bin" ]; then
  zig_tools
  (cd "$root" && cargo zigbuild --release --locked --quiet -p gearlb --bin gearlb --target "$triple.$glibc")
  built="$target_dir/$triple/release/gearlb"
  bin="$target_dir/$triple/release/gearlb.stripped"
  strip -o "$bin" "$built"
  bash "$root/cartridge/check-glibc.sh" "$bin" >&2
fi

# Only the directories this script fills are replaced, so that no file removed from the
# source tree survives in a re-used OUT_DIR.
mkdir -p "$out"
rm -rf "${out:?}/bin" "${out:?}/hooks" "${out:?}/metadata" "${out:?}/env" "${out:?}/usr"
mkdir -p "$out/bin" "$out/hooks" "$out/metadata" "$out/env" "$out/usr"
# Every file of each directory (hidden ones too), whatever they are called.
cp -pR "$root"/cartridge/bin/. "$out/bin/"
cp -pR "$root"/hooks/. "$out/hooks/"
cp -pR "$root"/metadata/. "$out/metadata/"
cp -pR "$root"/cartridge/env/. "$out/env/"
# usr/bin: the old cartridge's add-gear and remove-gear, for copies of its autoscaler.
cp -pR "$root"/cartridge/usr/. "$out/usr/"
cp "$bin" "$out/bin/gearlb"
find "$out/bin" "$out/hooks" "$out/usr/bin" -type f -exec chmod 0755 {} +
echo "cartridge assembled in $(cd "$out" && pwd)"

#!/bin/bash
# Regenerate cartridge/SYSCALLS.md, the Linux 3.10 syscall audit of the packaged binary.
# Usage: bash cartridge/syscall-audit.sh [CARTRIDGE_DIR]
#
# Runs the test packaged_binary_runs_with_every_syscall_after_linux_3_10_refused
# (tests/portable.rs): the cartridge's bin/gearlb under `strace -f` with ENOSYS injected
# into every call newer than Linux 3.10 (cartridge/syscalls.tsv), through a real workload;
# the test writes the report. CARTRIDGE_DIR defaults to $GEARLB_CARTRIDGE, else
# cartridge/package.sh packages into target/cartridge first. Needs strace (Debian:
# apt-get install strace). Exits non-zero if the test fails (the report is still written).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cart="${1:-${GEARLB_CARTRIDGE:-}}"
if [ -z "$cart" ]; then
  cart="$root/target/cartridge"
  bash "$root/cartridge/package.sh" "$cart"
fi
command -v strace >/dev/null || {
  echo "syscall-audit: strace not found (Debian: apt-get install strace)" >&2
  exit 2
}
cart="$(cd "$cart" && pwd)"
cd "$root"
GEARLB_CARTRIDGE="$cart" GEARLB_SYSCALLS_MD="$root/cartridge/SYSCALLS.md" \
  cargo test --locked --test portable -- --exact \
  packaged_binary_runs_with_every_syscall_after_linux_3_10_refused
echo "syscall audit of $cart/bin/gearlb written to cartridge/SYSCALLS.md"

#!/bin/bash
# Can RHEL/CentOS 7 (glibc 2.17, GCC 4.8's libgcc_s) load this x86-64 binary?
# Usage: bash cartridge/check-glibc.sh BINARY
#
# Reads the ELF with binutils' readelf and fails, naming each problem, on:
# - a shared library outside glibc's own (libc, libm, libpthread, libdl, librt, ld-linux)
#   and libgcc_s: anything else (libstdc++, libssl, ...) may be missing or too old there;
# - a required symbol version newer than GLIBC_2.17 (or GCC_4.8.0 for libgcc_s), listing
#   the symbols that need it; GLIBC_PRIVATE, GLIBC_ABI_* (e.g. GLIBC_ABI_DT_RELR, glibc
#   2.36) and versions of any other name;
# - packed relative relocations (DT_RELR, glibc 2.36), another interpreter than
#   /lib64/ld-linux-x86-64.so.2, or another machine than x86-64.
# The version needs (.gnu.version_r) are what ld.so checks at start-up: a weak symbol
# still needs its version to exist. Prints the libraries and the highest GLIBC version.
# MAX_GLIBC overrides the 2.17 limit (to see what a newer target would allow).
set -euo pipefail
bin="${1:?usage: check-glibc.sh BINARY}"
max_glibc="${MAX_GLIBC:-2.17}"
max_gcc=4.8.0
allowed_libs="libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libgcc_s.so.1 ld-linux-x86-64.so.2"

command -v readelf >/dev/null || {
  echo "check-glibc: readelf not found (Debian: apt-get install binutils)" >&2
  exit 2
}
[ -f "$bin" ] || {
  echo "check-glibc: no such file: $bin" >&2
  exit 2
}

problems=()
# version_le A B: dotted version A is at most B.
version_le() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" = "$1" ]; }

readelf -W -h "$bin" | grep -q 'Machine:.*X86-64' || problems+=("not an x86-64 ELF file")
interp=$(readelf -W -l "$bin" | sed -n 's/.*Requesting program interpreter: \(.*\)\]$/\1/p')
[ "$interp" = /lib64/ld-linux-x86-64.so.2 ] ||
  problems+=("program interpreter '${interp:-none}', not /lib64/ld-linux-x86-64.so.2")

dynamic=$(readelf -W -d "$bin")
needed=$(sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p' <<<"$dynamic" | tr '\n' ' ')
for lib in $needed; do
  case " $allowed_libs " in
  *" $lib "*) ;;
  *) problems+=("needs $lib, not part of glibc or libgcc_s: RHEL 7 may lack it") ;;
  esac
done
if grep -q '(RELR)' <<<"$dynamic"; then
  problems+=("packed relative relocations (DT_RELR) need glibc 2.36")
fi

# "FILE VERSION" for every version need.
verneed=$(readelf -W -V "$bin" | awk '
  /^Version needs section/ { on = 1; next }
  /^Version (symbols|definition) section/ { on = 0 }
  on { for (i = 1; i < NF; i++) { if ($i == "File:") file = $(i + 1); if ($i == "Name:") print file, $(i + 1) } }')
# "symbol@VERSION" of every undefined dynamic symbol.
symbols=$(readelf -W --dyn-syms "$bin" | awk '$7 == "UND" && $8 ~ /@/ { print $8 }')
users() { grep "@$1\$" <<<"$symbols" | sed 's/@.*//' | tr '\n' ' ' | sed 's/ $//'; }

highest=none
while read -r file version; do
  [ -n "$version" ] || continue
  case "$version" in
  GLIBC_[0-9]*)
    v=${version#GLIBC_}
    if [ "$highest" = none ] || ! version_le "$v" "$highest"; then highest=$v; fi
    version_le "$v" "$max_glibc" ||
      problems+=("$file $version > GLIBC_$max_glibc: $(users "$version")")
    ;;
  GCC_[0-9]*)
    version_le "${version#GCC_}" "$max_gcc" ||
      problems+=("$file $version > GCC_$max_gcc: $(users "$version")")
    ;;
  *) problems+=("$file $version: not a public GLIBC_x.y or GCC_x.y version: $(users "$version")") ;;
  esac
done <<<"$verneed"

echo "check-glibc: $bin"
echo "  libraries: ${needed% }"
echo "  highest glibc version needed: GLIBC_$highest (limit GLIBC_$max_glibc)"
if [ "${#problems[@]}" -gt 0 ]; then
  for p in "${problems[@]}"; do echo "  FAIL: $p"; done
  exit 1
fi
echo "  OK: loadable with glibc $max_glibc"

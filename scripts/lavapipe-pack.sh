#!/usr/bin/env bash
# Packs Debian 12's lavapipe (Mesa's CPU Vulkan driver) to run beside another driver on a
# machine that has none of Mesa's libraries: a GPU machine, for a group of two drivers
# (docs/design/gpu-test-runs.md, "A group of two drivers").
#
#   scripts/lavapipe-pack.sh OUT.tar.xz
#
# Run on Debian 12 with mesa-vulkan-drivers installed. The archive holds lib/ (the driver
# and every library it loads but glibc's and GCC's, each finding the others through a
# RUNPATH of $ORIGIN) and lvp_icd.json (its ICD file, the library named relative to it).
# On the other machine: unpack it into a folder and add that folder's lvp_icd.json to
# VK_DRIVER_FILES beside the other driver's ICD file.
#
# libLLVM links libz3 and libxml2 (with libxml2 come ICU's 30 MiB), for features lavapipe
# never calls (LLVM's constraint solver, Windows manifests); the pack replaces both with
# stubs that define the symbols LLVM imports from them, each aborting if it were ever
# called: 25 MiB compressed instead of 41.
set -euo pipefail
out=${1:?usage: scripts/lavapipe-pack.sh OUT.tar.xz}
case "$out" in /*) ;; *) out=$PWD/$out ;; esac
lvp=/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so
[[ -f $lvp ]] || { echo "lavapipe-pack: no $lvp: apt-get install mesa-vulkan-drivers" >&2; exit 1; }
for tool in gcc nm patchelf xz; do
  command -v $tool > /dev/null || { echo "lavapipe-pack: needs $tool (apt-get install gcc binutils patchelf xz-utils)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/pack/lib" "$work/stub"
cp -L "$lvp" "$work/pack/lib/"
# Every library the driver loads, but glibc's and GCC's (the other machine has its own).
ldd "$lvp" | awk '/=> \// { print $3 }' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
    libz3.so*|libxml2.so*|libicu*) ;;  # stubbed below
    *) cp -L "$lib" "$work/pack/lib/" ;;
  esac
done
llvm=$(ls "$work"/pack/lib/libLLVM-*.so* | head -1)
nm -D --undefined-only "$llvm" | awk '{ print $2 }' | sort -u > "$work/stub/refs"
# libz3: unversioned symbols.
{ echo '#include <stdlib.h>'; grep '^Z3_' "$work/stub/refs" | sed 's/@.*//' | sort -u |
  while read -r s; do echo "void $s(void) { abort(); }"; done; } > "$work/stub/z3.c"
gcc -shared -fPIC -O1 -fno-builtin -Wl,-soname,libz3.so.4 -o "$work/pack/lib/libz3.so.4" "$work/stub/z3.c"
# libxml2: its symbols carry versions, which the stub must define as well.
{ echo '#include <stdlib.h>'; grep '^xml' "$work/stub/refs" | sed 's/@.*//' | sort -u |
  while read -r s; do echo "void $s(void) { abort(); }"; done; } > "$work/stub/xml2.c"
prev=""
for v in $(grep '^xml' "$work/stub/refs" | sed -n 's/.*@\+//p' | sort -uV); do
  syms=$(grep "^xml.*@\+$v\$" "$work/stub/refs" | sed 's/@.*//' | sort -u | tr '\n' ';')
  echo "$v { global: $syms }${prev:+ $prev};"
  prev=$v
done > "$work/stub/xml2.map"
gcc -shared -fPIC -O1 -fno-builtin -Wl,-soname,libxml2.so.2 -Wl,--version-script,"$work/stub/xml2.map" \
    -o "$work/pack/lib/libxml2.so.2" "$work/stub/xml2.c"
strip --strip-unneeded "$work"/pack/lib/*.so*
for f in "$work"/pack/lib/*.so*; do patchelf --set-rpath '$ORIGIN' "$f"; done
cat > "$work/pack/lvp_icd.json" <<'JSON'
{
    "ICD": {
        "api_version": "1.1.230",
        "library_path": "./lib/libvulkan_lvp.so"
    },
    "file_format_version": "1.0.0"
}
JSON
tar -cJf "$out" -C "$work/pack" .
echo "lavapipe-pack: $out ($(du -h "$out" | cut -f1)): unpack it, then VK_DRIVER_FILES=<other ICD>:<folder>/lvp_icd.json"

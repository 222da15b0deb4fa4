#!/usr/bin/env bash
# Installs what building and testing tpar needs, from Debian packages (apt-get, as root).
# Idempotent, and quiet when everything is already there.
#   scripts/setup.sh         build + run: compiler, CMake, Ninja, Vulkan headers/loader and
#                            lavapipe (the CPU driver, for machines without a GPU)
#   scripts/setup.sh test    the above plus glslc, SPIR-V tools, doctest, the validation layers, pkg-config
set -euo pipefail
packages=(g++ cmake ninja-build libvulkan-dev libvulkan1 mesa-vulkan-drivers)
if [[ "${1:-}" == test ]]; then
  packages+=(glslc spirv-tools doctest-dev vulkan-validationlayers pkg-config)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "setup: missing Debian packages: ${missing[*]}" >&2
  echo "setup: run as root, or: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

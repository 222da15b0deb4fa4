#!/usr/bin/env bash
# Installs what building and testing tpar needs, from Debian packages (apt-get, as root).
# Idempotent, and quiet when everything is already there.
#   scripts/setup.sh         build + run: compiler, CMake, Ninja, Vulkan headers/loader and
#                            lavapipe (the CPU driver, for machines without a GPU)
#   scripts/setup.sh test    the above plus glslc, SPIR-V tools, doctest, the validation layers,
#                            pkg-config, curl and jq (the llama-server case), python3 (the
#                            docs' rendered figures), and what building
#                            the pinned llama.cpp needs
#   scripts/setup.sh llama   build + run, plus what building the pinned llama.cpp needs
set -euo pipefail
packages=(g++ cmake ninja-build libvulkan-dev libvulkan1 mesa-vulkan-drivers)
llama=(glslc spirv-headers patch xz-utils git)
case "${1:-}" in
  "") ;;
  test) packages+=(spirv-tools doctest-dev vulkan-validationlayers pkg-config curl jq python3 "${llama[@]}") ;;
  llama) packages+=("${llama[@]}") ;;
  *) echo "setup: unknown profile '$1' (use: test, llama, or none)" >&2; exit 2 ;;
esac
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

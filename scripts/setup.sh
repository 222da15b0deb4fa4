#!/usr/bin/env bash
# Installs what building and testing tpar needs with the distribution's own packages:
# apt-get (Debian, Ubuntu and their derivatives), dnf (Fedora) or pacman (Arch), chosen
# from /etc/os-release (ID, then ID_LIKE), as root. Idempotent, and quiet when everything
# is already there.
#   scripts/setup.sh         build + run: compiler, CMake, Ninja, Vulkan headers/loader and
#                            lavapipe (the CPU driver, for machines without a GPU)
#   scripts/setup.sh test    the above plus glslc, SPIR-V tools, doctest, the validation layers,
#                            pkg-config, curl and jq (the llama-server case), python3 (the
#                            docs' rendered figures), the mingw-w64 cross compiler (the
#                            Windows compile check, scripts/mingw-check.sh), and what
#                            building the pinned llama.cpp needs
#   scripts/setup.sh llama   build + run, plus what building the pinned llama.cpp needs
# Where it cannot install (not root, or a distribution it does not know) it names what is
# missing and the exact command, or the package of each distribution it knows, and exits 1.
# On a distribution it does not know it checks by the files and commands themselves, so a
# machine that has them all passes.
#   --dry-run (or SETUP_DRY_RUN=1): print the distribution, the package manager, the
#       packages, and the commands that check and install them; install nothing.
#   SETUP_OS_RELEASE=FILE: read FILE instead of /etc/os-release (a dry run then checks
#       nothing on this machine: its packages are another distribution's).
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
}

profile="" dry_run="${SETUP_DRY_RUN:-}"
[[ $dry_run == 0 ]] && dry_run=""
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=1 ;;
    -h | --help) usage; exit 0 ;;
    test | llama) [[ -z $profile ]] || { echo "setup: one profile only (got '$profile' and '$arg')" >&2; exit 2; }; profile=$arg ;;
    none) ;;
    *) echo "setup: unknown argument '$arg' (use: test, llama, or none; --dry-run; --help)" >&2; exit 2 ;;
  esac
done

# What each profile needs, by name; each name's package on Debian/Ubuntu, Fedora and Arch,
# what it is, and how to see it without a package manager.
needs=(cxx cmake ninja vulkan_headers vulkan_loader lavapipe)
llama_needs=(glslc spirv_headers patch xz git)
case "$profile" in
  test) needs+=(spirv_tools doctest validation pkg_config curl jq python3 mingw "${llama_needs[@]}") ;;
  llama) needs+=("${llama_needs[@]}") ;;
esac

declare -A debian=(
  [cxx]=g++ [cmake]=cmake [ninja]=ninja-build [vulkan_headers]=libvulkan-dev [vulkan_loader]=libvulkan1
  [lavapipe]=mesa-vulkan-drivers [spirv_tools]=spirv-tools [doctest]=doctest-dev
  [validation]=vulkan-validationlayers [pkg_config]=pkg-config [curl]=curl [jq]=jq [python3]=python3
  [mingw]=g++-mingw-w64-x86-64-posix [glslc]=glslc [spirv_headers]=spirv-headers [patch]=patch
  [xz]=xz-utils [git]=git)
declare -A fedora=(
  [cxx]=gcc-c++ [cmake]=cmake [ninja]=ninja-build [vulkan_headers]="vulkan-headers vulkan-loader-devel"
  [vulkan_loader]=vulkan-loader [lavapipe]=mesa-vulkan-drivers [spirv_tools]=spirv-tools
  [doctest]=doctest-devel [validation]=vulkan-validation-layers [pkg_config]=pkgconf-pkg-config [curl]=curl
  [jq]=jq [python3]=python3 [mingw]=mingw64-gcc-c++ [glslc]=glslc [spirv_headers]=spirv-headers-devel
  [patch]=patch [xz]=xz [git]=git)
declare -A arch=(
  [cxx]=gcc [cmake]=cmake [ninja]=ninja [vulkan_headers]=vulkan-headers [vulkan_loader]=vulkan-icd-loader
  [lavapipe]=vulkan-swrast [spirv_tools]=spirv-tools [doctest]=doctest [validation]=vulkan-validation-layers
  [pkg_config]=pkgconf [curl]=curl [jq]=jq [python3]=python [mingw]=mingw-w64-gcc [glslc]=shaderc
  [spirv_headers]=spirv-headers [patch]=patch [xz]=xz [git]=git)
declare -A what=(
  [cxx]="a C++20 compiler (GCC 12 or newer)" [cmake]="CMake 3.21 or newer" [ninja]="Ninja"
  [vulkan_headers]="the Vulkan headers with Vulkan-Hpp (1.3.239 or newer) and the loader's libvulkan.so"
  [vulkan_loader]="the Vulkan loader (libvulkan.so.1)" [lavapipe]="Mesa's lavapipe Vulkan driver"
  [spirv_tools]="SPIRV-Tools (spirv-val)" [doctest]="doctest" [validation]="the Khronos validation layer"
  [pkg_config]="pkg-config" [curl]="curl" [jq]="jq" [python3]="Python 3"
  [mingw]="the mingw-w64 x86-64 C++ cross compiler, POSIX threads" [glslc]="glslc (shaderc)"
  [spirv_headers]="the SPIR-V headers" [patch]="patch" [xz]="xz" [git]="git")
# "cmd A B": one of the commands on PATH; "file G...": one of the paths (globs) exists.
declare -A probe=(
  [cxx]="cmd g++" [cmake]="cmd cmake" [ninja]="cmd ninja" [vulkan_headers]="file /usr/include/vulkan/vulkan.hpp"
  [vulkan_loader]="file /usr/lib/libvulkan.so.1 /usr/lib64/libvulkan.so.1 /usr/lib/*/libvulkan.so.1"
  [lavapipe]="file /usr/share/vulkan/icd.d/lvp_icd*.json" [spirv_tools]="cmd spirv-val"
  [doctest]="file /usr/include/doctest/doctest.h"
  [validation]="file /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json"
  [pkg_config]="cmd pkg-config" [curl]="cmd curl" [jq]="cmd jq" [python3]="cmd python3"
  [mingw]="cmd x86_64-w64-mingw32-g++-posix x86_64-w64-mingw32-g++" [glslc]="cmd glslc"
  [spirv_headers]="file /usr/include/spirv/unified1/spirv.hpp" [patch]="cmd patch" [xz]="cmd xz" [git]="cmd git")

# The distribution: the first of ID, then ID_LIKE's words, that names a family known here.
# (RHEL and its rebuilds list fedora in ID_LIKE and get Fedora's names.)
os_release="${SETUP_OS_RELEASE:-/etc/os-release}"
if [[ -z ${SETUP_OS_RELEASE:-} && ! -r $os_release ]]; then os_release=/usr/lib/os-release; fi
if [[ -n ${SETUP_OS_RELEASE:-} && ! -r $os_release ]]; then
  echo "setup: SETUP_OS_RELEASE=$os_release: cannot read it" >&2
  exit 2
fi
ID="" ID_LIKE="" PRETTY_NAME=""
if [[ -r $os_release ]]; then
  while IFS='=' read -r key value; do
    case "$key" in
      ID | ID_LIKE | PRETTY_NAME)
        value=${value%$'\r'} value=${value#[\"\']} value=${value%[\"\']}
        printf -v "$key" '%s' "$value" ;;
    esac
  done <"$os_release"
fi
family=unknown
for word in $ID $ID_LIKE; do
  case "$word" in
    debian | ubuntu) family=debian ;;
    fedora) family=fedora ;;
    arch) family=arch ;;
    *) continue ;;
  esac
  break
done
distro="${PRETTY_NAME:-${ID:-an unknown distribution}} (ID=${ID:-none}${ID_LIKE:+, ID_LIKE=$ID_LIKE})"
note=""
[[ $family == fedora && $ID != fedora ]] &&
  note="setup: note: $ID is taken as Fedora (its ID_LIKE); on RHEL and its rebuilds some of these packages need EPEL or CRB enabled"

packages=()
if [[ $family != unknown ]]; then
  declare -n names=$family
  for n in "${needs[@]}"; do
    read -ra words <<<"${names[$n]}"
    packages+=("${words[@]}")
  done
fi
case "$family" in
  debian) label="Debian/Ubuntu" check_cmd="dpkg-query -W -f='\${db:Status-Status}' PACKAGE (installed)"
          install_cmd="apt-get update && apt-get install -y --no-install-recommends ${packages[*]}" ;;
  fedora) label="Fedora" check_cmd="rpm -q PACKAGE"
          install_cmd="dnf install -y --setopt=install_weak_deps=False ${packages[*]}" ;;
  # -Syu, never -Sy alone: Arch does not support partial upgrades.
  arch)   label="Arch" check_cmd="pacman -Q PACKAGE"
          install_cmd="pacman -Syu --needed --noconfirm ${packages[*]}" ;;
esac

installed() {
  case "$family" in
    debian) dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed ;;
    fedora) rpm -q --quiet "$1" 2>/dev/null ;;
    arch) pacman -Q "$1" >/dev/null 2>&1 ;;
  esac
}
present() {  # need name, on a distribution known here only by its files and commands
  local kind rest
  read -r kind rest <<<"${probe[$1]}"
  local x
  for x in $rest; do
    if [[ $kind == cmd ]]; then command -v "$x" >/dev/null 2>&1 && return 0
    else compgen -G "$x" >/dev/null && return 0; fi
  done
  return 1
}
# Each missing need, as the packages every known distribution has for it.
explain() {
  local n
  for n in "$@"; do
    echo "setup:   ${what[$n]}: Debian/Ubuntu ${debian[$n]}, Fedora ${fedora[$n]}, Arch ${arch[$n]}" >&2
  done
}

checking_here=1
[[ -n ${SETUP_OS_RELEASE:-} ]] && checking_here=""

if [[ -n $dry_run ]]; then
  echo "setup: dry run: nothing is installed"
  echo "setup: os-release: $os_release: $distro"
  echo "setup: profile: ${profile:-none}"
  if [[ $family == unknown ]]; then
    echo "setup: family: unknown: no package manager known for it; checks the files and commands themselves"
    for n in "${needs[@]}"; do echo "setup: needs: ${what[$n]} (${probe[$n]})"; done
  else
    echo "setup: family: $family (${install_cmd%% *})"
    echo "setup: packages: ${packages[*]}"
    echo "setup: check: $check_cmd"
    echo "setup: install: $install_cmd"
    [[ -z $note ]] || echo "$note"
  fi
  if [[ -z $checking_here ]]; then
    echo "setup: not checked on this machine (os-release from SETUP_OS_RELEASE)"
  else
    missing=()
    if [[ $family == unknown ]]; then
      for n in "${needs[@]}"; do present "$n" || missing+=("${what[$n]}"); done
    else
      for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
    fi
    if [[ ${#missing[@]} -eq 0 ]]; then echo "setup: missing: none"
    else printf 'setup: missing: %s\n' "${missing[@]}"; fi
  fi
  exit 0
fi

if [[ $family == unknown ]]; then
  missing=()
  for n in "${needs[@]}"; do present "$n" || missing+=("$n"); done
  [[ ${#missing[@]} -eq 0 ]] && exit 0
  echo "setup: $distro is not a distribution this script installs for (apt-get, dnf, pacman)." >&2
  echo "setup: missing here, with the package each known distribution has for it:" >&2
  explain "${missing[@]}"
  echo "setup: install those with your package manager, then run this again" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
[[ ${#missing[@]} -eq 0 ]] && exit 0
case "$family" in
  debian) install_cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" ;;
  fedora) install_cmd="dnf install -y --setopt=install_weak_deps=False ${missing[*]}" ;;
  arch) install_cmd="pacman -Syu --needed --noconfirm ${missing[*]}" ;;
esac
if [[ $(id -u) -ne 0 ]]; then
  echo "setup: missing $label packages: ${missing[*]}" >&2
  [[ -z $note ]] || echo "$note" >&2
  if [[ $family == debian ]]; then
    echo "setup: run as root, or: sudo sh -c '$install_cmd'" >&2
  else
    echo "setup: run as root, or: sudo $install_cmd" >&2
  fi
  exit 1
fi
echo "setup: installing ${missing[*]}"
[[ -z $note ]] || echo "$note" >&2
case "$family" in
  debian)
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ;;
  fedora) dnf install -y -q --setopt=install_weak_deps=False "${missing[@]}" ;;
  arch) pacman -Syu --needed --noconfirm "${missing[@]}" >/dev/null ;;
esac

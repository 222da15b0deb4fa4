#!/usr/bin/env bash
# scripts/setup.sh's choice of package manager and package names, per distribution, from
# its dry run against the os-release files in tests/tools/os-release/ (Debian 12, Ubuntu
# 24.04, Fedora 41, Arch; Linux Mint 22, Rocky Linux 9 and Manjaro through ID_LIKE; and
# openSUSE Tumbleweed, which it does not know). The lists below are the names each
# distribution gives these packages. Also: its usage errors, a distribution it does not
# know checked by files and commands, the command it prints where it may not install (not
# root), and this machine's own check. Nothing is installed.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
setup="$root/scripts/setup.sh"
fixtures="$root/tests/tools/os-release"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# dry FIXTURE PROFILE: the dry run's output (its exit status must be 0).
dry() {
  local out rc
  out=$(SETUP_OS_RELEASE="$fixtures/$1" "$setup" ${2:+"$2"} --dry-run 2>&1)
  rc=$?
  [[ $rc -eq 0 ]] || fail "$1 $2: dry run exited $rc: $out"
  printf '%s\n' "$out"
}
# expect FIXTURE PROFILE MANAGER "PACKAGES": the family's manager and exactly these packages.
expect() {
  local fixture=$1 profile=$2 manager=$3 want=$4 out
  out=$(dry "$fixture" "$profile")
  grep -qx "setup: family: [a-z]* ($manager)" <<<"$out" || fail "$fixture $profile: not $manager: $out"
  grep -qxF "setup: packages: $want" <<<"$out" ||
    fail "$fixture $profile: packages differ: want '$want', got '$(grep '^setup: packages:' <<<"$out")'"
  grep -q "^setup: install: $manager .* ${want##* }\$" <<<"$out" || fail "$fixture $profile: no $manager install line: $out"
  grep -qx "setup: not checked on this machine (os-release from SETUP_OS_RELEASE)" <<<"$out" ||
    fail "$fixture $profile: claims to have checked this machine"
}

deb_none="g++ cmake ninja-build libvulkan-dev libvulkan1 mesa-vulkan-drivers"
deb_llama="glslc spirv-headers patch xz-utils git"
deb_test="spirv-tools doctest-dev vulkan-validationlayers pkg-config curl jq python3 g++-mingw-w64-x86-64-posix $deb_llama"
fed_none="gcc-c++ cmake ninja-build vulkan-headers vulkan-loader-devel vulkan-loader mesa-vulkan-drivers"
fed_llama="glslc spirv-headers-devel patch xz git"
fed_test="spirv-tools doctest-devel vulkan-validation-layers pkgconf-pkg-config curl jq python3 mingw64-gcc-c++ $fed_llama"
arch_none="gcc cmake ninja vulkan-headers vulkan-icd-loader vulkan-swrast"
arch_llama="shaderc spirv-headers patch xz git"
arch_test="spirv-tools doctest vulkan-validation-layers pkgconf curl jq python mingw-w64-gcc $arch_llama"

for f in debian-12 ubuntu-24.04 linuxmint-22; do
  expect "$f" "" apt-get "$deb_none"
  expect "$f" llama apt-get "$deb_none $deb_llama"
  expect "$f" test apt-get "$deb_none $deb_test"
done
for f in fedora-41 rocky-9; do
  expect "$f" "" dnf "$fed_none"
  expect "$f" llama dnf "$fed_none $fed_llama"
  expect "$f" test dnf "$fed_none $fed_test"
done
for f in arch manjaro; do
  expect "$f" "" pacman "$arch_none"
  expect "$f" llama pacman "$arch_none $arch_llama"
  expect "$f" test pacman "$arch_none $arch_test"
done
# A Fedora rebuild says where its missing names may come from; Fedora itself does not.
grep -q "^setup: note: rocky is taken as Fedora" <<<"$(dry rocky-9 test)" || fail "rocky-9: no note on EPEL"
grep -q "^setup: note:" <<<"$(dry fedora-41 test)" && fail "fedora-41: a note meant for Fedora's rebuilds"
# The exact install commands.
grep -qxF "setup: install: apt-get update && apt-get install -y --no-install-recommends $deb_none" <<<"$(dry debian-12 "")" ||
  fail "debian-12: install command"
grep -qxF "setup: install: dnf install -y --setopt=install_weak_deps=False $fed_none" <<<"$(dry fedora-41 "")" ||
  fail "fedora-41: install command"
grep -qxF "setup: install: pacman -Syu --needed --noconfirm $arch_none" <<<"$(dry arch "")" || fail "arch: install command"

# A distribution it does not know: no package manager, every need named with its probe.
out=$(dry opensuse-tumbleweed test)
grep -qx "setup: family: unknown: .*" <<<"$out" || fail "opensuse: not unknown: $out"
grep -q "^setup: install:" <<<"$out" && fail "opensuse: an install command for an unknown distribution"
[[ $(grep -c "^setup: needs: " <<<"$out") -eq 19 ]] || fail "opensuse test: want 19 needs, got: $out"
[[ $(grep -c "^setup: needs: " <<<"$(dry opensuse-tumbleweed "")") -eq 6 ]] || fail "opensuse none: want 6 needs"
# Checked by files and commands: with no command on PATH it fails, naming each missing
# one with every known distribution's package; nothing is installed.
out=$(SETUP_OS_RELEASE="$fixtures/opensuse-tumbleweed" PATH=/nonexistent "$BASH" "$setup" 2>&1)
rc=$?
[[ $rc -eq 1 ]] || fail "opensuse, no commands: exit $rc, want 1: $out"
grep -qxF "setup:   a C++20 compiler (GCC 12 or newer): Debian/Ubuntu g++, Fedora gcc-c++, Arch gcc" <<<"$out" ||
  fail "opensuse, no commands: the compiler's packages not named: $out"
grep -qxF "setup:   Ninja: Debian/Ubuntu ninja-build, Fedora ninja-build, Arch ninja" <<<"$out" ||
  fail "opensuse, no commands: Ninja's packages not named: $out"

# Not root: the exact command for that distribution, and exit 1. (This machine has no
# Fedora or Arch packages in its package manager, so every package is missing.)
as_user=()
if [[ $(id -u) -eq 0 ]]; then
  command -v setpriv >/dev/null || fail "run as root, this test needs setpriv (util-linux) to run setup.sh as another user"
  as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
if command -v "${as_user[0]:-id}" >/dev/null; then
  out=$(SETUP_OS_RELEASE="$fixtures/fedora-41" "${as_user[@]}" "$setup" 2>&1)
  rc=$?
  [[ $rc -eq 1 ]] || fail "fedora-41 not root: exit $rc, want 1: $out"
  grep -qxF "setup: run as root, or: sudo dnf install -y --setopt=install_weak_deps=False $fed_none" <<<"$out" ||
    fail "fedora-41 not root: command: $out"
  out=$(SETUP_OS_RELEASE="$fixtures/arch" "${as_user[@]}" "$setup" 2>&1)
  grep -qxF "setup: run as root, or: sudo pacman -Syu --needed --noconfirm $arch_none" <<<"$out" ||
    fail "arch not root: command: $out"
fi

# Usage errors exit 2 and install nothing; --help exits 0.
for args in "bogus" "test llama" "--dry-run --frobnicate"; do
  # shellcheck disable=SC2086
  out=$(SETUP_OS_RELEASE="$fixtures/debian-12" "$setup" $args 2>&1)
  rc=$?
  [[ $rc -eq 2 ]] || fail "setup.sh $args: exit $rc, want 2: $out"
done
out=$(SETUP_OS_RELEASE=/nonexistent/os-release "$setup" --dry-run 2>&1)
rc=$?
[[ $rc -eq 2 ]] || fail "unreadable SETUP_OS_RELEASE: exit $rc, want 2: $out"
"$setup" --help | grep -q -- "--dry-run" || fail "--help does not describe --dry-run"

# This machine, as it is: the dry run checks its packages and says what is missing.
mine=$(SETUP_DRY_RUN=1 "$setup" test)
rc=$?
[[ $rc -eq 0 ]] || fail "this machine's dry run exited $rc"
grep -q "^setup: missing: " <<<"$mine" || fail "this machine's dry run did not check: $mine"
grep -q "^setup: not checked" <<<"$mine" && fail "this machine's dry run did not check: $mine"
echo "$mine" | sed -n 's/^setup: \(os-release\|family\|missing\): /this machine: \1: /p'
# A distribution it does not know, on this machine: where it has every package, quiet
# and exit 0; else exit 1 and what is missing.
out=$(SETUP_OS_RELEASE="$fixtures/opensuse-tumbleweed" "$setup" test 2>&1)
rc=$?
if grep -qx "setup: missing: none" <<<"$mine"; then
  [[ $rc -eq 0 && -z $out ]] || fail "opensuse on a machine with everything: exit $rc, output: $out"
else
  [[ ($rc -eq 0 && -z $out) || ($rc -eq 1 && $out == *"missing here"*) ]] || fail "opensuse here: exit $rc, output: $out"
fi

[[ $failures -eq 0 ]] || { echo "FAIL: $failures check(s)"; exit 1; }
echo "PASS: setup.sh picks apt-get, dnf and pacman with each distribution's names, and names what it cannot install"

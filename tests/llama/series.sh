#!/usr/bin/env bash
# Whether the llama.cpp series bisects: applies the patches to the pinned tree one at a
# time and, after each, compiles what that patch changed, with tpar (GGML_VULKAN_TPAR ON)
# and without (OFF), naming the first patch that does not apply or does not compile.
#
#   series.sh BUILD WORK [--patches DIR]
#
# BUILD is a build of the whole series (scripts/llama.sh --build-only --build-dir X: X/build):
# its compile commands (compile_commands.json) give each file's flags, and its header
# dependencies (ninja -t deps) which files include a header. After each patch, every C/C++
# file the patch changes is compiled (-fsyntax-only, the build's flags, the partly patched
# tree's sources), and for each header it changes, the files that include it among those
# the whole series changes (or, if none, the first that includes it); a CMake file it
# changes is configured (llama.cpp's libraries with Vulkan, tpar on and off). Without tpar a file is
# compiled as ggml-vulkan compiles it then: no GGML_VULKAN_TPAR, no tpar headers, C++17.
# The patches' headers must number them [PATCH n/N] in order. About 20 s a patch on two cores.
# exit status: 0 every patch applies and compiles both ways, 1 one does not (named), 2 usage.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
[[ ${1:-} == -h || ${1:-} == --help ]] && { usage; exit 0; }
[[ $# -ge 2 ]] || { echo "series.sh: BUILD and WORK are needed (series.sh --help)" >&2; exit 2; }
build=$(cd "$1" && pwd) work=$2; shift 2
patches_dir="$root/integrations/llama.cpp/patches"
while [[ $# -gt 0 ]]; do
  case $1 in
    --patches) [[ $# -ge 2 && -d $2 ]] || { echo "series.sh: --patches needs a folder" >&2; exit 2; }; patches_dir=$(cd "$2" && pwd); shift 2 ;;
    *) echo "series.sh: unknown option '$1' (series.sh --help)" >&2; exit 2 ;;
  esac
done
[[ -f $build/compile_commands.json && -f $build/build.ninja ]] ||
  { echo "series.sh: $build is no llama.cpp build with compile_commands.json (scripts/llama.sh --build-only)" >&2; exit 2; }
tarball=$(ls "$root"/third_party/llama.cpp-*.tar.xz)
patches=("$patches_dir"/*.patch)
n=${#patches[@]}
fail() { echo "series.sh: FAIL: $*" >&2; exit 1; }

# The tree the whole series was built from, as the compile commands name it.
src=$(cat "$build/.source" 2>/dev/null || sed -nE 's/^LLAMA_SOURCE_DIR:PATH=(.*)/\1/p' "$build/CMakeCache.txt")
[[ -d $src ]] || { echo "series.sh: cannot tell which tree $build was built from" >&2; exit 2; }

rm -rf "$work" && mkdir -p "$work"
tar -xJf "$tarball" -C "$work"
tree="$work/llama.cpp"
ninja -C "$build" -t deps > "$work/deps.txt"

# Every file the series changes, and the commands and includers that file needs.
python3 - "$build/compile_commands.json" "$work/deps.txt" "$src" "$root/include" "$work/plan.json" "${patches[@]}" <<'EOF'
import json, re, sys, shlex
commands_file, deps_file, src, tpar_include, out, *patches = sys.argv[1:]
under = lambda f: f.startswith(src + "/")
rel = lambda f: f[len(src) + 1:]
sources = (".c", ".cpp")
entries = {}  # a compiled file (a source of the tree, or a unity file of the build) -> (directory, command)
for c in json.load(open(commands_file)):
    entries.setdefault(c["file"], (c["directory"], c.get("command") or shlex.join(c["arguments"])))
deps, obj = {}, None  # object -> the files it was compiled from, its source first
for line in open(deps_file):
    if line.strip() and not line.startswith(" "):
        obj = line.split(":")[0]
        deps[obj] = []
    elif line.strip() and obj:
        deps[obj].append(line.strip())
commands, includers = {}, {}  # a source -> its command; a header -> the sources that include it
for d in deps.values():
    if not d or d[0] not in entries:
        continue
    directory, command = entries[d[0]]
    # a unity file (llama.cpp's libraries build that way) includes several sources: each
    # of them compiles on its own with the unity file's flags
    members = [x for x in d if under(x) and x.endswith(sources)]
    for m in members:
        commands.setdefault(rel(m), (directory, command if m == d[0] else command.replace(d[0], m)))
    for h in d:
        if under(h) and not h.endswith(sources):
            includers.setdefault(rel(h), []).extend(rel(m) for m in members)
touched = []
for p in patches:
    files = sorted(set(re.findall(r"^diff --git a/(\S+) b/", open(p, errors="replace").read(), re.M)))
    touched.append(files)
changed = sorted({f for files in touched for f in files})
plan = []
for files in touched:
    units, configure = [], False
    for f in files:
        if f.endswith((".c", ".cpp")) and f in commands:
            units.append(f)
        elif f.endswith((".h", ".hpp")):
            inc = [u for u in includers.get(f, []) if u in changed and u in commands]
            units += inc or [u for u in includers.get(f, [])[:1] if u in commands]
        elif f.endswith(("CMakeLists.txt", ".cmake")):
            configure = True
        elif f.endswith(".cpp"):  # a file the build compiles outside its commands (the shader generator)
            units.append(f)
    plan.append({"units": sorted(set(units)), "configure": configure})
json.dump({"plan": plan, "commands": commands, "tpar_include": tpar_include}, open(out, "w"))
EOF

# compile UNIT ON|OFF: -fsyntax-only with the build's flags on the partly patched tree
compile() {
  python3 - "$work/plan.json" "$1" "$2" "$src" "$tree" <<'EOF'
import json, shlex, subprocess, sys
plan, unit, mode, src, tree = sys.argv[1:]
p = json.load(open(plan))
if unit in p["commands"]:
    directory, command = p["commands"][unit]
    args = shlex.split(command)
else:  # the shader generator: a host program of its own build
    directory, args = tree, ["c++", "-std=c++17", "-c", src + "/" + unit]
out, skip = [], False
for a in args:
    if skip:
        skip = False
        continue
    if a in ("-o", "-MF", "-MT"):
        skip = True
        continue
    if a in ("-c", "-MD"):
        continue
    if mode == "OFF" and (a == "-DGGML_VULKAN_TPAR" or a == "-I" + p["tpar_include"]):
        continue
    if mode == "OFF" and a == "-std=gnu++20" and "ggml-vulkan" in unit:
        a = "-std=gnu++17"
    out.append(a.replace(src, tree))
out.append("-fsyntax-only")
r = subprocess.run(out, cwd=directory, capture_output=True, text=True)
if r.returncode:
    sys.stderr.write("\n".join([l for l in r.stderr.splitlines() if "error" in l][:12]) + "\n")
sys.exit(r.returncode)
EOF
}

configure() {  # ON|OFF: llama.cpp's CMake with Vulkan (the libraries only), as far as configuring goes
  local flag=OFF; [[ $1 == ON ]] && flag=ON
  cmake -S "$tree" -B "$work/cfg-$1" -G Ninja -DGGML_VULKAN=ON -DGGML_VULKAN_TPAR=$flag -DGGML_VULKAN_TPAR_DIR="$root" \
        -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_OPENSSL=OFF > "$work/cfg-$1.log" 2>&1
}

for ((k = 0; k < n; ++k)); do
  p=${patches[$k]} name=$(basename "${patches[$k]}")
  subject=$(sed -n 's/^Subject: //p' "$p" | head -1)
  [[ $subject == "[PATCH $((k + 1))/$n]"* ]] || fail "$name: its header says '${subject%%]*}]', not [PATCH $((k + 1))/$n]"
  patch -d "$tree" -p1 --forward --batch --quiet < "$p" > "$work/patch.log" 2>&1 ||
    { cat "$work/patch.log" >&2; fail "$name does not apply after the patches before it"; }
  start=$SECONDS
  mapfile -t units < <(python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["plan"][int(sys.argv[2])]["units"]))' "$work/plan.json" "$k" | sed '/^$/d')
  conf=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["plan"][int(sys.argv[2])]["configure"]))' "$work/plan.json" "$k")
  if [[ $conf == 1 ]]; then
    for mode in ON OFF; do configure $mode || { tail -20 "$work/cfg-$mode.log" >&2; fail "$name: ggml's CMake does not configure with GGML_VULKAN_TPAR=$mode"; }; done
  fi
  for u in "${units[@]}"; do
    for mode in ON OFF; do
      compile "$u" $mode || fail "$name: $u does not compile with GGML_VULKAN_TPAR=$mode"
    done
  done
  echo "$name: applies; ${#units[@]} file(s) compile with tpar and without$([[ $conf == 1 ]] && echo ", CMake configures both ways") ($((SECONDS - start)) s)"
done
echo "series: all $n patches apply and compile with tpar and without, each on its own"

#!/usr/bin/env bash
# scripts/llama.sh --source DIR --patch-only, as a user with a llama.cpp checkout of their
# own runs it: on a clean copy of the pinned tree (every patch applies; the files are
# those that patch -p1 gives the pinned tree; a second run finds the series there and
# changes nothing; the undo the first run printed, the added files removed as it says, gives
# the files back as they were), on
# one with a local change near a patch (applies by a 3-way merge,
# which the run names, keeping the change), and on one with a local change where a patch
# changes the same lines (exit 1, the patch named, nothing in the checkout changed).
#   source.sh WORK
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=${1:?usage: source.sh WORK}
rm -rf "$work" && mkdir -p "$work"
tarball="$root/third_party/llama.cpp-$(sed -nE 's/^llama_commit=([0-9a-f]+).*/\1/p' "$root/scripts/llama.sh").tar.xz"
fail() { echo "FAIL (source): $*" >&2; exit 1; }
fresh() {  # NAME: a clean copy of the pinned tree in $work/NAME/llama.cpp
  mkdir -p "$work/$1" && tar -xJf "$tarball" -C "$work/$1"
}
sums() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
llama() {  # DIR: llama.sh --source DIR --patch-only; its stderr in $work/out, its exit status in $rc
  rc=0
  "$root/scripts/llama.sh" --source "$1" --patch-only --build-dir "$work/build" > "$work/out" 2>&1 || rc=$?
  sed 's/^/  | /' "$work/out"
}
file=ggml/src/ggml-vulkan/ggml-vulkan.cpp

echo "== the pinned tree, clean"
fresh reference
for p in "$root"/integrations/llama.cpp/patches/*.patch; do patch -d "$work/reference/llama.cpp" -p1 --batch --quiet < "$p"; done
fresh clean
pristine=$(sums "$work/clean/llama.cpp")
llama "$work/clean/llama.cpp"
[[ $rc -eq 0 ]] || fail "llama.sh --source on the pinned tree exited $rc"
diff -r "$work/reference/llama.cpp" "$work/clean/llama.cpp" > "$work/diff" ||
  { head -20 "$work/diff"; fail "the patched checkout differs from the pinned tree with patch -p1"; }
! grep -q "merged 3-way" "$work/out" || fail "a 3-way merge on the tree the series is made against"
cp "$work/out" "$work/first-run"
before=$(sums "$work/clean/llama.cpp")
echo "== the same checkout again"
llama "$work/clean/llama.cpp"
[[ $rc -eq 0 ]] || fail "the second run exited $rc"
grep -q "already applied" "$work/out" || fail "the second run did not find the series applied"
[[ "$(sums "$work/clean/llama.cpp")" == "$before" ]] || fail "the second run changed the checkout"
echo "== undone as the first run said"
undo=$(sed -nE 's/.*to undo: (cp -r [^ ]+ [^ ]+) .*/\1/p' "$work/first-run" | head -1)
[[ -n "$undo" ]] || fail "the first run said no way to undo"
$undo
# the files the series added (a shader), removed as the run said
added=$(sed -nE 's/.*remove what the series added: \(cd ([^ ]+) && rm (.*)\)$/\1 \2/p' "$work/first-run" | head -1)
if [[ -n "$added" ]]; then
  read -r dir files <<< "$added"
  (cd "$dir" && rm $files)
fi
[[ "$(sums "$work/clean/llama.cpp")" == "$pristine" ]] || fail "'$undo' did not give back the files as they were"

echo "== a local change two lines from patch 0003's"
fresh near
sed -i '/^    auto const submit_after = \[&\](int start, int end) {/{n;s|^        if (ctx->device->serialize_submissions) {$|        if (ctx->device->serialize_submissions) { // a local change|}' \
  "$work/near/llama.cpp/$file"
grep -q "a local change" "$work/near/llama.cpp/$file" || fail "the test's own edit found nothing to change"
llama "$work/near/llama.cpp"
[[ $rc -eq 0 ]] || fail "llama.sh --source exited $rc on a change the 3-way merge can take"
grep -q "merged 3-way.*answer the meta backend's AllReduce hook" "$work/out" || fail "the run did not name the patch it merged 3-way"
grep -q "a local change" "$work/near/llama.cpp/$file" || fail "the local change was lost"
grep -q "ctx->tpar.holding()" "$work/near/llama.cpp/$file" || fail "patch 0003's change is missing"

echo "== a local change on a line patch 0003 changes"
fresh conflict
sed -i 's|^    ctx->p->q->handle->submit(submit_infos, fence);$|    ctx->p->q->handle->submit(submit_infos, fence); // a local change|' "$work/conflict/llama.cpp/$file"
grep -q "a local change" "$work/conflict/llama.cpp/$file" || fail "the test's own edit found nothing to change"
before=$(sums "$work/conflict/llama.cpp")
llama "$work/conflict/llama.cpp"
[[ $rc -eq 1 ]] || fail "llama.sh --source exited $rc, not 1, where a patch conflicts"
grep -q "patch 0003 vulkan : answer the meta backend's AllReduce hook" "$work/out" || fail "the conflicting patch was not named"
grep -q "conflicts in: $file" "$work/out" || fail "the conflicting file was not named"
grep -q "nothing in it was changed" "$work/out" || fail "the run did not say the checkout is unchanged"
[[ "$(sums "$work/conflict/llama.cpp")" == "$before" ]] || fail "the checkout changed although a patch did not apply"

echo "== not a llama.cpp checkout"
rc=0
"$root/scripts/llama.sh" --source "$work/nowhere" --patch-only > "$work/out" 2>&1 || rc=$?
sed 's/^/  | /' "$work/out"
[[ $rc -eq 2 ]] || fail "--source on a folder that is not llama.cpp exited $rc, not 2"
echo "PASS (source)"

#!/usr/bin/env bash
# Checks the repository's Markdown files (README.md, CHANGELOG.md, docs/ and every other
# *.md a clone holds) for references a reader of a clone cannot follow:
#
# - a relative link that points at nothing in the clone, or out of the repository;
# - a path in backticks, a code block or prose whose first part is one of the
#   repository's top-level entries (docs/..., tests/..., scripts/..., a glob such as
#   shaders/*.comp included; tpar/... and ../tpar/... as written from beside the checkout)
#   and that names nothing in the clone, from the root, from the file's own folder
#   (examples/tp_mlp/README.md's shaders/) or from include/tpar/; and any shared/... or
#   ../... path that leaves the repository or names nothing in it. Other paths are not
#   checked: build directories (build-gpu/..., ignored by git), paths relative to
#   include/tpar/ (vk/device_group.hpp), test names (fault/, llama/build);
# - a link to a section (FILE.md#anchor, or #anchor in the same file) whose anchor no
#   heading of that file gives (GitHub's rule: lowercase, punctuation but - and _ dropped,
#   spaces as -, repeats numbered -1, -2);
# - a raw log named as raw/NAME.txt or perf/raw/NAME.txt that is not under docs/perf/raw/
#   (NAME-xN.txt stands for the -x2 and -x4 logs);
# - a Markdown file named bare (DESIGN.md) that no file of the clone is;
# - a commit quoted by its hash (7 to 40 hex digits with a letter and a digit, standing
#   alone: not inside a file name, a UUID or a URL) that is not a commit of the
#   repository. Hashes of third-party sources, which their archives under third_party/
#   carry in their names (llama.cpp-de3ff815.tar.xz) or third_party/README.md names
#   (the llama.cpp trees pinned before), are not ours; nor is
#   one written BRANCH@HASH (experiment/flags@afa9fe9): a commit of a branch that was
#   never merged, named as such.
#
# "In the clone" means tracked by git or new and not ignored (git ls-files -co
# --exclude-standard), so ignored build outputs never count. CHANGELOG.md speaks of files
# as they were: a path there passes if git's history knows it. Outside a git checkout the
# check falls back to the file system; there and in a shallow clone it says so and
# leaves commits, and the changelog's paths, unchecked.
#
# Prints each problem as FILE:LINE: message; exits 1 if there is one. Needs Python 3 (and
# git for the commit check). A ctest (doc_links) runs it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec python3 - "$root" <<'PY'
import fnmatch, os, re, subprocess, sys

root = sys.argv[1]


def git(*args, stdin=None):
    return subprocess.run(["git", "-C", root, *args], input=stdin, capture_output=True, text=True)


try:
    in_git = git("rev-parse", "--is-inside-work-tree").stdout.strip() == "true"
except OSError:  # no git at all
    in_git = False
if in_git:
    listed = git("ls-files", "-co", "--exclude-standard", "-z").stdout.split("\0")
    clone = {f for f in listed if f and os.path.lexists(os.path.join(root, f))}  # deleted, not yet committed: gone
else:
    print("check-doc-links: not a git checkout: paths checked against the file system, commits not checked")
    clone = set()
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".git") and not x.startswith("build")]
        clone |= {os.path.relpath(os.path.join(d, n), root) for n in names}
dirs = {os.path.dirname(f) for f in clone}
for d in list(dirs):
    while d:
        d = os.path.dirname(d)
        dirs.add(d)
top = {f.split("/", 1)[0] for f in clone}
basenames = {os.path.basename(f) for f in clone}
pinned = set()  # hashes in the names of third_party/ archives, and in its README
for f in clone:
    if f.startswith("third_party/"):
        pinned |= set(re.findall(r"[0-9a-f]{7,40}", os.path.basename(f)))
if os.path.exists(os.path.join(root, "third_party/README.md")):
    with open(os.path.join(root, "third_party/README.md")) as f:
        pinned |= set(re.findall(r"\b[0-9a-f]{7,40}\b", f.read()))


def exists(rel):  # rel: normalized, relative to the root
    rel = rel.rstrip("/")
    if rel in ("", "."):
        return True
    if any(ch in rel for ch in "*?["):
        return any(fnmatch.fnmatchcase(f, rel) for f in clone) or any(fnmatch.fnmatchcase(d, rel) for d in dirs)
    return rel in clone or rel in dirs


check_commits = in_git
if in_git and git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
    print("check-doc-links: a shallow clone: commits not checked")
    check_commits = False

files = sorted(f for f in clone if f.endswith(".md"))
url = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+")
link = re.compile(r"\]\(([^)\s]+)\)")
raw = re.compile(r"(?<![\w/.-])(?:docs/perf/raw/|perf/raw/|raw/)([\w.-]+\.txt)")
path = re.compile(r"(?<![\w/.~$@:=-])((?:\.\./)*[\w.-]+/[\w./*?-]*)")
bare_md = re.compile(r"(?<![\w/.~$@:=-])([\w-][\w.-]*\.md)(?![\w/-])")
sha = re.compile(r"(?<![\w./:@#=-])([0-9a-f]{7,40})(?![\w-])")

_anchors = {}


def anchors(rel):
    """The section anchors GitHub gives a Markdown file's headings (outside code blocks):
    lowercased, punctuation but '-' and '_' dropped, spaces as '-', repeats numbered."""
    if rel not in _anchors:
        seen, out, fence = {}, set(), False
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            for line in f:
                if line.lstrip().startswith("```"):
                    fence = not fence
                    continue
                m = None if fence else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
                if not m:
                    continue
                slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower().replace("`", "")).replace(" ", "-")
                n = seen.get(slug, 0)
                seen[slug] = n + 1
                out.add(slug if n == 0 else f"{slug}-{n}")
        _anchors[rel] = out
    return _anchors[rel]


problems = []  # (file, line, message)
hashes = {}  # hash -> [(file, line)]
for rel in files:
    here = os.path.dirname(rel)
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        lines = f.read().splitlines()
    for no, line in enumerate(lines, 1):
        text = url.sub(" ", line)
        report = lambda message: problems.append((rel, no, message))
        for target in link.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            target, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(here, target)) if target else rel
            if resolved.startswith(".."):
                report(f"link {target} points out of the repository")
            elif not exists(resolved):
                report(f"broken link {target}")
            elif anchor and resolved.endswith(".md") and resolved in clone and anchor not in anchors(resolved):
                report(f"link {target}#{anchor}: no such section in {resolved}")
        for name in raw.findall(text):
            names = [name.replace("-xN", "-x2"), name.replace("-xN", "-x4")] if "-xN" in name else [name]
            for n in names:
                if not exists("docs/perf/raw/" + n):
                    report(f"no raw log {n}")
        linked = set(link.findall(text))
        for token in path.findall(text):
            token = token.rstrip(".,;:")
            if token in linked or "-xN" in token:
                continue  # links are checked above; -xN names two logs
            # tpar/... and ../tpar/...: written from beside the checkout, as the docs name
            # it (add_subdirectory(tpar)); the rest is a path from the root.
            beside = re.match(r"(?:\.\./)*tpar/(.*)", token)
            if beside and beside.group(1).split("/", 1)[0] in top:
                token = beside.group(1)
            first = token.split("/", 1)[0]
            if first == "..":
                resolved = os.path.normpath(os.path.join(here, token))
                if resolved.startswith(".."):
                    report(f"{token} lies outside the repository")
                elif not exists(resolved):
                    report(f"no such path {token}")
            elif first == "shared" and not exists(token):
                report(f"{token} is not in the repository (shared/ lies outside it)")
            elif first in top and not any(exists(os.path.normpath(os.path.join(b, token))) for b in ("", here, "include/tpar")):
                # Also accepted: the path from the file's own folder (examples/tp_mlp/
                # README.md's shaders/), or from include/tpar/, as headers are named.
                # The changelog speaks of files as they were: one that git's history
                # knows passes there.
                # Without the whole history (no git, a shallow clone) its paths pass.
                if rel != "CHANGELOG.md" or (check_commits and not git("log", "-1", "--format=%h", "--", token).stdout.strip()):
                    report(f"no such path {token}")
        for name in bare_md.findall(text):
            if name not in basenames:
                report(f"no file of the repository is {name}")
        if check_commits:
            for h in sha.findall(text):
                ours = not any(p.startswith(h) or h.startswith(p) for p in pinned)
                if re.search(r"[a-f]", h) and re.search(r"[0-9]", h) and ours:
                    hashes.setdefault(h, []).append((rel, no))

if hashes:
    names = sorted(hashes)
    out = git("cat-file", "--batch-check", stdin="".join(h + "^{commit}\n" for h in names)).stdout.splitlines()
    for h, answer in zip(names, out):
        if answer.split()[1:2] != ["commit"]:  # "<sha> commit <size>", or "<name> missing|ambiguous"
            why = "is ambiguous" if "ambiguous" in answer else "is not a commit of the repository"
            for rel, no in hashes[h]:
                problems.append((rel, no, f"commit {h} {why}"))

for rel, no, message in sorted(problems):
    print(f"{rel}:{no}: {message}")
sys.exit(1 if problems else 0)
PY

#!/usr/bin/env python3
"""Every skip reaches ctest as a skip.

A test that cannot run here says so in a line it prints, and ctest counts it as skipped
only where that line matches the pattern the test is registered with (tests/CMakeLists.txt:
"[skipped]", SKIP_REGULAR_EXPRESSION) or the program exits with the skip return code
(77, SKIP_RETURN_CODE). A line that says "skipped" any other way is a pass to ctest: the
test checked nothing and reports success.

This scans the test sources, the example programs and the scripts for printing lines
(MESSAGE, printf, std::cout, echo, print, ...) whose text speaks of skipping, and fails
for each one that neither carries "[skipped]" nor exits 77 within the next few lines.

  check_skips.py [ROOT]     scan ROOT (default: the repository this file is in)
  check_skips.py --planted  check that the scan catches skip lines planted in a scratch
                            tree, and passes their honest forms
"""
import os
import re
import sys
import tempfile

PRINT = re.compile(r'\b(MESSAGE|WARN|INFO|printf|fprintf|puts|fputs)\s*\(|std::(cout|cerr)|\becho\b|\bprint\s*\(|\bmessage\s*\(')
SKIP_WORD = re.compile(r'\bskip(s|ped|ping)?\b', re.IGNORECASE)
HONEST = re.compile(r'\[skipped\]')
QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\'')
EXIT_77 = re.compile(r'\b(exit|return)\s*\(?\s*77\b')
FOLLOWING = 6  # lines after a skip line within which `exit 77` makes it honest
SOURCES = ('.c', '.cc', '.cpp', '.h', '.hpp', '.sh', '.py', '.cmake')
ROOTS = ('tests', 'examples', 'scripts')
SELF = os.path.abspath(__file__)


def scan_file(path):
    """(line number, text) of each dishonest skip line in `path`."""
    # CMakeLists.txt speak at configure time (message(STATUS ...)), not to ctest.
    if os.path.basename(path) == 'CMakeLists.txt' or os.path.abspath(path) == SELF:
        return []
    try:
        with open(path, encoding='utf-8', errors='replace') as f:
            lines = f.read().split('\n')
    except OSError:
        return []
    bad = []
    for i, line in enumerate(lines):
        if not PRINT.search(line):
            continue
        # only the quoted text counts: a skip word in code (a variable) says nothing
        quoted = ' '.join(a or b for a, b in QUOTED.findall(line))
        if not SKIP_WORD.search(quoted):
            continue
        if HONEST.search(line):
            continue
        if any(EXIT_77.search(l) for l in lines[i:i + FOLLOWING + 1]):
            continue
        bad.append((i + 1, line.strip()))
    return bad


def scan(root):
    bad = []
    for top in ROOTS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if not d.startswith('build') and d != '__pycache__']
            for name in sorted(filenames):
                if name.endswith(SOURCES):
                    path = os.path.join(dirpath, name)
                    bad += [(os.path.relpath(path, root), n, text) for n, text in scan_file(path)]
    return bad


def planted():
    cases = {
        # (file, text, flagged?)
        'tests/a/test_a.cpp': ('  MESSAGE("skipped: no GPU here");\n  return;\n', True),
        'tests/a/test_b.cpp': ('  MESSAGE("[skipped] no GPU here");\n  return;\n', False),
        'tests/a/test_c.cpp': ('  MESSAGE("range " << r << ": too large, skipped");\n', True),
        'tests/a/test_d.c': ('  printf("Skipping: no device\\n");\n  return 0;\n', True),
        'tests/a/test_e.c': ('  printf("skipping: no device\\n");\n  return 77;\n', False),
        'tests/b/run.sh': ('echo "skipped: no compiler"\nexit 0\n', True),
        'tests/b/run77.sh': ('echo "skipped: no compiler"\nexit 77\n', False),
        'examples/x.cpp': ('std::cout << "SKIPPED (no glslc)\\n";\n', True),
        'scripts/y.py': ('print("skipped, nothing to do")\n', True),
        'tests/a/test_f.cpp': ('  const bool skip = true;  MESSAGE("checking " << skip);\n', False),
    }
    failures = 0
    with tempfile.TemporaryDirectory() as root:
        for rel, (text, _) in cases.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'w') as f:
                f.write(text)
        flagged = {path for path, _, _ in scan(root)}
        for rel, (_, want) in cases.items():
            got = rel in flagged
            if got != want:
                failures += 1
                print(f'planted {rel}: {"flagged" if got else "passed"}, expected {"flagged" if want else "passed"}')
    print(f'{len(cases)} planted files, {failures} judged wrongly')
    return 1 if failures else 0


def main(argv):
    if len(argv) > 1 and argv[1] in ('-h', '--help'):
        print(__doc__.strip())
        return 0
    if len(argv) > 1 and argv[1] == '--planted':
        return planted()
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith('-')):
        print('usage: check_skips.py [ROOT | --planted]', file=sys.stderr)
        return 2
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.dirname(SELF)))
    bad = scan(root)
    for path, n, text in bad:
        print(f'{path}:{n}: a skip ctest would count as a pass (print "[skipped] ..." or exit 77): {text}')
    print(f'{len(bad)} skip lines that bypass the registered pattern')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))

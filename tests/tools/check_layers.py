#!/usr/bin/env python3
"""Every arrow runs down: a layer includes only layers below it, and no example names
tpar's internals.

The layers of include/tpar, lowest first:

  core < detail < vk < staging < sync < algo < comm < plan < integrations

A header under include/tpar/<layer>/ (its own detail/ included) may include tpar's
headers of its own layer and of the layers below, never one above. include/tpar/detail/
is the drawer the layers above core share (dispatch, SPIR-V, alignment, wide
arithmetic, the wire codec): it may include core only; core's own helpers live in
core/detail/. The headers directly in include/tpar/ (tpar.hpp, tpar.h, c_api_impl.hpp)
gather every layer and are above them all.

An example program (examples/) uses tpar as a host does: it names no `tpar::detail`
and includes no header under a detail/ folder.

comm/ asks what a schedule is by its typed fields (Schedule::transport, takes_relay),
never by comparing an algorithm's name: no `algorithm ==`, `== Relay::name`, ... there.

  check_layers.py [ROOT]     check ROOT (default: the repository this file is in)
  check_layers.py --planted  check that a scratch tree with an arrow up and an example
                             naming tpar::detail fails, and its honest form passes
"""
import os
import re
import sys
import tempfile

LAYERS = ['core', 'detail', 'vk', 'staging', 'sync', 'algo', 'comm', 'plan', 'integrations']
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]tpar/([^>"]+)[>"]')
NAMES_DETAIL = re.compile(r'\btpar\s*::\s*(?:inline\s+)?(?:v0\s*::\s*)?detail\b')
INCLUDES_DETAIL = re.compile(r'^\s*#\s*include\s*[<"]tpar/(?:[^>"]*/)?detail/')
SOURCES = ('.c', '.cc', '.cpp', '.h', '.hpp')
NAME_COMPARE = re.compile(r'\balgorithm\s*[!=]=|[!=]=\s*[\w:]*\balgorithm\b|\b\w+::name\s*[!=]=|[!=]=\s*\w+::name\b|'
                          r'\balgorithm\b[^;]*\.compare\(|[!=]=\s*"(?:relay|ring|oneshot|auto)"')


def rank(path_in_tpar):
    """The layer of a path under include/tpar/ (None: a header of the top, tpar.hpp...)."""
    first = path_in_tpar.split('/', 1)[0]
    if '/' not in path_in_tpar:
        return None
    return LAYERS.index(first) if first in LAYERS else None


def strip_comments(text):
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    return '\n'.join(line.split('//', 1)[0] for line in text.split('\n'))


def check(root):
    problems = []
    top = os.path.join(root, 'include', 'tpar')
    for dirpath, _, files in os.walk(top):
        for name in sorted(files):
            if not name.endswith(('.hpp', '.h')):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, top).replace(os.sep, '/')
            own = rank(rel)
            first = rel.split('/', 1)[0]
            if '/' in rel and first not in LAYERS:
                problems.append(f'include/tpar/{rel}: in no layer (known: {", ".join(LAYERS)})')
                continue
            if own is None:
                continue
            with open(path, encoding='utf-8', errors='replace') as f:
                lines = strip_comments(f.read()).split('\n')
            for i, line in enumerate(lines):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = rank(m.group(1))
                if target is None or target > own:
                    what = m.group(1).split('/', 1)[0] if target is not None else m.group(1)
                    problems.append(f'include/tpar/{rel}:{i + 1}: {LAYERS[own]} includes tpar/{m.group(1)} '
                                    f'({what}: above {LAYERS[own]})')
    comm = os.path.join(top, 'comm')
    for dirpath, _, files in os.walk(comm):
        for name in sorted(files):
            if not name.endswith(('.hpp', '.h')):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, '/')
            with open(path, encoding='utf-8', errors='replace') as f:
                lines = strip_comments(f.read()).split('\n')
            for i, line in enumerate(lines):
                if NAME_COMPARE.search(line):
                    problems.append(f'{rel}:{i + 1}: comm/ compares an algorithm\'s name: {line.strip()}')
    examples = os.path.join(root, 'examples')
    for dirpath, _, files in os.walk(examples):
        for name in sorted(files):
            if not name.endswith(SOURCES):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, '/')
            with open(path, encoding='utf-8', errors='replace') as f:
                lines = strip_comments(f.read()).split('\n')
            for i, line in enumerate(lines):
                if NAMES_DETAIL.search(line) or INCLUDES_DETAIL.match(line):
                    problems.append(f'{rel}:{i + 1}: an example uses tpar\'s internals: {line.strip()}')
    return problems


def planted():
    """The check fails on a tree with the arrows it forbids, and passes its honest form."""
    def tree(d, files):
        for rel, text in files.items():
            path = os.path.join(d, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'w') as f:
                f.write(text)
    honest = {
        'include/tpar/core/options.hpp': '#include <tpar/core/detail/known_enum.hpp>\n',
        'include/tpar/core/detail/known_enum.hpp': '#include <tpar/core/error.hpp>\n',
        'include/tpar/detail/dispatch.hpp': '#include <tpar/core/error.hpp>\n',
        'include/tpar/comm/communicator.hpp': ('#include <tpar/algo/request.hpp>\n#include <tpar/comm/detail/plan.hpp>\n'
                                               'bool r = takes_relay(plan.schedule);  // not algorithm == Relay::name\n'
                                               'log(std::string(plan.schedule.algorithm) + " runs");\n'),
        'include/tpar/tpar.hpp': '#include <tpar/integrations/ggml.hpp>\n',
        'examples/tool.cpp': '// not tpar::detail::wait_all, but tpar::wait\n#include <tpar/tpar.hpp>\nint main() {}\n',
    }
    bad = [
        ('include/tpar/core/options.hpp', '#include <tpar/detail/known_enum.hpp>\n', 'core includes tpar/detail/known_enum.hpp'),
        ('include/tpar/detail/dispatch.hpp', '#include <tpar/vk/device.hpp>\n', 'detail includes tpar/vk/device.hpp'),
        ('include/tpar/sync/schedule.hpp', '#include <tpar/comm/detail/plan.hpp>\n', 'sync includes tpar/comm/detail/plan.hpp'),
        ('include/tpar/plan/split.hpp', '#include <tpar/tpar.hpp>\n', 'plan includes tpar/tpar.hpp'),
        ('include/tpar/extra/thing.hpp', '\n', 'in no layer'),
        ('examples/tool.cpp', 'void f() { tpar::detail::wait_all(); }\n', 'an example uses'),
        ('examples/tool.cpp', '#include <tpar/comm/detail/remains.hpp>\n', 'an example uses'),
        ('include/tpar/comm/communicator.hpp', 'bool r = plan.schedule.algorithm == Relay::name;\n', 'compares an algorithm'),
        ('include/tpar/comm/detail/cache.hpp', 'if (Relay::name == s.algorithm) {}\n', 'compares an algorithm'),
        ('include/tpar/comm/stream.hpp', 'if (last.algorithm != "relay") {}\n', 'compares an algorithm'),
    ]
    failures = []
    with tempfile.TemporaryDirectory() as d:
        tree(d, honest)
        if check(d):
            failures.append(f'the honest tree fails: {check(d)}')
    for rel, text, expect in bad:
        with tempfile.TemporaryDirectory() as d:
            tree(d, honest)
            tree(d, {rel: text})
            found = check(d)
            if not any(expect in p for p in found):
                failures.append(f'planted {rel} ({text.strip()!r}) not caught as "{expect}": {found}')
    for f in failures:
        print(f'check_layers.py --planted: {f}')
    if not failures:
        print(f'check_layers.py --planted: {len(bad)} planted arrows caught, the honest tree passes')
    return 1 if failures else 0


def main(argv):
    if argv[1:] == ['--planted']:
        return planted()
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith('-')):
        print(__doc__.strip())
        return 0 if argv[1:] in (['--help'], ['-h']) else 2
    root = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
    problems = check(root)
    for p in problems:
        print(p)
    print(f'check_layers.py: {len(problems)} arrow(s) up or internals named' if problems else
          'check_layers.py: every include runs down, no example names tpar::detail, comm/ compares no algorithm names')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))

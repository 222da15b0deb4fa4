#!/usr/bin/env python3
"""Every environment override in Options' table (include/tpar/core/options.hpp,
detail::env_options()) is named where users read of them: docs/api.md and the table of
docs/integrating-ggml.md; and no TPAR_ variable those name as an Options override is
missing from the table.

  check_env_docs.py [ROOT]      exit 0: they agree; 1: what differs is printed
"""
import pathlib
import re
import sys


def table_vars(options_hpp):
    text = options_hpp.read_text()
    body = text[text.index("env_options()"):text.index("Options::with_environment() const {")]
    return re.findall(r'\{"(TPAR_[A-Z0-9_]+)"', body)


def main(argv):
    if len(argv) > 1 and argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    root = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
    names = table_vars(root / "include/tpar/core/options.hpp")
    if len(names) < 9:
        print(f"check_env_docs: found {len(names)} rows in detail::env_options(); expected the table's nine or more")
        return 1
    bad = []
    api = (root / "docs/api.md").read_text()
    # docs/api.md's Options block lists what with_environment() applies
    block = api[api.index("with_environment();"):]
    block = block[:block.index("```")]
    for n in names:
        if n not in block:
            bad.append(f"docs/api.md: with_environment()'s list does not name {n}")
    for n in re.findall(r"TPAR_[A-Z0-9_]+", block):
        if n not in names:
            bad.append(f"docs/api.md: with_environment()'s list names {n}, which the table has no row for")
    ggml = (root / "docs/integrating-ggml.md").read_text()
    rows = set(re.findall(r"^\| `(TPAR_[A-Z0-9_]+)` \|", ggml, re.M))
    for n in names:
        if n not in rows:
            bad.append(f"docs/integrating-ggml.md: the environment table has no row for {n}")
    for line in bad:
        print(line)
    if not bad:
        print(f"check_env_docs: the {len(names)} overrides of detail::env_options() are named in docs/api.md and docs/integrating-ggml.md")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""Size rules of the tree: no source file in lib/, backends/ or apps/ over
500 lines, no function over 60 lines.

Usage: scripts/lint/check_sizes.py [--max-file N] [--max-function N] [ROOT]
Exit 0 when every file and function fits, 1 otherwise (one line per offender).

A function is a brace block opened at the end of a line that looks like a
definition (a parameter list closes before the brace) at namespace or class
scope; lambdas and control blocks inside it count towards it. Test files
(*_test.cpp, tests/) are not checked.
"""
import argparse
import pathlib
import re
import sys

from tree import sources, verdict

DIRS = ("lib", "backends", "apps")
DEF_RE = re.compile(r"\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(->\s*[\w:<>,\s*&]+)?\s*(:.*)?\{\s*$")
CONTROL_RE = re.compile(r"^\s*(if|for|while|switch|catch|else|do|try)\b")


def strip(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return line.split("//", 1)[0]


def functions(lines):
    """Yields (name line, first line number, length) of top-level function bodies."""
    depth, start, scope_depths, in_comment = 0, None, [], False
    for i, raw in enumerate(lines, 1):
        line = raw
        if in_comment:
            if "*/" not in line:
                continue
            line, in_comment = line.split("*/", 1)[1], False
        if "/*" in line and "*/" not in line:
            line, in_comment = line.split("/*", 1)[0], True
        code = strip(line)
        if start is None and code.rstrip().endswith("{"):
            is_scope = re.match(r"^\s*(namespace|class|struct|union|enum|extern)\b", code) or \
                re.search(r"\b(class|struct)\s+\w+[^()]*\{\s*$", code)
            if is_scope:
                scope_depths.append(depth)
            elif DEF_RE.search(code) and not CONTROL_RE.match(code) and \
                    (depth == 0 or (scope_depths and depth == scope_depths[-1] + 1)):
                start = (i, raw.strip())
                start_depth = depth
        depth += code.count("{") - code.count("}")
        while scope_depths and depth <= scope_depths[-1]:
            scope_depths.pop()
        if start is not None and depth <= start_depth:
            yield start[1], start[0], i - start[0] + 1
            start = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=pathlib.Path(__file__).resolve().parents[2])
    ap.add_argument("--max-file", type=int, default=500)
    ap.add_argument("--max-function", type=int, default=60)
    a = ap.parse_args()
    root = pathlib.Path(a.root)
    bad = []
    for p, rel in sources(root, DIRS):
        if p.name.endswith("_test.cpp"):
            continue
        lines = p.read_text(errors="replace").splitlines()
        if len(lines) > a.max_file:
            bad.append(f"{rel}: {len(lines)} lines (max {a.max_file})")
        for sig, first, n in functions(lines):
            if n > a.max_function:
                bad.append(f"{rel}:{first}: function of {n} lines (max {a.max_function}): {sig[:70]}")
    return verdict("check_sizes", bad, "over the limits", "all files and functions fit")


if __name__ == "__main__":
    sys.exit(main())

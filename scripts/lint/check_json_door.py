#!/usr/bin/env python3
"""One door to nlohmann::json: every source file includes "taoquant/json.h",
never <nlohmann/json.hpp> itself.

taoquant/json.h defines JSON_ASSERT to throw before the library is first
included, so that reading a key a const json lacks is an error in release
builds too, not undefined behaviour. A direct include that comes first in a
translation unit would silently turn that back off.

Usage: scripts/lint/check_json_door.py [ROOT]
Exit 0 when no file but the door includes the library, 1 otherwise (one line
per offender: file:line).
"""
import pathlib
import re
import sys

from tree import sources, verdict

DIRS = ("apps", "backends", "exporters", "lib", "tests")
DOOR = pathlib.Path("lib/include/taoquant/json.h")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]nlohmann/json\.hpp[>"]')


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
    bad = []
    for p, rel in sources(root, DIRS):
        if rel == DOOR:
            continue
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if INCLUDE_RE.match(line):
                bad.append(f'{rel}:{n}: includes <nlohmann/json.hpp>; include "taoquant/json.h"')
    return verdict("check_json_door", bad, "direct includes", "one door")


if __name__ == "__main__":
    sys.exit(main())

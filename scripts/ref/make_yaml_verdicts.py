#!/usr/bin/env python3
"""Records PyYAML's verdict on every YAML file of the spec corpus.

The corpus is tests/data/yaml_corpus/*.yaml (crafted good and broken specs)
and the example specs (specs/**/*.yaml). For each file the verdict is what
TAO's own loader does with it: PyYAML's safe loader (pure Python, as
yaml.safe_load uses), with the duplicate-key check OmegaConf adds on top of
it (OmegaConf reads TAO's specs and refuses a key given twice). A refusal
records the 1-based line PyYAML names, or null when PyYAML names none (a
RecursionError on deep nesting).

The C++ test tests/unit/test_yaml_corpus.cpp checks that tao-quant's reader
agrees on every case. Rerun after adding a case:

    python3 scripts/ref/make_yaml_verdicts.py   # needs python3-yaml
"""
import json
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "yaml_corpus"
OUT = CORPUS / "verdicts.json"


class TaoLoader(yaml.SafeLoader):
    """yaml.SafeLoader + OmegaConf's refusal of duplicate keys."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue  # the safe constructor refuses unhashable keys itself
            if key_node.value in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    "found duplicate key %s" % key_node.value, key_node.start_mark)
            seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


def verdict(path):
    data = path.read_bytes()
    try:
        yaml.load(data, Loader=TaoLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        return {"verdict": "refuse", "line": line, "error": " ".join(str(e).split())[:300]}
    except Exception as e:  # noqa: BLE001 -- any exception is a refusal (as TAO sees it)
        return {"verdict": "refuse", "line": None,
                "error": (type(e).__name__ + ": " + " ".join(str(e).split()))[:300]}
    return {"verdict": "accept"}


def main():
    files = sorted(CORPUS.glob("*.yaml")) + sorted((ROOT / "specs").rglob("*.yaml"))
    cases = []
    for f in files:
        case = {"file": str(f.relative_to(ROOT))}
        case.update(verdict(f))
        cases.append(case)
    doc = {
        "generator": "scripts/ref/make_yaml_verdicts.py",
        "reference": "PyYAML %s yaml.SafeLoader (pure Python) + OmegaConf's duplicate-key check"
                     % yaml.__version__,
        "python_recursion_limit": sys.getrecursionlimit(),
        "cases": cases,
    }
    OUT.write_text(json.dumps(doc, indent=1, ensure_ascii=True) + "\n")
    refused = sum(c["verdict"] == "refuse" for c in cases)
    print("%s: %d cases, %d refused, %d accepted" % (OUT.relative_to(ROOT), len(cases), refused,
                                                     len(cases) - refused))


if __name__ == "__main__":
    main()

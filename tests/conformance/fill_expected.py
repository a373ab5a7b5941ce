"""Fills (or checks) the `expected` values of a conformance table from nanobot 0.3.5.

Run with the reference venv, from the repository root:

    /work/ref035/bin/python tests/conformance/fill_expected.py tests/conformance/<area>.json
    /work/ref035/bin/python tests/conformance/fill_expected.py --check tests/conformance/<area>.json

Each case's `function` names an entry of the table's `reference` map
(`"module.path:callable"`). The callable gets the case's `args` list, or else its `input` as
the only argument; what it returns (JSON-serialisable) becomes `expected`.
"""

import argparse
import importlib
import json
import sys


def load_reference(spec: str):
    module_name, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def call(fn, case: dict):
    if "args" in case:
        return fn(*case["args"])
    return fn(case["input"])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="report differences, write nothing")
    parser.add_argument("tables", nargs="+")
    opts = parser.parse_args()
    mismatches = 0
    for path in opts.tables:
        with open(path, encoding="utf-8") as f:
            table = json.load(f)
        refs = {name: load_reference(spec) for name, spec in table["reference"].items()}
        for case in table["cases"]:
            got = call(refs[case["function"]], case)
            if opts.check and case.get("expected") != got:
                mismatches += 1
                print(f"{path}: {case['name']}: expected {case.get('expected')!r}, 0.3.5 gives {got!r}")
            case["expected"] = got
        if not opts.check:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(table, f, ensure_ascii=False, indent=2)
                f.write("\n")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

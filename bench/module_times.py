"""Seconds per test module, before and after a change, from pytest's junit files.

    python bench/module_times.py BEFORE.xml[,BEFORE2.xml] AFTER.xml [AFTER2.xml ...]

prints a markdown table (docs/benchmarks/test-times.md). A module's seconds are the sum of
its tests' junit times, setup and teardown included; several AFTER files (make test's two
passes) are added together, as are BEFORE files joined by commas. On several workers a
pass's modules add up to more than its wall time.
"""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter


def per_module(paths: list[str]) -> tuple[Counter, Counter]:
    """(seconds, tests) by module over every testcase of the given junit files."""
    seconds: Counter = Counter()
    tests: Counter = Counter()
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            seconds[case.attrib["classname"]] += float(case.attrib["time"])
            tests[case.attrib["classname"]] += 1
    return seconds, tests


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit(__doc__)
    before, tests_before = per_module(argv[0].split(","))
    after, tests_after = per_module(argv[1:])
    modules = sorted(set(before) | set(after), key=lambda m: -max(before[m], after[m]))
    print("| module | tests before | seconds before | tests after | seconds after |")
    print("|---|---:|---:|---:|---:|")
    for m in modules:
        print(f"| `{m}` | {tests_before[m]} | {before[m]:.0f} | {tests_after[m]} | {after[m]:.0f} |")
    print(f"| all | {sum(tests_before.values())} | {sum(before.values()):.0f} "
          f"| {sum(tests_after.values())} | {sum(after.values()):.0f} |")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Print how many tests under tests/real passed in a pytest JUnit XML report (dev/test, CI=true)."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def count_real_passed(path: str) -> int:
    n = 0
    for case in ET.parse(path).getroot().iter("testcase"):
        if not (case.get("classname") or "").startswith("tests.real."):
            continue
        if any(child.tag in ("skipped", "failure", "error") for child in case):
            continue
        n += 1
    return n


if __name__ == "__main__":
    print(count_real_passed(sys.argv[1]))

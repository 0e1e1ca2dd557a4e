"""Name the tests CI's second run let through: each test that failed in the first run and
passed in the re-run is printed as flaky, with its first failure, so a flake is seen and fixed
rather than hidden by the re-run. Usage: flaky_report.py FIRST_JUNIT_XML RERUN_JUNIT_XML
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

FAILURE_TAGS = ("failure", "error")
SHOWN_LINES = 40  # the tail of each first failure


def outcomes(path: Path) -> dict[str, str | None]:
    """Test id → its failure text, or None when it passed (skips are left out)."""
    result: dict[str, str | None] = {}
    if not path.exists():
        return result
    for case in ET.parse(path).iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("skipped") is not None:
            continue
        failed = [child for child in case if child.tag in FAILURE_TAGS]
        if failed:
            text = "\n".join(filter(None, (f.get("message", "") + "\n" + (f.text or "") for f in failed)))
            previous = result.get(test_id)
            result[test_id] = (previous + "\n" if previous else "") + text
        elif test_id not in result:
            result[test_id] = None
    return result


def main(first: str, rerun: str) -> int:
    before, after = outcomes(Path(first)), outcomes(Path(rerun))
    flaky = [t for t, failure in before.items() if failure is not None and t in after and after[t] is None]
    still = [t for t, failure in after.items() if failure is not None]
    if not flaky and not still:
        return 0
    print("=" * 78)
    for test_id in flaky:
        print(f"FLAKY (failed, then passed on the re-run): {test_id}")
        lines = (before[test_id] or "").strip().splitlines()
        print("  first failure:")
        for line in lines[-SHOWN_LINES:]:
            print(f"    {line}")
    for test_id in still:
        print(f"FAILED twice: {test_id}")
    print(f"{len(flaky)} flaky test(s), {len(still)} failed twice.")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))

"""Name the tests CI's second run let through, and fail CI for them.

Each test that failed in the first run and passed in the re-run is printed as flaky, with its
first failure, and makes this script exit 1: the re-run keeps a loaded machine from blocking a
landing by a test that fails twice, never by a flake. The one way through is the quarantine
list, `tests/quarantine.txt`: one line per test, `node id | cause | date (YYYY-MM-DD)`, tracked in
git so that a quarantined flake is seen in review and has a named cause. Keep it empty.

Usage: flaky_report.py FIRST_JUNIT_XML RERUN_JUNIT_XML [QUARANTINE_FILE]
Exit: 0 when no test passed only on the re-run (or every such test is quarantined), 1 otherwise
or when the quarantine list is malformed.
"""

from __future__ import annotations

import datetime
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

FAILURE_TAGS = ("failure", "error")
SHOWN_LINES = 40  # the tail of each first failure
QUARANTINE = Path(__file__).resolve().parent.parent / "tests" / "quarantine.txt"


class QuarantineError(ValueError):
    """A line of the quarantine list that does not name a test, a cause and a date."""


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


def junit_id(node_id: str) -> str:
    """A pytest node id (`tests/test_a.py::TestB::test_c[x]`) as the junit report names it
    (`tests.test_a.TestB::test_c[x]`), so the list can be written in pytest's own words."""
    path, *parts = node_id.strip().split("::")
    if not parts:
        raise QuarantineError(f"not a test node id: {node_id!r}")
    module = path.removesuffix(".py").replace("/", ".")
    return f"{'.'.join([module, *parts[:-1]])}::{parts[-1]}"


def read_quarantine(path: Path) -> dict[str, str]:
    """Junit id → 'cause (date)' for every quarantined test; blank lines and `#` comments skipped."""
    entries: dict[str, str] = {}
    if not path.exists():
        return entries
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [field.strip() for field in line.split("|")]
        if len(fields) != 3 or not all(fields):
            raise QuarantineError(f"{path}:{number}: want 'node id | cause | YYYY-MM-DD', got {line!r}")
        node_id, cause, date = fields
        try:
            datetime.date.fromisoformat(date)
        except ValueError:
            raise QuarantineError(f"{path}:{number}: {date!r} is not a date (YYYY-MM-DD)") from None
        entries[junit_id(node_id)] = f"{cause} ({date})"
    return entries


def main(first: str, rerun: str, quarantine: str | None = None) -> int:
    try:
        quarantined = read_quarantine(Path(quarantine) if quarantine else QUARANTINE)
    except QuarantineError as exc:
        print(f"The quarantine list is malformed: {exc}")
        return 1
    before, after = outcomes(Path(first)), outcomes(Path(rerun))
    flaky = [t for t, failure in before.items() if failure is not None and t in after and after[t] is None]
    still = [t for t, failure in after.items() if failure is not None]
    if not flaky and not still:
        return 0
    print("=" * 78)
    for test_id in flaky:
        label = f"QUARANTINED: {quarantined[test_id]}" if test_id in quarantined else "FLAKY"
        print(f"{label} (failed, then passed on the re-run): {test_id}")
        lines = (before[test_id] or "").strip().splitlines()
        print("  first failure:")
        for line in lines[-SHOWN_LINES:]:
            print(f"    {line}")
    for test_id in still:
        print(f"FAILED twice: {test_id}")
    unlisted = [t for t in flaky if t not in quarantined]
    print(f"{len(flaky)} flaky test(s), {len(still)} failed twice.")
    if unlisted:
        print(
            f"{len(unlisted)} test(s) passed only on the re-run and are not in the quarantine list: "
            "a flake fails CI. Find its cause (or, exceptionally, add it to tests/quarantine.txt "
            "with its cause and the date)."
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))

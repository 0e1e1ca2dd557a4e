"""CI's re-run must not hide a flake: scripts/flaky_report.py names every test that failed
first and passed on the re-run, with its first failure, and every test that failed twice, and
fails CI for a flake unless tests/quarantine.txt names it with a cause and a date."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TESTS = """
from pathlib import Path
def test_flaky():
    seen = Path(__file__).with_name("seen")
    if not seen.exists():
        seen.touch()
        assert 1 == 2, "the first run fails here"
def test_steady():
    pass
def test_broken():
    assert False, "fails every time"
"""


def _pytest(where: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args], cwd=where, capture_output=True, text=True, timeout=120
    )


def _report(where: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "flaky_report.py"), *args],
        cwd=where,
        capture_output=True,
        text=True,
    )


def _two_runs(where: Path) -> None:
    (where / "test_sample.py").write_text(TESTS)
    (where / "pytest.ini").write_text("[pytest]\n")
    _pytest(where, "--junitxml=first.xml")
    _pytest(where, "--last-failed", "--junitxml=rerun.xml")


def test_a_test_that_passed_only_on_the_rerun_is_named_with_its_first_failure_and_fails_ci(tmp_path: Path):
    _two_runs(tmp_path)
    (tmp_path / "quarantine.txt").write_text("# nothing quarantined\n")
    result = _report(tmp_path, "first.xml", "rerun.xml", "quarantine.txt")
    out = result.stdout
    assert "FLAKY (failed, then passed on the re-run): test_sample::test_flaky" in out
    assert "the first run fails here" in out
    assert "FAILED twice: test_sample::test_broken" in out
    assert "test_steady" not in out
    assert "1 flaky test(s), 1 failed twice." in out
    assert "not in the quarantine list" in out
    assert result.returncode == 1


def test_a_quarantined_flake_is_named_with_its_cause_and_lets_ci_pass(tmp_path: Path):
    _two_runs(tmp_path)
    (tmp_path / "quarantine.txt").write_text(
        "# pytest node ids\ntest_sample.py::test_flaky | touches a file on its first run | 2026-12-03\n"
    )
    result = _report(tmp_path, "first.xml", "rerun.xml", "quarantine.txt")
    assert result.returncode == 0, result.stdout
    assert (
        "QUARANTINED: touches a file on its first run (2026-12-03) (failed, then passed on the re-run): "
        "test_sample::test_flaky" in result.stdout
    )


def test_a_quarantine_line_without_cause_or_date_is_refused(tmp_path: Path):
    _two_runs(tmp_path)
    for line in ("test_sample.py::test_flaky", "test_sample.py::test_flaky | | 2026-12-03", "x.py::t | c | soon"):
        (tmp_path / "quarantine.txt").write_text(line + "\n")
        result = _report(tmp_path, "first.xml", "rerun.xml", "quarantine.txt")
        assert result.returncode == 1, line
        assert "The quarantine list is malformed" in result.stdout, line


def test_the_tracked_quarantine_list_reads():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import flaky_report
    finally:
        sys.path.pop(0)
    assert flaky_report.junit_id("tests/test_a.py::TestB::test_c[x]") == "tests.test_a.TestB::test_c[x]"
    assert isinstance(flaky_report.read_quarantine(REPO / "tests" / "quarantine.txt"), dict)


def test_nothing_is_printed_when_the_first_run_passed(tmp_path: Path):
    (tmp_path / "test_sample.py").write_text("def test_ok():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    _pytest(tmp_path, "--junitxml=first.xml")
    result = _report(tmp_path, "first.xml", "missing.xml")
    assert (result.returncode, result.stdout) == (0, "")

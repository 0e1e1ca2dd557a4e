"""CI's re-run must not hide a flake: scripts/flaky_report.py names every test that failed
first and passed on the re-run, with its first failure, and every test that failed twice."""

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


def test_a_test_that_passed_only_on_the_rerun_is_named_with_its_first_failure(tmp_path: Path):
    (tmp_path / "test_sample.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    _pytest(tmp_path, "--junitxml=first.xml")
    _pytest(tmp_path, "--last-failed", "--junitxml=rerun.xml")
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "flaky_report.py"), "first.xml", "rerun.xml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "FLAKY (failed, then passed on the re-run): test_sample::test_flaky" in out
    assert "the first run fails here" in out
    assert "FAILED twice: test_sample::test_broken" in out
    assert "test_steady" not in out
    assert "1 flaky test(s), 1 failed twice." in out


def test_nothing_is_printed_when_the_first_run_passed(tmp_path: Path):
    (tmp_path / "test_sample.py").write_text("def test_ok():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    _pytest(tmp_path, "--junitxml=first.xml")
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "flaky_report.py"), "first.xml", "missing.xml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == ""

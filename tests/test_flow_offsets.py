"""Flow due times across daylight-saving changes, with an injected clock: a daily time that
the clock skips (spring forward) runs at the first valid time after the gap, one that the
clock repeats (fall back) runs once, at its first occurrence; in Europe/Paris and
America/New_York. Expected times are local wall times turned into UTC by zoneinfo, never
a written offset.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from cli_agent_orchestrator.flows.schedule import Schedule
from cli_agent_orchestrator.flows.scheduler import DueTimer

PARIS, NEW_YORK = "Europe/Paris", "America/New_York"


def local(zone: str, *fields: int, fold: int = 0) -> datetime:
    """A local wall time in `zone` as an aware UTC moment (fold=1: the second of a repeated hour)."""
    return datetime(*fields, tzinfo=ZoneInfo(zone), fold=fold).astimezone(UTC)  # type: ignore[misc]


def walk_with_timer(schedule: Schedule, start: datetime, runs: int) -> list[datetime]:
    """Drive the flows' timer with a clock that jumps to each due time as the timer sleeps
    towards it: the moments it fires at, in UTC."""
    fired: list[datetime] = []
    state = {"now": start, "due": schedule.next_after(start)}

    async def fire_due(now: datetime) -> None:
        if now >= state["due"]:
            fired.append(now)
            state["due"] = schedule.next_after(now)

    async def earliest_due() -> datetime | None:
        state["now"] = max(state["now"], state["due"])  # the sleep until it passes at once
        return state["due"]

    async def main() -> None:
        timer = DueTimer(fire_due, earliest_due, clock=lambda: state["now"])
        task = asyncio.create_task(timer.run())
        try:
            while len(fired) < runs:
                await asyncio.sleep(0.001)
                assert not task.done(), task
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(asyncio.wait_for(main(), 10))
    return fired[:runs]


def on_local_day(moments: list[datetime], zone: str, day: date) -> list[datetime]:
    return [m for m in moments if m.astimezone(ZoneInfo(zone)).date() == day]


# (zone, cron, start, the runs expected from there)
SPRING_FORWARD = [
    # Paris skips 02:00-03:00 on 2027-03-28: the 02:30 run goes at 03:00 CEST that day.
    (
        PARIS,
        "30 2 * * *",
        local(PARIS, 2027, 3, 27, 12, 0),
        [local(PARIS, 2027, 3, 28, 3, 0), local(PARIS, 2027, 3, 29, 2, 30), local(PARIS, 2027, 3, 30, 2, 30)],
    ),
    # New York skips 02:00-03:00 on 2027-03-14.
    (
        NEW_YORK,
        "30 2 * * *",
        local(NEW_YORK, 2027, 3, 13, 12, 0),
        [local(NEW_YORK, 2027, 3, 14, 3, 0), local(NEW_YORK, 2027, 3, 15, 2, 30)],
    ),
]
FALL_BACK = [
    # Paris repeats 02:00-03:00 on 2027-10-31: 02:30 runs once, at its first (CEST) occurrence.
    (
        PARIS,
        "30 2 * * *",
        local(PARIS, 2027, 10, 30, 12, 0),
        [local(PARIS, 2027, 10, 31, 2, 30, fold=0), local(PARIS, 2027, 11, 1, 2, 30)],
    ),
    # New York repeats 01:00-02:00 on 2027-11-07: 01:30 runs once, at 01:30 EDT.
    (
        NEW_YORK,
        "30 1 * * *",
        local(NEW_YORK, 2027, 11, 6, 12, 0),
        [local(NEW_YORK, 2027, 11, 7, 1, 30, fold=0), local(NEW_YORK, 2027, 11, 8, 1, 30)],
    ),
]


@pytest.mark.parametrize(("zone", "cron", "start", "expected"), SPRING_FORWARD + FALL_BACK)
def test_next_runs_across_a_daylight_saving_change(zone: str, cron: str, start: datetime, expected: list[datetime]):
    schedule = Schedule.parse(cron, zone)
    got, moment = [], start
    for _ in expected:
        moment = schedule.next_after(moment)
        got.append(moment)
    assert got == expected
    assert all(run.tzinfo is UTC for run in got)


@pytest.mark.parametrize(("zone", "cron", "start", "expected"), SPRING_FORWARD + FALL_BACK)
def test_the_timer_with_an_injected_clock_fires_at_those_times(
    zone: str, cron: str, start: datetime, expected: list[datetime]
):
    assert walk_with_timer(Schedule.parse(cron, zone), start, len(expected)) == expected


def test_a_daily_flow_runs_once_on_each_day_of_a_change():
    for zone, cron, start, _ in SPRING_FORWARD + FALL_BACK:
        fired = walk_with_timer(Schedule.parse(cron, zone), start, 5)
        first_day = start.astimezone(ZoneInfo(zone)).date() + timedelta(days=1)
        for offset in range(4):
            day = first_day + timedelta(days=offset)
            assert len(on_local_day(fired, zone, day)) == 1, (zone, cron, day, fired)


def test_an_hourly_flow_keeps_its_wall_clock_minute_across_the_change():
    """Every hour at :15 in Paris: 23 runs on the spring-forward day, 25 on the fall-back day
    (each real hour runs once; none is skipped, none doubled)."""
    schedule = Schedule.parse("15 * * * *", PARIS)
    for day, expected in ((date(2027, 3, 28), 23), (date(2027, 10, 31), 25)):
        start = local(PARIS, day.year, day.month, day.day, 0, 0)
        runs, moment = [], start
        while (moment := schedule.next_after(moment)).astimezone(ZoneInfo(PARIS)).date() == day:
            runs.append(moment)
        assert len(runs) == expected and len(set(runs)) == expected
        assert all(r.astimezone(ZoneInfo(PARIS)).minute == 15 for r in runs)

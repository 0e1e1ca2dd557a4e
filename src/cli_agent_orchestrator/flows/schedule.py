"""A flow's schedule: a standard 5-field cron expression evaluated in an explicit IANA time
zone (the flow's `timezone`, else the server's local zone). cronsim computes due times with
cron's own rules (0 and 7 are Sunday; a restricted day-of-month OR day-of-week) and handles
daylight-saving changes as common cron implementations do:

* the gap (spring forward): a time the clock skips runs at the first valid time after it
  (a daily 02:30 in Europe/Paris runs at 03:00 CEST on 2027-03-28);
* the overlap (fall back): a time the clock shows twice runs once, at its first occurrence
  (a daily 01:30 in America/New_York runs at 01:30 EDT on 2027-11-07, not again in EST);
* an hourly schedule runs on every real hour: 23 runs that spring day, 25 that autumn day.

tests/test_flow_offsets.py walks these with an injected clock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import tzlocal
from cronsim import CronSim, CronSimError

from ..errors import InvalidInput

log = logging.getLogger(__name__)

CRON_FIELDS = "minute hour day-of-month month day-of-week"
MAX_EXPRESSION = 200


def server_zone_name() -> str:
    """The server's local zone as an IANA name (TZ, else /etc/localtime); UTC if unknown."""
    try:
        name = tzlocal.get_localzone_name()
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # a broken local configuration
        log.warning("cannot tell the server's local time zone (%s); flows without `timezone` use UTC", exc)
        return "UTC"
    return name or "UTC"


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(f"unknown time zone {name!r}: use an IANA name such as Europe/Berlin or UTC") from None


@dataclass(frozen=True)
class Schedule:
    expression: str
    zone_name: str

    @classmethod
    def parse(cls, expression: object, zone_name: str) -> Schedule:
        """A checked schedule, or InvalidInput saying what is wrong with it."""
        if not isinstance(expression, str) or not expression.strip():
            raise InvalidInput(f"schedule must be a 5-field cron expression ({CRON_FIELDS}), e.g. '0 9 * * 1-5'")
        expr = " ".join(expression.split())
        if len(expr) > MAX_EXPRESSION:
            raise InvalidInput(f"schedule is longer than {MAX_EXPRESSION} characters")
        if len(expr.split(" ")) != 5:  # cronsim would take a 6th field as seconds
            raise InvalidInput(
                f"schedule {expr!r} is not a 5-field cron expression ({CRON_FIELDS}); "
                f"it has {len(expr.split(' '))} fields"
            )
        schedule = cls(expr, zone_name)
        tz = zone(zone_name)
        try:
            next(CronSim(expr, datetime.now(tz)))
        except (CronSimError, StopIteration) as exc:
            raise InvalidInput(f"schedule {expr!r} is not a valid cron expression ({CRON_FIELDS}): {exc}") from None
        return schedule

    def next_after(self, moment: datetime) -> datetime:
        """The first due time strictly after `moment` (aware), in UTC."""
        local = moment.astimezone(zone(self.zone_name))
        return next(CronSim(self.expression, local)).astimezone(UTC)

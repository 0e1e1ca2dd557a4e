"""Scheduled flows: an agent session started on a cron schedule, with an optional gate
script that decides whether to run and fills the prompt.

One concern per module:
- `schedule.py`  a flow's cron expression in its time zone: validation and the next due time
- `template.py`  the prompt's `[[var]]` placeholders, filled from the gate's output
- `spec.py`      a flow file (Markdown + YAML frontmatter): parsing and validation
- `gate.py`      running a gate script (a process tree with a timeout and an output limit)
- `records.py`   the typed records: a stored flow and one run of it
- `scheduler.py` the timer that wakes at the earliest due time (or when flows change)
- `ownership.py` whether the session holding a flow's name is the flow's own to replace
- `runner.py`    one run: ownership and busy checks, gate, prompt, the agent in `cao-flow-<name>`, its reply
- `service.py`   the feature's face: add, list, enable, disable, remove, run now, start, stop

Flows and their runs live in SQLite (`store/flows.py`); the flow file is read when it is
added, and what was added is what runs (edit the file, then add it again).
"""

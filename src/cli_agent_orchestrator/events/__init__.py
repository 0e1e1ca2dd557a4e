"""Every fact the event bus carries, frozen and named, one module per feature:

- base.py           Event (each has a `topic`; `lossless` unless it is terminal output) and the
                    bus's own ConsumerFailed
- terminal.py       a terminal's output, screen, status, input, process, MCP listings, backend
- inbox.py          messages queued, delivered, failed
- orchestration.py  sessions, handoffs and assigns
- workflow.py       a workflow run's timeline
- flow.py           a scheduled flow's runs
- memory.py         memories stored and forgotten

Topics follow seed 003: `terminal.{id}.output`, `terminal.{id}.status`, plus lifecycle, inbox,
orchestration, workflow and flow facts. Output events may be dropped under back-pressure;
everything else is `lossless` and is never dropped by the bus. Import them from here.
"""

from __future__ import annotations

from .base import ConsumerFailed, Event
from .flow import FlowRunFinished, FlowRunStarted
from .inbox import InboxDelivered, InboxFailed, InboxQueued
from .memory import MemoryForgotten, MemoryStored
from .orchestration import (
    AssignFinished,
    AssignStarted,
    HandoffFinished,
    HandoffOrphaned,
    HandoffStarted,
    SessionCreated,
    SessionKilled,
)
from .terminal import (
    BackendLost,
    ComposerChanged,
    EnterPressed,
    HookReceived,
    InputSubmitted,
    McpListed,
    ScreenSnapshot,
    StatusChanged,
    TerminalExited,
    TerminalOutput,
    TerminalRemoved,
    TerminalResized,
    TerminalSpawned,
    TerminalUnreachable,
)
from .workflow import (
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunInterrupted,
    RunResumed,
    RunStarted,
    StepAttemptFailed,
    StepAttemptStarted,
    StepCompleted,
    StepDiverged,
    StepEvent,
    StepFailed,
    StepHalted,
    StepOutputReceived,
    StepReplayed,
    StepSkipped,
    StepStarted,
    TerminalCreated,
    WorkflowEvent,
    YamlRunCompleted,
    YamlRunFailed,
    YamlStepCompleted,
    YamlStepFailed,
    YamlStepStarted,
    YamlTemplateFailed,
)

__all__ = [
    "AssignFinished",
    "AssignStarted",
    "BackendLost",
    "ComposerChanged",
    "EnterPressed",
    "ConsumerFailed",
    "Event",
    "FlowRunFinished",
    "FlowRunStarted",
    "HandoffFinished",
    "HandoffOrphaned",
    "HandoffStarted",
    "HookReceived",
    "InboxDelivered",
    "InboxFailed",
    "InboxQueued",
    "InputSubmitted",
    "McpListed",
    "MemoryForgotten",
    "MemoryStored",
    "RunCancelled",
    "RunCompleted",
    "RunFailed",
    "RunInterrupted",
    "RunResumed",
    "RunStarted",
    "ScreenSnapshot",
    "SessionCreated",
    "SessionKilled",
    "StatusChanged",
    "StepAttemptFailed",
    "StepAttemptStarted",
    "StepCompleted",
    "StepDiverged",
    "StepEvent",
    "StepFailed",
    "StepHalted",
    "StepOutputReceived",
    "StepReplayed",
    "StepSkipped",
    "StepStarted",
    "TerminalCreated",
    "TerminalExited",
    "TerminalOutput",
    "TerminalRemoved",
    "TerminalResized",
    "TerminalSpawned",
    "TerminalUnreachable",
    "WorkflowEvent",
    "YamlRunCompleted",
    "YamlRunFailed",
    "YamlStepCompleted",
    "YamlStepFailed",
    "YamlStepStarted",
    "YamlTemplateFailed",
]

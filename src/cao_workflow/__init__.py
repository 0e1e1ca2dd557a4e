"""cao_workflow — the client library a cao workflow script uses to run agent steps.

It runs inside the script's own process and talks to cao-server over HTTP only
(stdlib urllib, no server imports). Importing it does nothing; the run's identity
(CAO_WORKFLOW_RUN_ID, CAO_WORKFLOW_GENERATION, CAO_API_BASE_URL) is read at each call.

    from cao_workflow import step, run_step, emit_output, get_inputs

    handle = step("kiro_cli", "reviewer", "review this diff", recovery="idempotent")
    emit_output({"review": handle.output})

Nothing is ever retried: a failure comes back as ShimIdentityError (nothing attempted),
ShimTransportError (outcome unknown) or ShimHTTPError (.status/.body; a 409 is a halt or
a divergence — re-raise it, never absorb it in a blanket ``except ShimError``).

Rules for a resumable script
----------------------------
A resume re-executes the script from the top, and the server matches each step call
against what was recorded under its key (call-1, call-2, … or your step_id). The script
must therefore make the same calls with the same prompts every time it runs. Each row is
checked by exactly one `cao workflow validate` rule; errors block `cao workflow run`.

| Don't | Use instead | Linter rule |
|---|---|---|
| `import random`, `secrets`, `uuid`, `time` or `datetime` (any form or alias) | values derived from `get_inputs()` or earlier step outputs | `nondeterminism` (warning) |
| call `step`/`run_step` from a thread or pool without `step_id=` | a stable `step_id=` per call, e.g. `f"shard-{name}"` | `unstable-step-id` (warning) |
| `step(...)` without `recovery=` | `recovery="idempotent"`, `"reconcile"` or `"manual"`; `run_step()` to declare none | `missing-recovery-policy` (error) |
| `step(..., **opts)` with the policy hidden in `opts` | `recovery=` written out at the call | `unverifiable-recovery-policy` (warning) |
| `run_step(..., recovery=...)` (checked only by the server, mid-run) | `step(..., recovery=...)` (checked before any request) | `unenforced-recovery-policy` (warning) |
| `import cli_agent_orchestrator` (the server's internals) | this package, or plain HTTP to the server | `disallowed-import` (error) |
| `importlib.import_module(name)` / `__import__(name)` with a computed name | plain `import` statements | `dynamic-import` (warning) |
| a file that does not parse under the server's Python | `cao workflow validate` before running | `syntax` (error) |

The linter cannot see every source of drift. Also keep out of prompts, keys and branches:
iteration order of sets of strings (randomised per process), environment variables other
than the inputs, and anything read from files, the network or the clock via other modules.
"""

from ._errors import ShimError, ShimHTTPError, ShimIdentityError, ShimTransportError
from ._script_io import emit_output, get_inputs
from ._steps import StepHandle, run_step, step

__all__ = [
    "step",
    "run_step",
    "emit_output",
    "get_inputs",
    "StepHandle",
    "ShimError",
    "ShimIdentityError",
    "ShimTransportError",
    "ShimHTTPError",
]

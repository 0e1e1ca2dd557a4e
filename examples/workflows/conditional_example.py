"""Branching: triage a ticket with one agent step, then take one of two branches.

Run it:

    cp examples/workflows/conditional_example.py ~/.aws/cli-agent-orchestrator/workflows/
    cao workflow run conditional_example
    cao workflow run conditional_example --input ticket="routine: rename a config key"
    cao workflow run conditional_example --input provider=kiro_cli

Each branch passes its own explicit step_id (urgent-branch / routine-branch). With the
default counter both branches would be "call-2"; a named key says which branch ran and
lets a resume check that the script took the same one again (the branch depends only on
the triage step's output, which a resume replays from the journal).
"""
from cao_workflow import emit_output, get_inputs, run_step

INPUTS = {
    "provider": {"type": "string", "default": "mock_cli"},
    # The mock agent echoes its prompt ("MOCK: <prompt>"), so this default makes the
    # triage output contain "urgent" and the urgent branch run.
    "ticket": {"type": "string", "default": "urgent: production login fails for every user"},
}


def main() -> None:
    inputs = get_inputs()
    provider, ticket = inputs["provider"], inputs["ticket"]

    # The prompt itself avoids the word "urgent", so with the echoing mock only the
    # ticket text decides the branch; a real agent answers with its own judgement.
    triage = run_step(provider, "reviewer",
                      f"Triage this ticket and name its priority in one word. Ticket: {ticket}",
                      step_id="triage")

    # Branch on the step's output only (never on the clock or randomness).
    if "urgent" in triage.output.lower():
        branch = "urgent"
        follow_up = run_step(provider, "reviewer", f"Draft an incident plan for: {ticket}",
                             step_id="urgent-branch")
    else:
        branch = "routine"
        follow_up = run_step(provider, "reviewer", f"Add this to the backlog: {ticket}",
                             step_id="routine-branch")

    emit_output({"branch": branch, "triage": triage.output, "follow_up": follow_up.output})


if __name__ == "__main__":
    main()

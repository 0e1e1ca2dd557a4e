"""Sequential loop: one agent step per item, one after another.

Run it (the script must sit in the cao workflow directory and runs by its stem):

    cp examples/workflows/loop_example.py ~/.aws/cli-agent-orchestrator/workflows/
    cao workflow run loop_example                             # mock agent, no credentials
    cao workflow run loop_example --input provider=kiro_cli   # a real CLI

No step_id is passed, so the shim numbers the steps itself: call-1, call-2, call-3.
That counter is only safe because the calls happen one at a time, in the same order on
every run; a resume re-runs this script from the top and the server replays each
finished step by its key instead of running it again.
"""
from cao_workflow import emit_output, get_inputs, run_step

# Declared inputs: read by the server from this literal (never executed) and handed to
# the script as JSON in CAO_WORKFLOW_INPUTS. The default runs against the mock agent.
INPUTS = {
    "provider": {"type": "string", "default": "mock_cli"},
}

# A fixed list keeps the loop deterministic: the same calls in the same order every run.
ITEMS = ("parser.py", "lexer.py", "emitter.py")


def main() -> None:
    provider = get_inputs()["provider"]
    reviews = []
    for item in ITEMS:
        # run_step declares no recovery policy; see fanout_example.py for step(recovery=...).
        handle = run_step(provider, "reviewer", f"Review {item} for bugs.")
        reviews.append({"item": item, "step_id": handle.step_id, "review": handle.output})
    # The run's output: one CAO_WORKFLOW_OUTPUT:{json} line the server reads at exit.
    emit_output({"reviews": reviews})


if __name__ == "__main__":
    main()

"""Concurrent fan-out: review three shards at once on a thread pool.

Run it:

    cp examples/workflows/fanout_example.py ~/.aws/cli-agent-orchestrator/workflows/
    cao workflow run fanout_example
    cao workflow run fanout_example --input provider=kiro_cli

The rule for fan-out: every call made from a thread passes an explicit, stable step_id.
The default keys (call-1, call-2, ...) would be handed out in whatever order the threads
happen to be scheduled, so on a resume one shard could land on another shard's key and
replay the wrong result. "shard-<name>" is derived from the shard itself, so each shard
keeps its own key on every run, whatever the scheduling.
"""
from concurrent.futures import ThreadPoolExecutor

from cao_workflow import ShimError, ShimHTTPError, emit_output, get_inputs, step

INPUTS = {
    "provider": {"type": "string", "default": "mock_cli"},
}

SHARDS = ("alpha", "beta", "gamma")


def review_shard(provider: str, shard: str) -> str:
    try:
        # recovery="idempotent" is a claim: re-running a read-only review twice does no
        # harm, so on resume the server may re-execute a step whose outcome it never
        # learned instead of halting to ask a human. Never claim it for side effects.
        handle = step(provider, "reviewer", f"Review shard {shard} of the change.",
                      recovery="idempotent", step_id=f"shard-{shard}")
    except ShimHTTPError as exc:
        if exc.status == 409:
            raise  # a halt or a divergence: a human must decide, never absorb it
        return f"ERROR: {exc}"  # any other HTTP failure: degrade this shard only
    except ShimError as exc:
        return f"ERROR: {exc}"  # transport failure (e.g. a timeout): degrade this shard
    return handle.output


def main() -> None:
    provider = get_inputs()["provider"]
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {shard: pool.submit(review_shard, provider, shard) for shard in SHARDS}
        # .result() re-raises a shard's exception (the 409 above) in the main thread,
        # so a halt still ends the script with a non-zero exit.
        results = {shard: future.result() for shard, future in futures.items()}
    emit_output({"shards": results})


if __name__ == "__main__":
    main()

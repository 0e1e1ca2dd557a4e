"""The loop of loop_example.py without the cao_workflow shim: plain urllib.

Run it:

    cp examples/workflows/loop_raw_http_example.py ~/.aws/cli-agent-orchestrator/workflows/
    cao workflow run loop_raw_http_example
    cao workflow run loop_raw_http_example --input provider=kiro_cli

The shim is a convenience, not a requirement. `cao workflow run` gives every script its
identity in environment variables; a step is one POST to /terminals/run-step carrying
that identity in env_vars, and the run's output is one CAO_WORKFLOW_OUTPUT: line on
stdout. Everything below is the standard library.
"""
import json
import os
import urllib.error
import urllib.request

INPUTS = {
    "provider": {"type": "string", "default": "mock_cli"},
}

ITEMS = ("parser.py", "lexer.py", "emitter.py")


def run_step(provider: str, agent: str, prompt: str, step_id: str) -> dict:
    body = {
        "provider": provider,
        "agent": agent,
        "prompt": prompt,
        # The identity fence: which run, which drive of it (the generation changes on
        # every resume), and this step's stable key within the run.
        "env_vars": {
            "CAO_WORKFLOW_RUN_ID": os.environ["CAO_WORKFLOW_RUN_ID"],
            "CAO_WORKFLOW_GENERATION": os.environ["CAO_WORKFLOW_GENERATION"],
            "CAO_WORKFLOW_STEP_ID": step_id,
        },
    }
    request = urllib.request.Request(
        os.environ["CAO_API_BASE_URL"] + "/terminals/run-step",
        data=json.dumps(body).encode("utf-8"),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    # No retry on purpose: if the connection breaks, the step may still have run.
    # The socket timeout outlives the server's default step timeout (600 s) + ready wait.
    try:
        with urllib.request.urlopen(request, timeout=780) as response:
            # {"terminal_id", "last_message", "status", "replayed"}; replayed=True means
            # the server returned the journaled result of an earlier drive and ran nothing.
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        # A 409 is a halt or a divergence; let it end the script (non-zero exit).
        raise SystemExit(f"run-step {step_id} failed: HTTP {exc.code}: {exc.read().decode()}")


def main() -> None:
    inputs = json.loads(os.environ.get("CAO_WORKFLOW_INPUTS") or "{}")
    provider = inputs["provider"]
    reviews = []
    for number, item in enumerate(ITEMS, start=1):
        answer = run_step(provider, "reviewer", f"Review {item} for bugs.", step_id=f"raw-{number}")
        reviews.append({"item": item, "step_id": f"raw-{number}", "review": answer["last_message"]})
    # The run's output, formatted by hand: the prefix, then compact JSON on one line.
    print("CAO_WORKFLOW_OUTPUT:" + json.dumps({"reviews": reviews}, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()

"""The web UI in real headless Chromium (Debian's package) driven by Playwright, against a real
cao-server with mock agents: sign-in by `cao ui`'s one-time link, the live board, the live
terminal with "take control", a waiting prompt answered from the page, a halted workflow step
resumed with *rerun*, and refusals of cross-origin and unauthenticated use. Each test saves
screenshots under test-artifacts/web-ui/ and fails on any console error.
"""

from __future__ import annotations

import http.server
import threading

import pytest
from browser_support import DESKTOP, PHONE, PageErrors, launch, login_link, screenshot, signed_in
from cao_support import CaoServer, wait_until
from playwright.sync_api import expect, sync_playwright
from workflow_support import Workflows

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = launch(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


def row(page, terminal_id: str):
    return page.locator(f"[data-terminal-id='{terminal_id}']").first


def terminal_text(page) -> str:
    return page.locator("#terminal .xterm-rows").inner_text()


# --- sign-in -------------------------------------------------------------------------------
def test_the_login_link_signs_in_once_and_leaves_no_ticket_behind(browser, cao: CaoServer):
    link = login_link(cao)
    ticket = link.split("#", 1)[1]
    context = browser.new_context(viewport=DESKTOP)
    try:
        page = context.new_page()
        errors = PageErrors(page)
        page.goto(link)
        page.wait_for_selector("[data-page=board]")
        assert ticket not in page.url
        history = page.evaluate("() => [location.href, history.length, document.referrer]")
        assert all(ticket not in str(item) for item in history), history
        cookies = context.cookies()
        assert [c["name"] for c in cookies] == [f"cao_ui_{cao.port}"]
        assert cookies[0]["httpOnly"] and cookies[0]["sameSite"] == "Strict" and cookies[0]["value"] != ticket
        assert page.evaluate("() => document.cookie") == ""  # the page's script cannot read it
        screenshot(page, "board-empty")
        errors.assert_none()
    finally:
        context.close()
    # The same link in another browser: used up.
    other = browser.new_context(viewport=DESKTOP)
    try:
        page = other.new_page()
        errors = PageErrors(page)
        page.goto(link)
        expect(page.get_by_text("already used or has expired")).to_be_visible()
        screenshot(page, "login-link-used")
        errors.assert_none(allowed=("401",))  # the refused login call is logged by the browser
    finally:
        other.close()


def test_a_browser_that_has_not_signed_in_sees_nothing_but_how_to(browser, cao: CaoServer):
    secret_id = cao.create_session()["id"]
    context = browser.new_context(viewport=DESKTOP)
    try:
        page = context.new_page()
        page.goto(cao.url + "/")
        expect(page.get_by_text("cao ui").first).to_be_visible()
        assert secret_id not in page.content()
        status = page.evaluate("async () => (await fetch('/terminals')).status")
        assert status == 401
        # The terminal socket too: the browser's handshake carries Fetch metadata, so the
        # owner's uid alone does not open it.
        code = page.evaluate(
            """(tid) => new Promise(resolve => {
                const ws = new WebSocket(location.origin.replace('http', 'ws') + '/terminals/' + tid + '/ws');
                ws.onclose = ev => resolve(ev.code);
                setTimeout(() => resolve('timeout'), 5000);
            })""",
            secret_id,
        )
        assert code == 4401
        screenshot(page, "not-signed-in")
    finally:
        context.close()


def test_another_site_cannot_use_the_server_even_in_a_signed_in_browser(browser, cao: CaoServer, tmp_path):
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")
    (tmp_path / "evil.html").write_text("<!doctype html><title>evil</title><p>another site</p>")
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path), **k)  # noqa: E731
    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        with signed_in(browser, cao) as (page, _errors):
            attacker = page.context.new_page()
            attacker.goto(f"http://localhost:{evil.server_address[1]}/evil.html")
            outcome = attacker.evaluate(
                """async ([base, tid]) => {
                    const out = {};
                    try { const r = await fetch(base + '/terminals', {credentials: 'include'});
                          out.read = r.status; } catch (e) { out.read = 'blocked'; }
                    try { const r = await fetch(base + '/terminals/' + tid + '/input', {method: 'POST',
                          credentials: 'include', mode: 'no-cors', headers: {'content-type': 'text/plain'},
                          body: JSON.stringify({message: 'from evil'})}); out.write = r.type; }
                    catch (e) { out.write = 'blocked'; }
                    out.ws = await new Promise(resolve => {
                        const ws = new WebSocket(base.replace('http', 'ws') + '/terminals/' + tid + '/ws');
                        ws.onclose = ev => resolve(ev.code);
                        setTimeout(() => resolve('timeout'), 5000);
                    });
                    return out;
                }""",
                [cao.url, tid],
            )
            attacker.close()
    finally:
        evil.shutdown()
    assert outcome["read"] == "blocked", outcome  # no CORS grant: the answer is unreadable
    assert outcome["ws"] == 4403, outcome
    # Input is typed in order: once a later message has its answer, an earlier one would show.
    cao.send(tid, "after the attack")
    wait_until(lambda: "MOCK: after the attack" in cao.client.get(f"/terminals/{tid}/output").json()["output"], 15)
    inputs = cao.client.get(f"/terminals/{tid}/output").json()["output"]
    assert "from evil" not in inputs  # the blind write reached no agent


# --- the board ------------------------------------------------------------------------------
def test_the_board_shows_a_new_agent_and_its_status_changes_without_reload(browser, cao: CaoServer):
    with signed_in(browser, cao) as (page, errors):
        page.evaluate("() => { window.__sameDocument = true; }")
        first = cao.create_session()["id"]
        expect(row(page, first)).to_be_visible(timeout=10000)
        expect(row(page, first).locator("[data-field=status]")).to_have_text("idle", timeout=15000)
        cao.send(first, "__mock_sleep_3")
        expect(row(page, first).locator("[data-field=status]")).to_have_text("processing", timeout=10000)
        expect(row(page, first).locator("[data-field=status-source]")).not_to_be_empty()
        expect(row(page, first).locator("[data-field=status]")).to_have_text("completed", timeout=15000)
        # A worker shows its caller, and a message waiting in its inbox is counted.
        session = cao.client.get(f"/terminals/{first}").json()["session_name"]
        worker = cao.client.post(
            f"/sessions/{session}/terminals",
            params={"agent_profile": "reviewer", "provider": "mock_cli", "caller_id": first},
        ).json()["id"]
        expect(row(page, worker)).to_be_visible(timeout=10000)
        expect(row(page, worker)).to_contain_text(first)
        cao.wait_status(worker, "idle")
        cao.send(worker, "__mock_sleep_4")
        cao.wait_status(worker, "processing")
        cao.client.post(f"/terminals/{worker}/inbox/messages", json={"sender_id": first, "message": "queued"})
        expect(row(page, worker).locator("[data-field=pending-inbox]")).to_have_text("1", timeout=5000)
        expect(row(page, worker).locator("[data-field=pending-inbox]")).to_have_text("0", timeout=20000)
        assert page.evaluate("() => window.__sameDocument") is True  # never reloaded
        screenshot(page, "board-desktop")
        page.set_viewport_size(PHONE)
        screenshot(page, "board-phone")
        errors.assert_none()


# --- the terminal ---------------------------------------------------------------------------
def test_the_terminal_is_live_read_only_until_control_is_taken(browser, cao: CaoServer):
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")
    with signed_in(browser, cao) as (page, errors):
        page.goto(f"{cao.url}/#/terminal/{tid}")
        page.wait_for_selector("#terminal .xterm-rows")
        cao.send(tid, "shown live on the page")
        wait_until(lambda: "MOCK: shown live on the page" in terminal_text(page), 15, message="live output")
        cao.wait_status(tid, {"completed", "idle"})
        # Read-only: keys typed into the view do not reach the agent.
        page.locator("#terminal").click()
        page.keyboard.type("ignored keys")
        page.keyboard.press("Enter")
        page.get_by_role("button", name="Take control").click()
        expect(page.locator("#control-banner")).to_be_visible()
        expect(page.locator("#control-banner")).to_contain_text("You are in control")
        page.locator("#terminal").click()
        page.keyboard.type("typed in the browser")
        page.keyboard.press("Enter")
        wait_until(lambda: "MOCK: typed in the browser" in terminal_text(page), 15, message="typed reply")
        output = cao.client.get(f"/terminals/{tid}/output").json()["output"]
        assert "MOCK: typed in the browser" in output
        # Keys go to the agent in order: the read-only view's keys, typed before, would show by now.
        assert "ignored keys" not in output
        screenshot(page, "terminal-in-control")
        page.get_by_role("button", name="Release control").click()
        expect(page.locator("#control-banner")).to_be_hidden()
        page.set_viewport_size(PHONE)
        screenshot(page, "terminal-phone")
        errors.assert_none()


def test_a_waiting_prompt_is_answered_from_the_page(browser, cao: CaoServer):
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")
    with signed_in(browser, cao) as (page, errors):
        page.goto(f"{cao.url}/#/terminal/{tid}")
        page.wait_for_selector("#terminal .xterm-rows")
        cao.send(tid, "__mock_ask__")
        option = page.locator("[data-option-key='1']")
        expect(option).to_be_visible(timeout=15000)
        expect(option).to_contain_text("Yes")
        screenshot(page, "terminal-waiting-prompt")
        option.click()
        cao.wait_status(tid, {"completed", "idle"}, timeout=15)
        expect(option).to_be_hidden(timeout=10000)
        errors.assert_none()


# --- workflows ------------------------------------------------------------------------------
def test_a_halted_step_is_resumed_with_rerun_from_the_page(browser, cao: CaoServer):
    wf = Workflows(cao)
    name = wf.write(
        "charge.py",
        """
        import os
        from cao_workflow import step, emit_output
        h = step("mock_cli", "reviewer", "charge the card", recovery="manual")
        if os.environ.get("CAO_WORKFLOW_RESUME") != "1":
            raise SystemExit(1)
        emit_output({"out": h.output, "replayed": h.replayed})
        """,
    )
    run_id = wf.run_ok(name)["run_id"]
    halted = wf.resume_ok(run_id)
    assert halted["kind"] == "halted"
    with signed_in(browser, cao) as (page, errors):
        page.goto(f"{cao.url}/#/workflows/runs/{run_id}")
        rerun = page.locator("[data-step-id='call-1'][data-decision='rerun']")
        expect(rerun).to_be_visible(timeout=10000)
        expect(page.get_by_text("policy_manual").first).to_be_visible()
        screenshot(page, "workflow-halted")
        rerun.click()
        # The page's resume call runs in the browser: wait for the new drive to exist before
        # waiting for a drive to end (the halted one already has).
        wait_until(
            lambda: wf.status(run_id)["generation"] > halted["generation"], 20, message="the page's resume started"
        )
        done = wf.wait_done(run_id, timeout=60)
        assert done["state"] == "completed" and done["steps"][0]["attempts"] == 2, done
        expect(page.get_by_text("completed").first).to_be_visible(timeout=15000)
        screenshot(page, "workflow-rerun-done")
        # The linter's findings for a spec, from the catalogue: a script that reads the clock.
        wf.write("clocky.py", "import time\nfrom cao_workflow import emit_output\nemit_output({'t': time.time()})\n")
        page.goto(f"{cao.url}/#/workflows")
        page.wait_for_selector(f"text={name}")
        page.click("[data-action=lint][data-spec=clocky]")
        expect(page.locator("[data-findings-for=clocky]")).to_contain_text("time", timeout=10000)
        lint = cao.client.post("/workflows/validate", json={"path": "clocky.py"}).json()
        assert any("time" in str(f) for f in lint["findings"]), lint
        screenshot(page, "workflows")
        errors.assert_none()


def test_every_page_renders_without_console_errors(browser, cao: CaoServer):
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")
    cao.client.delete(f"/terminals/{cao.create_session()['id']}")
    for viewport, label in ((DESKTOP, "desktop"), (PHONE, "phone")):
        with signed_in(browser, cao, viewport) as (page, errors):
            for route in ("new", "workflows", "flows", "memory", "deleted"):
                page.goto(f"{cao.url}/#/{route}")
                page.wait_for_selector(f"[data-page={route}]")
                screenshot(page, f"{route}-{label}")
            errors.assert_none()


# --- acting from the page -------------------------------------------------------------------
def test_a_session_is_created_messaged_interrupted_and_deleted_from_the_page(browser, cao: CaoServer, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    with signed_in(browser, cao) as (page, errors):
        page.on("dialog", lambda dialog: dialog.accept())  # the page confirms deletes
        page.goto(f"{cao.url}/#/new")
        page.select_option("#new-profile", "reviewer")
        page.select_option("#new-provider", "mock_cli")
        page.fill("#new-directory", str(workdir))
        page.click("#new-review")
        # The same confirmation as `cao launch`: profile, provider, directory, tool set.
        review = page.locator("#launch-review")
        expect(review).to_contain_text("fs_read")
        expect(review.locator("[data-preview=working-directory]")).to_contain_text(str(workdir))
        assert cao.client.get("/terminals").json() == []  # nothing runs before "Proceed"
        screenshot(page, "new-session-review")
        page.click("#launch-proceed")
        page.wait_for_selector("main[data-page=terminal]")
        [term] = cao.client.get("/terminals").json()
        assert term["agent_profile"] == "reviewer" and term["working_directory"] == str(workdir)
        tid = term["id"]
        cao.wait_status(tid, "idle")
        # Send now: a turn.
        page.fill("#message", "sent from the page")
        page.click("#send-now")
        cao.wait_status(tid, "completed")
        assert "MOCK: sent from the page" in cao.client.get(f"/terminals/{tid}/output").json()["output"]
        # Queue in inbox while busy; delivered once the agent is done.
        cao.send(tid, "__mock_sleep_4")
        cao.wait_status(tid, "processing")
        page.fill("#message", "queued from the page")
        page.click("#queue-inbox")
        wait_until(
            lambda: cao.client.get(f"/terminals/{tid}/inbox/messages").json(), 10, message="queued message stored"
        )
        [queued] = cao.client.get(f"/terminals/{tid}/inbox/messages").json()
        assert queued["message"] == "queued from the page" and queued["status"] == "pending"
        # Interrupt the busy turn with Esc.
        page.click("#interrupt-esc")
        wait_until(
            lambda: "queued from the page" in cao.client.get(f"/terminals/{tid}/output").json()["output"],
            20,
            message="the queued message delivered after the interrupt",
        )
        page.click("#delete-agent")
        page.wait_for_selector("main[data-page=board]")  # the page goes back to the board once deleted
        assert cao.client.get("/terminals").json() == []
        # Its scrollback, shown again from the Deleted page.
        page.goto(f"{cao.url}/#/deleted")
        page.wait_for_selector(f"[data-deleted-id='{tid}']")
        screenshot(page, "deleted")
        page.click(f"[data-action=show-scrollback][data-terminal-id='{tid}']")
        expect(page.locator(f"[data-scrollback-for='{tid}']")).to_contain_text("MOCK: sent from the page")
        screenshot(page, "deleted-scrollback")
        errors.assert_none()


def test_flows_are_disabled_enabled_and_run_from_the_page(browser, cao: CaoServer, tmp_path):
    flow = tmp_path / "nightly.flow.md"
    flow.write_text(
        '---\nname: "nightly"\nschedule: "0 0 1 1 *"\nagent_profile: "developer"\nprovider: "mock_cli"\n---\n\n'
        "check the build\n"
    )
    assert cao.client.post("/flows", json={"path": str(flow)}).status_code == 201
    with signed_in(browser, cao) as (page, errors):
        page.goto(f"{cao.url}/#/flows")
        toggle = page.locator("[data-action=toggle-flow][data-flow=nightly]")
        expect(toggle).to_have_attribute("aria-pressed", "true")
        toggle.click()
        wait_until(lambda: cao.client.get("/flows/nightly").json()["enabled"] is False, 10, message="disabled")
        expect(toggle).to_have_attribute("aria-pressed", "false")
        toggle.click()
        wait_until(lambda: cao.client.get("/flows/nightly").json()["enabled"] is True, 10, message="enabled")
        page.click("[data-action=run-flow][data-flow=nightly]")
        wait_until(
            lambda: any(r["state"] != "running" for r in cao.client.get("/flows/nightly/runs").json()),
            60,
            message="the run started from the page finished",
        )
        screenshot(page, "flows-after-run")
        errors.assert_none()


def test_memories_are_searched_viewed_and_forgotten_from_the_page(browser, cao: CaoServer):
    for key, content in (("build", "the build runs with make release"), ("style", "tabs, never spaces")):
        stored = cao.client.post("/memories", json={"content": content, "scope": "global", "key": key})
        assert stored.status_code == 201, stored.text
    cao.client.post("/memories", json={"content": "make release also signs", "scope": "global", "key": "build"})
    build = next(m for m in cao.client.get("/memories").json() if m["key"] == "build")
    with signed_in(browser, cao) as (page, errors):
        page.on("dialog", lambda dialog: dialog.accept())  # the page confirms a forget
        page.goto(f"{cao.url}/#/memory")
        expect(page.locator("#memories tbody tr")).to_have_count(2)
        page.fill("#memory-query", "release")
        page.click("form[role=search] button[type=submit]")
        expect(page.locator("#memories tbody tr")).to_have_count(1)
        expect(page.locator(f"tr[data-memory='{build['id']}']")).to_contain_text("build")
        # View: its dated entries, oldest first.
        page.click(f"[data-action=view-memory][data-memory='{build['id']}']")
        entries = page.locator(f"tr[data-memory='{build['id']}'] .memory-entry pre")
        expect(entries).to_have_text(["the build runs with make release", "make release also signs"])
        screenshot(page, "memory-viewed")
        page.click(f"[data-action=forget-memory][data-memory='{build['id']}']")
        wait_until(lambda: [m["key"] for m in cao.client.get("/memories").json()] == ["style"], 10, message="forgotten")
        expect(page.locator("#memories tbody tr")).to_have_count(0)  # the search shown again: no match now
        expect(page.locator("#memories .empty")).to_contain_text("No memory matches")
        errors.assert_none()

"""Two cao instances side by side: separate homes, ports and tmux servers."""

from __future__ import annotations


def test_two_instances_never_see_each_others_agents(cao_factory):
    one = cao_factory("one").start()
    two = cao_factory("two").start()
    a = one.create_session(session_name="same")
    b = two.create_session(session_name="same")  # same name, no clash
    assert one.client.get("/health").json()["tmux_socket"] != two.client.get("/health").json()["tmux_socket"]
    assert [t["id"] for t in one.client.get("/terminals").json()] == [a["id"]]
    assert [t["id"] for t in two.client.get("/terminals").json()] == [b["id"]]
    assert one.client.get(f"/terminals/{b['id']}").status_code == 404
    one.client.delete("/sessions/cao-same")
    assert two.status(b["id"]) == "idle"
    assert (one.home / "db" / "cli-agent-orchestrator.db").exists()
    assert (two.home / "db" / "cli-agent-orchestrator.db").exists()

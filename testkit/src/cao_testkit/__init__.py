"""cao's test doubles: the mock coding agent and its provider, and the scripted model server.

Nothing under ``cli_agent_orchestrator`` imports this package; cao finds the ``mock_cli``
provider through the ``cli_agent_orchestrator.providers`` entry point group.
"""

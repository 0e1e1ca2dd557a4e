"""Workflow runs: the script-tier linter (`lint`) and run-input declarations (`inputs`)."""

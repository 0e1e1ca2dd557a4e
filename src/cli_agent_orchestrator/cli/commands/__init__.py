"""Subcommands of `cao`, one module per area; cli/main.py assembles them."""

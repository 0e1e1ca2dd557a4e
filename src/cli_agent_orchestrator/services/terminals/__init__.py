"""Terminals: one agent CLI in one tmux window, and its lifecycle.

service     TerminalService: create, read, type into, delete, restore, re-adopt (the API's view)
spawn       the create request, the profile and provider it resolves to, the launch itself
names       terminal ids and session names as cao accepts them
scrollback  a deleted terminal's scrollback: saved at delete, shown again on restore
adoption    after a restart: surviving windows watched again, the others marked gone
"""

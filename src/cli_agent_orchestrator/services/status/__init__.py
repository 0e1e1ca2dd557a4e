"""Status: what each agent is doing, read from its screen and its CLI's hooks (seed 003).

monitor   StatusMonitor: routes terminal facts, decides each status, publishes it on change
watched   one watched terminal: status and turn state, its queue, flood mode and snapshots
screen    the terminal emulator (pyte) and the `Screen` providers read from it
view      TerminalView, the read model the other services get
writer    write-behind of statuses to the database, retried while it is locked
"""

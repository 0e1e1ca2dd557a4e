"""Agent profiles: what an agent is (its prompt, provider, model, tools), kept as Markdown files
with YAML frontmatter, and everything cao does with them.

- loading.py    find a profile by name (the lookup order) and parse it; `${VAR}` from the .env
- env_file.py   `<home>/.env`, the values a profile's `${VAR}` reads (`cao env`)
- roles.py      roles and the tool set an agent gets (allowedTools, a role's defaults)
- catalog.py    every profile file a user can see, where it comes from, what it shadows
- checks.py     `cao profile validate`: every problem of one profile text
- fetch.py      a profile from an allow-listed URL, with one deadline
- install.py    `cao install`: a profile into the agent store, plus its provider's agent file
- kiro_agent.py the Kiro agent file a profile becomes
- builtin/      the profiles cao ships (code_supervisor, developer, reviewer)
"""

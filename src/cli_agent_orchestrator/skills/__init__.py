"""Skills: folders of instructions (a `SKILL.md` and the files it points to) that an agent
reads on demand with the `load_skill` tool, in the format Claude Code's skills use, so a user's
existing skills work unchanged.

- skill_file.py  what a skill is: SKILL.md's frontmatter (`name`, `description`) and body
- store.py       where skills live (`<home>/skills/`, then `skills_dirs` in settings.json),
                 listing, finding, reading one, removing one
- install.py     `cao skills add`: a folder copied in, or a SKILL.md from an allow-listed URL
- catalogue.py   which skills an agent sees (its profile's `skills:`), the catalogue appended
                 to its system prompt, and the text `load_skill` gives it
"""

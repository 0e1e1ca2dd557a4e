"""Workflows: scripts and YAML specs that drive agent steps, journaled so that a run can
resume without repeating finished work. Every workflow concern lives in this package:

  specs, catalog          the spec files in the workflow directory; list, show, validate
  inputs                  declared inputs and the check of supplied ones (pure)
  lint                    the script linter: its rule table and findings (pure), from
    lint_names            what a script's names mean (the shim's step, imports, threads)
    lint_steps            where a script calls step/run_step, and on which thread
  yaml_spec               the YAML grammar: a spec's root fields and step list (pure)
    yaml_steps            one step's fields and limits
    yaml_templates        `{{ ... }}` prompt templates: references and rendering
    yaml_values           names, empty fields and values quoted in messages
  output_schema           a step's output_schema: the schema's check, output validation (pure)
    output_events         the timeline facts of that check: a reprompt, an unvalidated step
  records                 the journal's typed records and their state enums (pure)
  gate                    the resume gate: replay, execute, halt or diverge (pure)
  drives, timeline        live drives in memory; the timeline writer (journal, then bus)
  step_execution          the one journaled execution of a step attempt, for both tiers
  script_steps            a script's step call: fence, gate verdict, replay/halt/execute
  script_process          running a script as a process; script_driver supervises a drive
  yaml_driver             driving a YAML spec inside the server
  runs, views, service    runs' lifecycle; read views; the feature as the API sees it

Importing this package imports nothing: the MCP server and the CLI use `specs` and
`inputs` without the server's service layer.
"""

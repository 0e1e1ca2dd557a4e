"""The workflow catalogue: the specs in the workflow directory — list, show, delete,
validate. Runs are `workflows.py`; this module never starts anything.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import CaoError, InvalidInput, NotFound
from ..workflows import yaml_spec
from ..workflows.inputs import read_inputs_declaration
from ..workflows.lint import lint_script
from ..workflows.specs import SpecDirectory, SpecFile, content_hash, indexed_at


class WorkflowCatalog:
    def __init__(self, specs: SpecDirectory):
        self.specs = specs

    def list(self) -> list[dict]:  # noqa: A003 - the catalogue's own verb
        out = []
        for spec in self.specs.files():
            entry = {"name": spec.name, "source_path": str(spec.path), "tier": spec.tier,
                     "mode": "script", "step_count": None, "description": "",
                     "indexed_at": indexed_at(spec.path)}
            if spec.tier == "yaml":
                try:
                    parsed = yaml_spec.parse_spec(spec.read())
                    entry.update(mode=parsed.mode, step_count=len(parsed.steps), description=parsed.description)
                except CaoError as exc:
                    entry.update(mode=None, description=f"invalid: {exc}"[:200])
            out.append(entry)
        return sorted(out, key=lambda e: (e["name"], e["source_path"]))

    def get(self, name: str) -> dict:
        spec = self.specs.resolve(name)
        source = spec.read()
        out: dict[str, Any] = {"name": spec.name, "path": str(spec.path), "tier": spec.tier,
                               "source": source, "content_hash": content_hash(source)}
        if spec.tier == "script":
            out["findings"] = lint_script(source)["findings"]
            try:
                out["inputs"] = read_inputs_declaration(source)
            except CaoError as exc:
                out["inputs"], out["inputs_error"] = {}, str(exc)
        else:
            out["validation"] = yaml_spec.validate_spec(source)
            try:
                parsed = yaml_spec.parse_spec(source)
                out.update(inputs=parsed.inputs, mode=parsed.mode, description=parsed.description,
                           steps=[{**s.__dict__, "reserved": dict(s.reserved)} for s in parsed.steps])
            except CaoError:
                out["inputs"] = {}
        return out

    def delete(self, name: str) -> SpecFile:
        spec = self.specs.resolve(name)
        spec.path.unlink()
        return spec

    def validate(self, path: str | None, source: str | None, tier: str | None) -> dict:
        if path is not None:
            file = self.specs.inside(path)
            if not file.is_file():
                raise NotFound(f"no file {file.name} in {self.specs.root}")
            tier = _tier_of(file)
            source = SpecFile(file.stem, file, tier).read()
        if source is None or tier not in ("script", "yaml"):
            raise InvalidInput("give either path (a file in the workflow directory) or source and tier "
                               "('script' or 'yaml')")
        return lint_script(source) if tier == "script" else yaml_spec.validate_spec(source)


def _tier_of(path: Path) -> str:
    if path.suffix == ".py":
        return "script"
    if path.suffix in (".yaml", ".yml"):
        return "yaml"
    raise InvalidInput(f"{path.name}: a workflow is a .py script or a .yaml/.yml spec")

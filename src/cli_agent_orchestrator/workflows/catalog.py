"""The workflow catalogue: the specs in the workflow directory — list, show, delete,
validate. Reads and lints spec files only; it never starts a run (that is `runs.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import CaoError, InvalidInput, NotFound
from . import yaml_spec
from .inputs import read_inputs_declaration
from .lint import lint_script
from .records import Tier
from .specs import SpecDirectory, SpecFile, content_hash, indexed_at


class WorkflowCatalog:
    def __init__(self, specs: SpecDirectory):
        self.specs = specs

    def list(self) -> list[dict]:  # noqa: A003 - the catalogue's own verb
        out = []
        for spec in self.specs.files():
            entry: dict[str, Any] = {
                "name": spec.name,
                "source_path": str(spec.path),
                "tier": spec.tier,
                "mode": "script",
                "step_count": None,
                "description": "",
                "indexed_at": indexed_at(spec.path),
            }
            if spec.tier == Tier.YAML:
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
        out: dict[str, Any] = {
            "name": spec.name,
            "path": str(spec.path),
            "tier": spec.tier,
            "source": source,
            "content_hash": content_hash(source),
        }
        if spec.tier == Tier.SCRIPT:
            out["findings"] = lint_script(source)["findings"]
            try:
                out["inputs"] = read_inputs_declaration(source)
            except CaoError as exc:
                out["inputs"], out["inputs_error"] = {}, str(exc)
        else:
            out["validation"] = yaml_spec.validate_spec(source)
            try:
                parsed = yaml_spec.parse_spec(source)
                out.update(
                    inputs=parsed.inputs,
                    mode=parsed.mode,
                    description=parsed.description,
                    steps=[{**s.__dict__, "reserved": dict(s.reserved)} for s in parsed.steps],
                )
            except CaoError:
                out["inputs"] = {}
        return out

    def delete(self, name: str) -> SpecFile:
        spec = self.specs.resolve(name)
        spec.path.unlink()
        return spec

    def validate(self, path: str | None, source: str | None, tier: str | None) -> dict[str, Any]:
        if path is not None:
            file = self.specs.inside(path)
            if not file.is_file():
                raise NotFound(f"no file {file.name} in {self.specs.root}")
            tier = _tier_of(file)
            source = SpecFile(file.stem, file, tier).read()
        if source is None or tier not in tuple(Tier):
            raise InvalidInput(
                "give either path (a file in the workflow directory) or source and tier ('script' or 'yaml')"
            )
        return lint_script(source) if tier == Tier.SCRIPT else yaml_spec.validate_spec(source)


def _tier_of(path: Path) -> Tier:
    if path.suffix == ".py":
        return Tier.SCRIPT
    if path.suffix in (".yaml", ".yml"):
        return Tier.YAML
    raise InvalidInput(f"{path.name}: a workflow is a .py script or a .yaml/.yml spec")

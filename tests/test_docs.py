"""Docs that cannot drift: what the code holds is what its documentation says."""

from __future__ import annotations

import inspect
import re

from cli_agent_orchestrator import errors


def test_the_exception_tree_drawn_in_errors_py_is_the_one_in_the_code():
    drawn: dict[str, tuple[str | None, int]] = {}  # class -> (parent, http status)
    parents: list[tuple[int, str]] = []  # (indent, class) of the branch above
    for line in (errors.__doc__ or "").splitlines():
        found = re.match(r"^(\s*(?:[│ ]\s*)*(?:[├└]── )?)([A-Z]\w+)(?: \((\d{3})\))?", line)
        if not found or not hasattr(errors, found.group(2)):
            continue
        indent, name = len(found.group(1)), found.group(2)
        while parents and parents[-1][0] >= indent:
            parents.pop()
        cls = getattr(errors, name)
        drawn[name] = (parents[-1][1] if parents else None, int(found.group(3) or cls.http_status))
        parents.append((indent, name))
    actual = {
        name: (cls.__base__.__name__ if cls is not errors.CaoError else None, cls.http_status)
        for name, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.CaoError) and cls.__module__ == errors.__name__
    }
    assert drawn == actual

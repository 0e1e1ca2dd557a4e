"""Memory: what one agent learns, the next one knows (issue 29). A map of its modules:

- scopes.py     the four scopes, the memory types, and which memories an agent may read and write
- checks.py     the bounds of what is stored (sizes, keys, tags), each refusal one clear line
- redaction.py  secrets taken out of a text before it is stored; content that is mostly a secret refused
- injection.py  the `<cao-memory>` block a new agent's first task carries, within its budget
- service.py    the service: store, recall, forget, export/import; events after commit

The rows themselves, and the full-text search over them, are store/memories.py.
"""

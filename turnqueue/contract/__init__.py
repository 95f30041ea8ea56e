"""The contract kit (G4): ``turnqueue schema diff`` compares two schemas, ``turnqueue schema
check`` checks client documents against a schema.

:mod:`turnqueue.contract.documents` finds the GraphQL documents client sources hold (and where,
so problems are reported at their files' lines); :mod:`turnqueue.contract.check` validates them
and diffs schemas. :class:`ContractError` is a file that cannot be read, or parsed as SDL or
Python: the command exits with 2.
"""

from __future__ import annotations

from turnqueue.contract.check import check_documents, load_schema, run_check, run_diff
from turnqueue.contract.documents import (
    ContractError,
    documents_in,
    expand_paths,
    read_text,
    script_documents,
)

__all__ = [
    "ContractError",
    "check_documents",
    "documents_in",
    "expand_paths",
    "load_schema",
    "read_text",
    "run_check",
    "run_diff",
    "script_documents",
]

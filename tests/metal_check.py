"""Checks generated Metal source with clang against the MSL stub in metal_stub/.

What it catches and what it cannot is written down in metal/README.md.
"""

from __future__ import annotations

from pathlib import Path

STUB = Path(__file__).with_name("metal_stub")
ARGS = ["-x", "c++", "-std=c++14", "-fsyntax-only", f"-I{STUB}"]
# MSL allows threadgroup variables at kernel scope, which C++ has no notion of.
KERNEL_SCOPE_ONLY = "automatic variable qualified with an address space"


def metal_errors(source: str, kernels: set[str]) -> list[str]:
    """clang's errors for ``source``, as 'line: message'.

    ``kernels`` names the [[kernel]] functions, inside which threadgroup
    variables are allowed; anywhere else they are an error, as in MSL.
    """
    import clang.cindex as ci

    tu = ci.Index.create().parse("kernel.metal", args=ARGS, unsaved_files=[("kernel.metal", source)])
    errors = []
    for diagnostic in tu.diagnostics:
        if diagnostic.severity < ci.Diagnostic.Error:
            continue
        if diagnostic.spelling == KERNEL_SCOPE_ONLY and _enclosing_function(tu, diagnostic.location) in kernels:
            continue
        where = diagnostic.location
        line = source.splitlines()[where.line - 1].strip() if where.file else ""
        errors.append(f"{where.line}: {diagnostic.spelling}    [{line}]")
    return errors


def _enclosing_function(tu, location) -> str | None:
    import clang.cindex as ci

    cursor = ci.Cursor.from_location(tu, location)
    while cursor is not None and cursor.kind != ci.CursorKind.TRANSLATION_UNIT:
        if cursor.kind in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE):
            return cursor.spelling
        cursor = cursor.semantic_parent
    return None

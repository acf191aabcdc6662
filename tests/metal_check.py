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
    """clang's errors for ``source``, and the C++14 features MSL forbids, as 'line: message'.

    ``kernels`` names the [[kernel]] functions, inside which threadgroup
    variables are allowed; anywhere else they are an error, as in MSL.
    """
    import clang.cindex as ci

    tu = ci.Index.create().parse("kernel.metal", args=ARGS, unsaved_files=[("kernel.metal", source)])
    lines = source.splitlines()
    errors = []
    for diagnostic in tu.diagnostics:
        if diagnostic.severity < ci.Diagnostic.Error:
            continue
        if diagnostic.spelling == KERNEL_SCOPE_ONLY and _enclosing_function(tu, diagnostic.location) in kernels:
            continue
        where = diagnostic.location
        line = lines[where.line - 1].strip() if where.file else ""
        errors.append(f"{where.line}: {diagnostic.spelling}    [{line}]")
    for line, message in forbidden_features(tu):
        errors.append(f"{line}: {message}    [{lines[line - 1].strip()}]")
    return errors


def forbidden_features(tu) -> list[tuple[int, str]]:
    """(line, message) for what C++14 allows and MSL does not, in the source (the stub is
    not looked at): lambdas (before Metal 3.2), function pointers, virtual functions,
    exceptions, goto, and recursion among the source's functions, direct or through
    others. Calls are followed by name, so that those in uninstantiated templates count
    too, except to overloaded names (``simd_shuffle`` of a complex calling that of a
    float is no recursion) and operators: recursion through those goes unseen."""
    import clang.cindex as ci

    K, T = ci.CursorKind, ci.TypeKind
    kinds = {
        K.LAMBDA_EXPR: "lambda (MSL has none before Metal 3.2)",
        K.CXX_TRY_STMT: "exceptions (MSL has none)",
        K.CXX_THROW_EXPR: "exceptions (MSL has none)",
        K.GOTO_STMT: "goto (MSL has none)",
    }
    declarations = (K.VAR_DECL, K.PARM_DECL, K.FIELD_DECL, K.TYPEDEF_DECL, K.TYPE_ALIAS_DECL)
    functions = (K.FUNCTION_DECL, K.FUNCTION_TEMPLATE, K.CXX_METHOD)
    found: list[tuple[int, str]] = []
    calls: dict[str, set[str]] = {}
    where: dict[str, int] = {}

    def function_type(t) -> bool:
        t = t.get_canonical()
        if t.kind in (T.POINTER, T.LVALUEREFERENCE, T.RVALUEREFERENCE):
            return t.get_pointee().get_canonical().kind in (T.FUNCTIONPROTO, T.FUNCTIONNOPROTO)
        return t.kind == T.MEMBERPOINTER

    def visit(cursor, function: str | None) -> None:
        for child in cursor.get_children():
            if child.location.file is None or child.location.file.name != "kernel.metal":
                continue
            line = child.location.line
            if child.kind in kinds:
                found.append((line, kinds[child.kind]))
            elif child.kind in declarations and function_type(child.type if child.kind not in (K.TYPEDEF_DECL, K.TYPE_ALIAS_DECL) else child.underlying_typedef_type):
                found.append((line, "function pointer (MSL has none)"))
            elif child.kind in functions and child.is_virtual_method():
                found.append((line, "virtual function (MSL has none)"))
            inner = function
            if child.kind in functions and child.is_definition():
                inner = child.spelling
                calls.setdefault(inner, set())
                where.setdefault(inner, line)
            elif function is not None and child.kind in (K.CALL_EXPR, K.OVERLOADED_DECL_REF, K.DECL_REF_EXPR) and child.spelling:
                calls[function].add(child.spelling)
            visit(child, inner)

    visit(tu.cursor, None)
    overloads: dict[str, set[str]] = {}  # name -> the USRs of its declarations (one per overload)
    for cursor in tu.cursor.walk_preorder():
        if cursor.kind in functions:
            overloads.setdefault(cursor.spelling, set()).add(cursor.get_usr())
    # An operator in a template may be the built-in one, which has no declaration.
    calls = {
        name: {c for c in callees if len(overloads.get(c, ())) <= 1 and not c.startswith("operator")}
        for name, callees in calls.items()
    }
    for name in sorted(calls):
        if _reaches(calls, name, name):
            found.append((where[name], f"recursion through {name} (MSL has none)"))
    return found


def _reaches(calls: dict[str, set[str]], start: str, target: str) -> bool:
    seen, frontier = set(), [start]
    while frontier:
        for callee in calls.get(frontier.pop(), ()):
            if callee == target:
                return True
            if callee in calls and callee not in seen:
                seen.add(callee)
                frontier.append(callee)
    return False


def _enclosing_function(tu, location) -> str | None:
    import clang.cindex as ci

    cursor = ci.Cursor.from_location(tu, location)
    while cursor is not None and cursor.kind != ci.CursorKind.TRANSLATION_UNIT:
        if cursor.kind in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE):
            return cursor.spelling
        cursor = cursor.semantic_parent
    return None

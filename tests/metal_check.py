"""Checks generated Metal source with clang against the MSL stub in metal_stub/.

What it catches and what it cannot is written down in metal/README.md, rule by rule.
"""

from __future__ import annotations

from pathlib import Path

STUB = Path(__file__).with_name("metal_stub")
# No system headers: MSL has no C++ standard library, only what the stub declares.
ARGS = ["-x", "c++", "-std=c++14", "-fsyntax-only", "-nostdinc", "-nostdinc++", f"-I{STUB}"]
SOURCE = "kernel.metal"
# MSL allows threadgroup variables at kernel scope, which C++ has no notion of.
KERNEL_SCOPE_ONLY = "automatic variable qualified with an address space"
CONSTANT_SPACE, THREADGROUP_SPACE = 2, 3  # the stub's address_space numbers
# Keywords of C++14 features that MSL does not have (its specification's section
# "C++14 features not supported"; lambdas, function pointers and recursion are
# found on the syntax tree below).
FORBIDDEN_KEYWORDS = {
    "dynamic_cast": "dynamic_cast (MSL has none)",
    "typeid": "type identification (MSL has none)",
    "new": "new (MSL has no dynamic allocation)",
    "delete": "delete (MSL has no dynamic allocation)",
    "noexcept": "noexcept (MSL has none)",
    "register": "register storage (MSL has none)",
    "thread_local": "thread_local storage (MSL has none)",
    "virtual": "virtual function (MSL has none)",
    "try": "exceptions (MSL has none)",
    "catch": "exceptions (MSL has none)",
    "throw": "exceptions (MSL has none)",
    "goto": "goto (MSL has none)",
}


def _parse(source: str):
    import clang.cindex as ci

    return ci.Index.create().parse(SOURCE, args=ARGS, unsaved_files=[(SOURCE, source)])


def metal_errors(source: str, kernels: set[str]) -> list[str]:
    """clang's errors for ``source``, and what MSL forbids beyond C++14, as 'line: message'.

    ``kernels`` names the [[kernel]] functions, inside which threadgroup variables
    are allowed; anywhere else they are an error, as in MSL. C++ has no kernel
    scope: clang rejects such a variable as an automatic one and then leaves the
    bodies the kernel calls uninstantiated, so the check declares them ``static``
    for clang (on the same line) and parses again, which instantiates every body.
    """
    import clang.cindex as ci

    lines = source.splitlines()
    errors = [f"{n}: non-ASCII text (compile_shader reads the source as ASCII)    [{line.strip()}]"
              for n, line in enumerate(lines, 1) if not line.isascii()]
    tu = _parse(source)
    for line, message in forbidden_features(tu):
        errors.append(f"{line}: {message}    [{lines[line - 1].strip()}]")
    shared = _kernel_scope_shared(tu, kernels)
    if shared:
        tu = _parse(_made_static(source, shared))
    for diagnostic in tu.diagnostics:
        if diagnostic.severity < ci.Diagnostic.Error or _allowed_in_msl(diagnostic, {line for line, _ in shared}):
            continue
        where = diagnostic.location
        line = lines[where.line - 1].strip() if where.file else ""
        errors.append(f"{where.line}: {diagnostic.spelling}    [{line}]")
    return errors


def _kernel_scope_shared(tu, kernels: set[str]) -> list[tuple[int, int]]:
    """(line, column) of each threadgroup variable declared in one of ``kernels``."""
    import clang.cindex as ci

    found = []
    for cursor in tu.cursor.walk_preorder():
        if (cursor.kind == ci.CursorKind.VAR_DECL and _in_source(cursor)
                and cursor.type.get_address_space() == THREADGROUP_SPACE
                and cursor.semantic_parent is not None and cursor.semantic_parent.spelling in kernels
                and cursor.semantic_parent.kind == ci.CursorKind.FUNCTION_DECL):
            found.append((cursor.extent.start.line, cursor.extent.start.column))
    return found


def _made_static(source: str, where: list[tuple[int, int]]) -> str:
    lines = source.splitlines(keepends=True)
    for line, column in sorted(where, reverse=True):
        text = lines[line - 1]
        lines[line - 1] = text[: column - 1] + "static " + text[column - 1:]
    return "".join(lines)


def _allowed_in_msl(diagnostic, static_lines: set[int]) -> bool:
    """Whether clang's error is one that MSL does not make: a class's implicit copy
    or assignment between address spaces (MSL's implicit members serve every address
    space: a struct is read from and written to device memory by plain assignment),
    or the default initialisation of a kernel-scope threadgroup variable the check
    made static (MSL runs no constructor on threadgroup memory)."""
    spelling = diagnostic.spelling
    if diagnostic.location.line in static_lines and spelling.startswith("no matching constructor for initialization of 'threadgroup"):
        return True
    if not spelling.startswith(("no matching constructor for initialization of", "no viable overloaded '='")):
        return False
    notes = [c.spelling for c in diagnostic.children if c.spelling.startswith("candidate")]
    return bool(notes) and all("(the implicit " in n for n in notes) and any("address space" in n for n in notes)


def _in_source(cursor) -> bool:
    return cursor.location.file is not None and cursor.location.file.name == SOURCE


def forbidden_features(tu) -> list[tuple[int, str]]:
    """(line, message) for what C++14 allows and MSL does not, in the source (the stub is
    not looked at): program-scope variables outside the constant address space (static
    data members and static locals included), lambdas (before Metal 3.2), function
    pointers, derived classes, a function named main, the keywords of
    FORBIDDEN_KEYWORDS, and recursion among the source's functions, direct or through
    others. Calls are followed by name, so that those in uninstantiated templates count
    too, except to overloaded names (``simd_shuffle`` of a complex calling that of a
    float is no recursion) and operators: recursion through those goes unseen."""
    import clang.cindex as ci

    K, T = ci.CursorKind, ci.TypeKind
    declarations = (K.VAR_DECL, K.PARM_DECL, K.FIELD_DECL, K.TYPEDEF_DECL, K.TYPE_ALIAS_DECL)
    functions = (K.FUNCTION_DECL, K.FUNCTION_TEMPLATE, K.CXX_METHOD)
    found: list[tuple[int, str]] = []
    for token in tu.get_tokens(extent=tu.cursor.extent):
        if token.kind == ci.TokenKind.KEYWORD and token.spelling in FORBIDDEN_KEYWORDS and token.location.file.name == SOURCE:
            found.append((token.location.line, FORBIDDEN_KEYWORDS[token.spelling]))
    calls: dict[str, set[str]] = {}
    where: dict[str, int] = {}

    def function_type(t) -> bool:
        t = t.get_canonical()
        if t.kind in (T.POINTER, T.LVALUEREFERENCE, T.RVALUEREFERENCE):
            return t.get_pointee().get_canonical().kind in (T.FUNCTIONPROTO, T.FUNCTIONNOPROTO)
        return t.kind == T.MEMBERPOINTER

    def program_scope(cursor) -> bool:
        """A variable of static storage duration: at namespace scope, a static data
        member, or a static local. MSL puts all of these at program scope."""
        parent = cursor.semantic_parent
        return cursor.storage_class == ci.StorageClass.STATIC or parent is None or parent.kind in (K.TRANSLATION_UNIT, K.NAMESPACE)

    def visit(cursor, function: str | None) -> None:
        for child in cursor.get_children():
            if not _in_source(child):
                continue
            line = child.location.line
            if child.kind == K.LAMBDA_EXPR:
                found.append((line, "lambda (MSL has none before Metal 3.2)"))
            elif child.kind == K.CXX_BASE_SPECIFIER:
                found.append((line, "derived class (MSL has none)"))
            elif child.kind in declarations and function_type(child.type if child.kind not in (K.TYPEDEF_DECL, K.TYPE_ALIAS_DECL) else child.underlying_typedef_type):
                found.append((line, "function pointer (MSL has none)"))
            elif child.kind == K.VAR_DECL and program_scope(child) and child.type.get_address_space() != CONSTANT_SPACE:
                found.append((line, f"program scope variable '{child.spelling}' must reside in constant address space"))
            elif child.kind in functions and child.spelling == "main":
                found.append((line, "a function named main (MSL reserves it)"))
            inner = function
            if child.kind in functions and child.is_definition():
                inner = child.spelling
                calls.setdefault(inner, set())
                where.setdefault(inner, line)
            elif function is not None and child.kind in (K.CALL_EXPR, K.OVERLOADED_DECL_REF, K.DECL_REF_EXPR) and child.spelling:
                calls[function].add(child.spelling)
            visit(child, inner)

    visit(tu.cursor, None)
    found += _shuffles_behind_short_circuits(tu)
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


# SIMD-group functions: every lane of the group (of the team, for lanes_*) must run them.
SIMD_PREFIXES = ("simd_", "quad_", "lanes_")


def _shuffles_behind_short_circuits(tu) -> list[tuple[int, str]]:
    """(line, message) for a SIMD-group function in the right operand of && or ||: the
    lanes whose left operand decides skip it, and a shuffle that some lanes of the
    group skip is undefined (Metal's and CUDA's *_sync alike; on the H200 it paired
    later shuffles wrongly). Take it into a variable first."""
    import clang.cindex as ci

    found = []
    for cursor in tu.cursor.walk_preorder():
        if cursor.kind != ci.CursorKind.BINARY_OPERATOR or not _in_source(cursor):
            continue
        children = list(cursor.get_children())
        if len(children) != 2:
            continue
        left, right = children
        operator = next((t.spelling for t in cursor.get_tokens() if t.extent.start.offset >= left.extent.end.offset), "")
        if operator not in ("&&", "||"):
            continue
        called = {c.spelling for c in right.walk_preorder()
                  if c.kind in (ci.CursorKind.CALL_EXPR, ci.CursorKind.DECL_REF_EXPR, ci.CursorKind.OVERLOADED_DECL_REF)}
        if any(name.startswith(SIMD_PREFIXES) for name in called):
            found.append((cursor.location.line, f"SIMD-group function behind {operator} (some lanes would skip it)"))
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

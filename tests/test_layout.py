"""The package's structure: no import circles, no module importing another's private names, and
no function over 120 lines (unless its docstring, or its factory's, says why: "over 120 lines: ...")
or module over 900 lines in gputext/ and kernels/.

Read from the source with ast (nothing is imported): every ``import``/``from ... import`` at any
level of a module in gputext/, kernels/ (gputext.kernels) and datasets/ (gputext.datasets) is an
edge; a circle is a strongly connected set of more than one module. ``from .x import _name`` and
``x._name`` / ``x.y._name`` on an imported module are private uses across modules, within a package
too (gputext.io.info using gputext.io.corpus._open is one). KNOWN lists the uses that other open
work removes (none now: info, rows and validate use gputext.io.corpus's public names); add a line
only with the work that removes it, and delete it when the use is gone. KNOWN_CIRCLES likewise
(none now: gputext.io.anndata builds a corpus's fields and no longer imports gputext.io.corpus).
Anything new fails. The benchmark code is checked for circles too: scripts/ (its scripts import
one another by file name, scripts/harness as ``harness``) and the benchmarks/ package.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"gputext": "gputext", "kernels": "gputext.kernels", "datasets": "gputext.datasets"}
KNOWN_CIRCLES: list = []
KNOWN: set = set()  # (importing module, module, name) of a use that open work removes; none now


def modules(packages: dict = PACKAGES) -> dict:
    """module name -> (path, is_package) for every .py file of ``packages`` (folder -> the name its
    modules are imported under; default the installed packages)."""
    out = {}
    for folder, name in packages.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [name] + list(path.relative_to(ROOT / folder).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _target(module: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")[: None if is_pkg else -1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _dotted(node) -> str | None:
    """'a.b.c' for a chain of attribute accesses on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id] + parts[::-1])


def import_graph(mods: dict | None = None):
    """(edges: module -> set of modules, private: set of (module, module, name)). mods: module name
    -> (path or source text, is_package); default the installed packages' modules."""
    mods = modules() if mods is None else mods
    edges = {m: set() for m in mods}
    private = set()
    for m, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text() if isinstance(path, Path) else path)
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = _target(m, is_pkg, node)
                for a in node.names:
                    if f"{target}.{a.name}" in mods:
                        edges[m].add(f"{target}.{a.name}")
                        aliases[a.asname or a.name] = f"{target}.{a.name}"
                    elif target in mods:
                        edges[m].add(target)
                        if a.name.startswith("_") and not a.name.startswith("__") and target != m:
                            private.add((m, target, a.name))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods:
                        edges[m].add(a.name)
                        aliases[a.asname or a.name] = a.name
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            dotted = _dotted(node.value)  # x (an imported module) or x.y (a submodule of one)
            if dotted is None or dotted.split(".")[0] not in aliases:
                continue
            head, _, rest = dotted.partition(".")
            target = aliases[head] + ("." + rest if rest else "")
            if target in mods and target != m:
                private.add((m, target, node.attr))
    return edges, private


def circles(edges: dict) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            child = next((w for w in children if w in edges), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_circle_finder_finds_a_planted_circle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(edges) == [["a", "b", "c"]]


def test_private_use_finder_finds_planted_uses():
    mods = {"p": ("", True), "p.a": ("def _f():\n    pass\n\n_f()\n", False),  # its own private name: fine
            "p.b": ("from .a import _f\n", False),
            "p.c": ("from . import a\na._f()\n", False), "p.d": ("import p.a\nimport p\np.a._f()\n", False)}
    _, private = import_graph(mods)
    assert private == {("p.b", "p.a", "_f"), ("p.c", "p.a", "_f"), ("p.d", "p.a", "_f")}


def test_no_import_circles():
    edges, _ = import_graph()
    assert [c for c in circles(edges) if c not in KNOWN_CIRCLES] == []


def benchmark_modules() -> dict:
    """The modules of scripts/ (each script by its file name, as the scripts import one another with
    scripts/ on sys.path; scripts/harness as the package ``harness``) and of the benchmarks/ package."""
    out = {path.stem: (path, False) for path in (ROOT / "scripts").glob("*.py")}
    out.update(modules({"scripts/harness": "harness", "benchmarks": "benchmarks"}))
    return out


def test_no_import_circles_in_scripts_and_benchmarks():
    mods = benchmark_modules()
    assert "harness" in mods and "bench_knn" in mods
    edges, _ = import_graph(mods)
    assert circles(edges) == []


def test_no_private_names_across_modules():
    _, private = import_graph()
    new = sorted(private - KNOWN)
    assert new == [], "private names used across modules (make them public, or keep them in one module): " + \
        ", ".join(f"{a} uses {b}.{n}" for a, b, n in new)


LIMIT_FUNCTION = 120  # lines of a function, its docstring not counted
LIMIT_MODULE = 900  # lines of a module in gputext/ or kernels/
WHY = "over 120 lines"  # a longer function's docstring (or its factory's) says why, with these words


def long_functions(source: str) -> list[tuple[str, int]]:
    """(name, lines) of the functions over LIMIT_FUNCTION lines (docstring not counted) whose own
    docstring and enclosing functions' docstrings do not say why (WHY)."""
    out = []

    def visit(node, excused):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(child, clean=False) or ""
                length = child.end_lineno - child.lineno + 1
                if doc:
                    length -= child.body[0].end_lineno - child.body[0].lineno + 1
                says_why = excused or WHY in " ".join(doc.split())
                if length > LIMIT_FUNCTION and not says_why:
                    out.append((child.name, length))
                visit(child, says_why)
            else:
                visit(child, excused)

    visit(ast.parse(source), False)
    return out


def test_long_function_finder_finds_a_planted_one():
    body = "".join(f"    x{i} = {i}\n" for i in range(LIMIT_FUNCTION + 1))  # with its def: 122 lines
    assert long_functions("def f():\n    '''doc'''\n" + body) == [("f", LIMIT_FUNCTION + 2)]
    assert long_functions("def f():\n    '''One kernel, over 120 lines: the reason.'''\n" + body) == []
    nested = "def g():\n    '''A factory over 120\n    lines: the reason.'''\n    def f():\n" + body.replace("    x", "        x")
    assert long_functions(nested) == []
    assert long_functions("def f():\n" + "".join(body.splitlines(keepends=True)[:LIMIT_FUNCTION - 1])) == []


def test_no_function_over_120_lines_and_no_module_over_900():
    long, big = [], []
    for folder in ("gputext", "kernels"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            source = path.read_text()
            rel = path.relative_to(ROOT)
            if len(source.splitlines()) > LIMIT_MODULE:
                big.append(f"{rel} ({len(source.splitlines())} lines)")
            long += [f"{rel}:{name} ({n} lines)" for name, n in long_functions(source)]
    assert big == [], "modules over 900 lines: " + ", ".join(big)
    assert long == [], ("functions over 120 lines whose docstring does not say why (" + WHY + ": ...): "
                        + ", ".join(long))

"""The package's layout: folders that survive packaging tools, the layers, and module docstrings that
say where the book has each module and which notebooks use it."""
import ast
import json
import re
from pathlib import Path

import gnnbook

PACKAGE = Path(gnnbook.__file__).resolve().parent
# Names that Python packaging writes build output to, and that the common Python
# .gitignore templates ignore at any depth: a module folder with such a name is
# silently dropped by forks and skipped by tools as generated.
GENERATED_NAMES = {"dist", "build", "eggs", "sdist", "wheels", "develop-eggs", "downloads", "parts", "var", "lib",
                   "lib64"}


def test_no_package_folder_has_a_generated_output_name():
    bad = [p.relative_to(PACKAGE.parent) for p in PACKAGE.rglob("*") if p.is_dir() and p.name in GENERATED_NAMES]
    assert not bad, f"rename these package folders (build tools and .gitignore templates skip them): {bad}"


def test_distributed_runtime_is_gnnbook_distributed():
    import gnnbook.distributed as runtime

    assert Path(runtime.__file__).parent.name == "distributed"
    assert not (PACKAGE / "dist").exists()


# ----- the layout of issue 19: the folders are the layers, every module says where the book has it -----

ROOT = PACKAGE.parent
NOTEBOOKS = sorted([*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("labs/*.ipynb")])
FROM_IMPORT = re.compile(r"from\s+(gnnbook(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n]*)")


def module_names() -> dict[str, Path]:
    """Every module of the package (packages excluded), dotted name -> file."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__init__.py" or "_site" in path.parts:
            continue
        out[".".join(path.relative_to(ROOT).with_suffix("").parts)] = path
    return out


def imported_names(names: str) -> set[str]:
    """``a, b as c`` or ``(a,\n b)`` -> {"a", "b"}."""
    names = names.split("#")[0] if "(" not in names else names
    return {n.split(" as ")[0].strip() for n in names.strip().strip("()").split(",") if n.strip()}


def reexported_from(module: str) -> set[str]:
    """The names a package exports lazily from ``module`` (a package's ``_EXPORTS`` table, as
    ``gnnbook.distributed`` has): ``from gnnbook.distributed import LocalCluster`` uses ``cluster``."""
    parent, name = module.rsplit(".", 1)
    init = ROOT.joinpath(*parent.split("."), "__init__.py")
    if not init.exists():
        return set()
    for node in ast.walk(ast.parse(init.read_text())):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_EXPORTS" for t in node.targets):
            table = ast.literal_eval(node.value)
            return {exported for exported, source in table.items() if source == name}
    return set()


def notebooks_using(module: str) -> list[str]:
    """The notebooks whose code cells import or name ``module`` (``gnnbook.x.y``, ``"gnnbook.x.y:f"`` or
    ``from gnnbook.x import y``), or import a name their package re-exports from it."""
    pattern = re.compile(rf"(?<![\w.]){re.escape(module)}(?!\w)")
    parent, name = module.rsplit(".", 1)
    exported = reexported_from(module)
    users = []
    for nb in NOTEBOOKS:
        code = "\n".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code")
        imported = any(name in imported_names(names) or imported_names(names) & exported
                       for p, names in FROM_IMPORT.findall(code) if p == parent)
        if pattern.search(code) or imported:
            users.append(nb.relative_to(ROOT).as_posix())
    return users


def docstring_fields(path: Path) -> dict[str, str]:
    """The ``Book:`` and ``Used in:`` paragraphs of a module's docstring (each may wrap over lines)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    fields = {}
    for paragraph in doc.split("\n\n"):
        for key in ("Book:", "Used in:"):
            if paragraph.startswith(key):
                fields[key] = " ".join(paragraph[len(key):].split())
    return fields


def test_every_module_docstring_names_its_book_section_first():
    missing = []
    for name, path in module_names().items():
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        paragraphs = doc.split("\n\n")
        # the summary, then at once the book section (d2l's helpers say where they are defined likewise)
        if len(paragraphs) < 2 or not paragraphs[1].startswith("Book:"):
            missing.append(name)
    assert not missing, f"these modules' docstrings lack a 'Book:' paragraph right after the summary: {missing}"


def test_used_in_lists_exactly_the_notebooks_that_use_each_module():
    wrong = {}
    for name, path in module_names().items():
        said = docstring_fields(path).get("Used in:", "")
        said_list = [] if said.startswith("no notebook") else [s.strip() for s in said.rstrip(".").split(",")]
        actual = notebooks_using(name)
        if sorted(said_list) != actual:
            wrong[name] = (said_list, actual)
    assert not wrong, "fix the 'Used in:' paragraph (said, actual): " + json.dumps(wrong, indent=1)


def test_every_subpackage_declares_all_and_the_layers_contract_names_every_folder():
    import tomllib

    layers = None
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    for contract in config:
        if contract["type"] == "layers":
            layers = contract["layers"]
    assert layers, "pyproject.toml has no layers contract for import-linter"
    top = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert top == set(layers), f"every top-level module or folder is one layer: {sorted(top ^ set(layers))}"
    for init in PACKAGE.rglob("__init__.py"):
        if "_site" in init.parts or init.parent == PACKAGE:
            continue
        tree = ast.parse(init.read_text())
        names = [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                 if isinstance(t, ast.Name)]
        assert "__all__" in names, f"{init.relative_to(ROOT)} declares no __all__"


def test_no_private_name_is_imported_from_another_module():
    offenders = []
    for path in [*PACKAGE.rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("gnnbook")):
                offenders += [f"{path.relative_to(ROOT)}: {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    assert not offenders, f"private names imported across modules: {offenders}"


def test_imports_inside_the_package_are_relative():
    absolute = []
    for path in PACKAGE.rglob("*.py"):
        if "_site" in path.parts:      # loaded as a top-level sitecustomize: relative imports cannot work there
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("gnnbook"):
                absolute.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.Import) and any(a.name.startswith("gnnbook") for a in node.names):
                absolute.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not absolute, f"use relative imports inside gnnbook: {absolute}"


def test_readme_module_map_is_the_tree():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## The package"):readme.index("## The distributed DGL trainer")]
    from gnnbook.course.layout import layers

    missing = [layer for layer in layers() if not re.search(rf"(?<![\w/]){re.escape(layer)}(/|\.py)", section)]
    for name in module_names():
        stem = name.rsplit(".", 1)[1]
        if not re.search(rf"(?<!\w){re.escape(stem)}(?!\w)", section):
            missing.append(name)
    assert not missing, f"README's module map lacks: {missing}"


# A function's knobs travel in settings objects (training.train.Optim, training.minibatch.Batches,
# ch5_minibatch.history.Clusters): a public function with more than this many parameters says why in its
# docstring, after this marker (a rank's entry point takes JSON, so each knob is its own argument).
MAX_PARAMETERS, WHY_SO_MANY = 8, "More than 8 parameters:"


def test_no_public_function_has_more_than_8_parameters_without_a_reason():
    """Constructors count (their reason may be in the class's docstring), and so do ``*args`` and ``**kwargs``."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        owner = {id(item): node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) for item in node.body}
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or (node.name.startswith("_") and node.name != "__init__"):
                continue
            args = node.args
            names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg not in ("self", "cls")]
            names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
            doc = ast.get_docstring(node) or ""
            if node.name == "__init__" and id(node) in owner:
                doc += ast.get_docstring(owner[id(node)]) or ""
            if len(names) > MAX_PARAMETERS and WHY_SO_MANY not in doc:
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({len(names)})")
    assert not offenders, (f"group the knobs (Optim, Batches, a dataclass) or say why after {WHY_SO_MANY!r} in "
                           f"the docstring: {offenders}")


def _documented_names(doc: str) -> tuple[set[str], set[str]]:
    """A package docstring's map: its list (lines starting with '- ', up to a blank line) names modules as
    ``name`` or :mod:`...name`.  Returns (every lowercase name the list mentions, the names at the head of
    an item or of a ';'-separated part of one, before its ':', which must be modules)."""
    mentioned, heads = set(), set()

    def names(text: str) -> set[str]:
        found = set(re.findall(r"``(\w+)``", text)) | set(re.findall(r":mod:`~?[\w.]*?(\w+)`", text))
        return {n for n in found if n.islower()}  # CamelCase names are classes

    for item in re.split(r"\n(?=- )", doc):
        if item.startswith("- "):
            item = item.split("\n\n")[0]
            mentioned |= names(item)
            for part in item[2:].split(";"):
                head, sep, _ = part.partition(": ")
                if sep:
                    heads |= names(head)
    return mentioned, heads


def test_every_package_docstring_maps_exactly_its_modules():
    """Issue 38, item 7: each package's docstring is a map of its modules, and the map is the tree."""
    wrong = {}
    for init in sorted(PACKAGE.rglob("__init__.py")):
        if "_site" in init.parts:
            continue
        folder = init.parent
        modules = {p.stem for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
        modules |= {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
        documented, heads = _documented_names(ast.get_docstring(ast.parse(init.read_text())) or "")
        missing, extra = sorted(modules - documented), sorted(heads - modules)
        if missing or extra:
            wrong[folder.relative_to(PACKAGE.parent).as_posix()] = dict(missing=missing, not_a_module=extra)
    assert not wrong, json.dumps(wrong, indent=1)

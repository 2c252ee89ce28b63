"""The package's folders must survive packaging tools and common .gitignore templates."""
from pathlib import Path

import gnnbook

PACKAGE = Path(gnnbook.__file__).resolve().parent
# Names that Python packaging writes build output to, and that the common Python
# .gitignore templates ignore at any depth: a module folder with such a name is
# silently dropped by forks and skipped by tools as generated.
GENERATED_NAMES = {"dist", "build", "eggs", "sdist", "wheels", "develop-eggs", "downloads", "parts", "var", "lib", "lib64"}


def test_no_package_folder_has_a_generated_output_name():
    bad = [p.relative_to(PACKAGE.parent) for p in PACKAGE.rglob("*") if p.is_dir() and p.name in GENERATED_NAMES]
    assert not bad, f"rename these package folders (build tools and .gitignore templates skip them): {bad}"


def test_distributed_runtime_is_gnnbook_distributed():
    import gnnbook.distributed as runtime

    assert Path(runtime.__file__).parent.name == "distributed"
    assert not (PACKAGE / "dist").exists()

"""Maps the top-level folders (engine/, hooks/, policies/, schemas/) into the
single ``innerguard`` import namespace, so nothing named ``engine`` or
``hooks`` lands at the top of site-packages."""
from pathlib import Path

from setuptools import setup

ROOTS = {"engine": "innerguard.engine", "hooks": "innerguard.hooks"}
DATA = {"policies": "innerguard.policies", "schemas": "innerguard.schemas"}


def _packages():
    found = {}
    for folder, name in ROOTS.items():
        for init in sorted(Path(folder).rglob("__init__.py")):
            rel = init.parent.relative_to(folder).parts
            found[".".join((name, *rel))] = str(init.parent)
    for folder, name in DATA.items():
        found[name] = folder
    return found


packages = _packages()
setup(
    packages=list(packages),
    package_dir=packages,
    package_data={**{name: ["**/*"] for name in DATA.values()},
                  "innerguard.engine.audit": ["templates/*.j2"],  # the audit report's template
                  "innerguard.engine.build": ["protocols/*.json"]},  # the Attention Tracker protocol texts
    include_package_data=True,
)

"""Package discovery for edgert: the repository keeps the product's four folders at the top
(export/, quantize/, runtime/, apps/) and users import them as edgert.export, edgert.quantize,
edgert.runtime and edgert.apps. setuptools' finder walks each folder, so every package below it is
in the wheel (a hand-written list once left edgert.runtime.power out). Metadata is in
pyproject.toml."""

import atexit
import shutil
import tempfile

from setuptools import find_packages, setup

FOLDERS = {
    "edgert.export": "export",
    "edgert.quantize": "quantize",
    "edgert.runtime": "runtime",
    "edgert.apps": "apps",
}

packages = []
for name, folder in FOLDERS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]

# `pip wheel .` / `python -m build` from the checkout: setuptools' build/ and *.egg-info go to a
# scratch folder that is removed afterwards, not into the source tree
scratch = tempfile.mkdtemp(prefix="edgert-setup-")
atexit.register(shutil.rmtree, scratch, True)

setup(
    packages=packages,
    package_dir=dict(FOLDERS),
    options={"build": {"build_base": f"{scratch}/build"}, "egg_info": {"egg_base": scratch}},
)

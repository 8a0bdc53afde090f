"""Package discovery for edgert: the repository keeps the product's four folders at the top
(export/, quantize/, runtime/, apps/) and users import them as edgert.export, edgert.quantize,
edgert.runtime and edgert.apps. setuptools' finder walks each folder, so every package below it is
in the wheel (a hand-written list once left edgert.runtime.power out). Metadata is in
pyproject.toml."""

from setuptools import find_packages, setup

FOLDERS = {"edgert.export": "export", "edgert.quantize": "quantize",
           "edgert.runtime": "runtime", "edgert.apps": "apps"}  # fmt: skip

packages = []
for name, folder in FOLDERS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir=dict(FOLDERS))

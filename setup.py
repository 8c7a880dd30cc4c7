"""Package discovery: top-level kernels/ and datasets/ install as gputext.kernels and gputext.datasets."""
from setuptools import find_packages, setup

MAPPED = {"kernels": "gputext.kernels", "datasets": "gputext.datasets"}

packages = find_packages(include=["gputext", "gputext.*"])
package_dir = {}
for folder, name in MAPPED.items():
    for found in find_packages(include=[folder, folder + ".*"]):
        packages.append(name + found[len(folder):])
    package_dir[name] = folder

setup(packages=packages, package_dir=package_dir)

"""Build the nibble extension by running CMake on the repository root.

Offline install with Debian's NumPy (see docs/python.md):

    /usr/bin/python3 -m venv --system-site-packages V
    V/bin/pip install --no-build-isolation ./python

Environment: NIBBLE_SOURCE_DIR (the repository root; default: the parent of this directory),
NIBBLE_CMAKE_ARGS (extra CMake arguments), CMAKE_BUILD_PARALLEL_LEVEL (build jobs, default 2).
"""

import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.environ.get("NIBBLE_SOURCE_DIR", os.path.dirname(HERE)))


class CMakeExtension(Extension):
    """An extension built by CMake (target nibble_python), not by setuptools."""

    def __init__(self, name, target):
        super().__init__(name, sources=[])
        self.target = target


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if not os.path.isfile(os.path.join(ROOT, "CMakeLists.txt")):
            raise RuntimeError(f"nibble: no CMakeLists.txt in {ROOT}; set NIBBLE_SOURCE_DIR")
        out_dir = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        os.makedirs(build_dir, exist_ok=True)
        configure = [
            "cmake", "-S", ROOT, "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            "-DNIBBLE_BUILD_PYTHON=ON",
            "-DNIBBLE_BUILD_TESTS=OFF",
            "-DNIBBLE_BUILD_BENCH=OFF",
            "-DNIBBLE_BUILD_CLI=OFF",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DNIBBLE_PY_DIR={out_dir}",
        ] + shlex.split(os.environ.get("NIBBLE_CMAKE_ARGS", ""))
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", ext.target, "-j", jobs])


setup(
    ext_modules=[CMakeExtension("nibble._nibble", "nibble_python")],
    cmdclass={"build_ext": CMakeBuild},
)

"""Load a repository file as a module by its path: build.py and catalog.py must import without the package
(an isolated wheel build has no numpy), so their tests load them the same way."""
import importlib.util
import sys


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while defining
    spec.loader.exec_module(mod)
    return mod

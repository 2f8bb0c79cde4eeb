"""Child-script text shared by the benchmarks that charge each module what its own loading cost: thread CPU in
``start_profile.py``, RSS in ``bench_footprint.py``. Each measures its own way; how a module's loading is caught
is written once here, so that both catch the same modules."""

# Python source for the child: the base of its ``_Loader``, which stands for the module's own loader in all but what
# the child overrides to measure (``exec_module``, ``create_module``).
LOADER_PROXY = r"""
class _LoaderProxy:
    def __init__(self, loader, name):
        self._loader, self._name = loader, name
    def __getattr__(self, attribute):
        return getattr(self._loader, attribute)
    def create_module(self, spec):
        return self._loader.create_module(spec)
    def exec_module(self, module):
        return self._loader.exec_module(module)
"""

# Python source for the child: a meta-path finder, installed first, that asks the other finders for each module's
# spec and wraps the spec's loader in ``_Loader(loader, name)``, a class the child defines before this text.
WRAPPING_FINDER = r"""
class _Finder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        for finder in sys.meta_path:
            if finder is cls or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, name)
                return spec
        return None

sys.meta_path.insert(0, _Finder)
"""

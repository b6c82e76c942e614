"""Public names of a package resolved from their submodules on first use (PEP 562), so that
importing the package stays light (``formulations``, ``milp_planner.engine``).

>>> import types
>>> pkg = types.ModuleType("pkg")
>>> pkg.__all__, pkg.__getattr__, pkg.__dir__ = lazy_names("json", {"decoder": ("JSONDecoder",)}, vars(pkg))
>>> pkg.__getattr__("JSONDecoder").__name__
'JSONDecoder'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_names(package: str, homes: dict[str, tuple[str, ...]],
               namespace: dict) -> tuple[list[str], Callable[[str], object], Callable[[], list[str]]]:
    """(``__all__``, ``__getattr__``, ``__dir__``) for ``package`` whose submodule ``m`` gives
    the names ``homes[m]``; a name, once imported, is kept in ``namespace`` (the package's
    globals)."""
    home_of = {name: module for module, names in homes.items() for name in names}
    public = list(home_of)

    def __getattr__(name: str):
        """A public name, imported from its submodule on first use and kept."""
        if name not in home_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home_of[name]}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(public))

    return public, __getattr__, __dir__

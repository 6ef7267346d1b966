"""localkube's errors form one tree under LocalkubeError, drawn in localkube/errors.py.

Like httpx's test that keeps `__all__` honest: an exception class added to
localkube without joining the tree, or a drawing that names a class that no
longer exists, fails here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import localkube
from localkube import errors
from localkube.errors import LocalkubeError


def find_localkube_exceptions() -> dict[str, type[BaseException]]:
    found = {}
    for module_info in pkgutil.walk_packages(localkube.__path__, "localkube."):
        if module_info.name.endswith("__main__"):
            continue
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                found[name] = value
    return found


def drawn_names() -> set[str]:
    """The classes of the drawing: its root, then the name after each ├── or └──."""
    doc = errors.__doc__ or ""
    assert "\n    LocalkubeError\n" in doc, "the drawing starts at LocalkubeError"
    return {"LocalkubeError", *re.findall(r"[├└]── (\w+)", doc)}


def test_every_localkube_exception_is_a_localkube_error():
    outside = [
        name
        for name, cls in find_localkube_exceptions().items()
        if not issubclass(cls, LocalkubeError)
    ]
    assert not outside, f"not under LocalkubeError: {sorted(outside)}"


def test_the_drawn_tree_names_exactly_the_exceptions_there_are():
    assert drawn_names() == set(find_localkube_exceptions())


def test_the_kubelet_and_the_api_server_errors_have_one_name_each():
    from localkube.apiserver.errors import ApiError
    from localkube.kubelet.apiclient import ApiRequestError, RelistRequired
    from localkube.kubelet.errors import KubeletError

    assert issubclass(ApiRequestError, KubeletError) and issubclass(RelistRequired, KubeletError)
    assert issubclass(ApiError, LocalkubeError) and not issubclass(ApiError, KubeletError)

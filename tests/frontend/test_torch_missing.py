import sys

import pytest


def test_clear_error_without_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    from retarget.frontend.torch import from_torch
    with pytest.raises(ImportError, match=r"pip install retarget\[torch\]"):
        from_torch(object(), None)

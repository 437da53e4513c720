"""The build guard: a stale torch lock is cleared before loading, and a failed build falls back to the references,
saying so once."""

import warnings

import pytest
import torch
from torch.utils import cpp_extension

from icml25 import ops
from icml25.ops import build, fp_quant
from icml25.ops.fp_quant import FPFormat


@pytest.fixture
def fresh_build_state():
    """Forget the loaded extension for the test, and again afterwards so later tests load the real one."""
    build.compiled.cache_clear()
    yield
    build.compiled.cache_clear()


def test_a_stale_torch_lock_is_removed_before_load(fresh_build_state, tmp_path, monkeypatch):
    out = tmp_path / "kernels"
    out.mkdir()
    (out / "lock").touch()  # what a build killed half-way leaves behind
    seen = {}

    def fake_load(name, sources, build_directory, **kw):
        seen["lock_present"] = (out / "lock").exists()
        seen["build_directory"] = build_directory
        return "module"

    monkeypatch.setattr(build, "build_directory", lambda: out)
    monkeypatch.setattr(cpp_extension, "load", fake_load)
    assert build.compiled() == "module"
    assert seen == {"lock_present": False, "build_directory": str(out)}


def test_a_failed_build_falls_back_to_the_reference_and_says_so_once(fresh_build_state, monkeypatch):
    def no_compiler():
        raise RuntimeError("Error building extension\nc++: error: no such compiler\nninja: build stopped")

    calls = []
    reference = fp_quant.fp_quantize_reference
    monkeypatch.setattr(build, "_load", no_compiler)
    monkeypatch.setattr(fp_quant, "fp_quantize_reference", lambda *a: calls.append(a) or reference(*a))
    x = torch.randn(8, 16)
    with pytest.warns(build.KernelFallbackWarning, match="no such compiler.*pure-PyTorch references"):
        y = ops.fp_quantize(x, 4, 3, block_size=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ops.fp_quantize(x, 4, 3)
    assert len(calls) == 2 and ops.backend() == "reference"
    assert y.equal(reference(x, FPFormat(4, 3), 4))


def test_icml25_no_kernels_selects_the_references(fresh_build_state, monkeypatch):
    monkeypatch.setenv("ICML25_NO_KERNELS", "1")
    with pytest.warns(build.KernelFallbackWarning, match="ICML25_NO_KERNELS"):
        assert ops.backend() == "reference"

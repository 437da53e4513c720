"""The build guard: a stale torch lock is cleared before loading, and a failed build falls back to the references,
saying so once."""

import importlib
import os
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


@pytest.fixture
def fresh_device_notice():
    build._off_cpu.cache_clear()
    yield
    build._off_cpu.cache_clear()


def test_tensors_off_the_cpu_take_the_reference_and_say_so_once(fresh_device_notice):
    """A tensor whose device is not the CPU (here the meta device, which has shapes but no values; a CUDA tensor
    takes the same branch) runs the op's PyTorch reference, with one notice per device type."""
    x = torch.empty(4, 64, device="meta")
    with pytest.warns(build.KernelDeviceWarning, match="tensors on meta.*references"):
        y = ops.fp_quantize(x, 4, 3)  # (blocks would ask whether a block is tiny, which a meta tensor cannot say)
    assert y.device.type == "meta" and y.shape == x.shape
    values = torch.empty(10, 8, device="meta", requires_grad=True)
    indices = torch.zeros(3, 2, dtype=torch.long, device="meta")
    weights = torch.empty(3, 2, device="meta", requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once already
        bag = ops.embedding_bag(values, indices, weights)
    assert bag.device.type == "meta" and bag.shape == (3, 8)
    assert build.kernels_for(torch.zeros(2)) is build.compiled()  # the CPU keeps the compiled path


def test_the_dispatchers_hand_off_cpu_tensors_to_the_references(fresh_device_notice, monkeypatch):
    """Which function runs: the reference, never the compiled module, for a tensor off the CPU."""
    calls = []
    for module, name in ((fp_quant, "fp_quantize_reference"), (ops.embedding_bag.__module__, "embedding_bag_reference"),
                         (ops.expert_ffn.__module__, "expert_ffn_reference")):
        module = importlib.import_module(module) if isinstance(module, str) else module
        # the expert loop's nonzero() cannot run on meta tensors, so the stand-in only records the call
        monkeypatch.setattr(module, name, lambda *a, _n=name, **k: calls.append(_n) or torch.empty(0))
    monkeypatch.setattr(build, "compiled", lambda: pytest.fail("the compiled module was asked for"))
    with pytest.warns(build.KernelDeviceWarning):
        ops.fp_quantize(torch.empty(3, device="meta"), 4, 3)
    ops.embedding_bag(torch.empty(4, 2, device="meta"), torch.zeros(1, 1, dtype=torch.long, device="meta"),
                      torch.empty(1, 1, device="meta"))
    ops.expert_ffn(torch.empty(2, 3, device="meta"),
                   ops.Routing(torch.zeros(2, 1, dtype=torch.long, device="meta"), torch.empty(2, 1, device="meta")),
                   ops.Experts(*(torch.empty(1, a, b, device="meta") for a, b in ((3, 4), (3, 4), (4, 3)))))
    assert calls == ["fp_quantize_reference", "embedding_bag_reference", "expert_ffn_reference"]


def test_the_session_start_left_nothing_to_compile():
    """tests/conftest.py builds the kernels before any test: by the time a test (or a notebook cell with its
    timeout) runs, the pinned ninja finds the extension up to date, so loading it never compiles."""
    import subprocess

    import ninja

    ops.prepare()
    dry = subprocess.run([f"{ninja.BIN_DIR}/ninja", "-n", "-C", str(build.build_directory())], capture_output=True,
                         text=True)
    assert dry.returncode == 0 and "no work to do" in dry.stdout, dry.stdout + dry.stderr


def test_a_build_runs_the_pinned_ninja_whatever_the_path(fresh_build_state, tmp_path, monkeypatch):
    """A system ninja of another version earlier on the PATH would read the build log as too old and recompile
    everything; while torch builds, the pinned one comes first."""
    import shutil

    import ninja

    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin")
    seen = {}
    monkeypatch.setattr(cpp_extension, "load", lambda *a, **k: seen.setdefault("ninja", shutil.which("ninja")))
    monkeypatch.setattr(build, "build_directory", lambda: tmp_path / "kernels")
    build.compiled()
    assert seen["ninja"] == f"{ninja.BIN_DIR}/ninja" and os.environ["PATH"] == f"{tmp_path}{os.pathsep}/usr/bin"

"""The machine a result was computed on: the CPU's name, its last-level cache and the one-line signature that the
builder writes into the manifest and the ledger."""

import torch

from icml25.core import machine


def test_cpu_model_is_the_kernel_s_model_name_and_falls_back_without_one(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R)  Xeon(R) Processor\n"
                    "processor\t: 1\nmodel name\t: Intel(R)  Xeon(R) Processor\n")
    assert machine.cpu_model(info) == "Intel(R) Xeon(R) Processor"
    info.write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")  # an Arm kernel names no model
    assert machine.cpu_model(info) == machine.cpu_model(tmp_path / "absent") != ""


def test_last_level_cache_is_the_largest_reported_and_a_default_without_any(tmp_path):
    for index, size in enumerate(["48K", "32K", "2048K", "480M"]):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "size").write_text(size + "\n")
    assert machine.last_level_cache_bytes(tmp_path) == 480 * 2**20
    assert machine.last_level_cache_bytes(tmp_path / "absent") == machine.DEFAULT_LLC_BYTES


def test_signature_names_the_cpu_its_instruction_set_and_torch():
    facts = {"cpu": "Demo CPU", "isa": "AVX2", "mkl_cbwr": None, "llc_mib": 32, "cores": 2, "torch": "2.13.0+cpu"}
    assert machine.signature(facts) == "Demo CPU, AVX2, 32 MiB LLC, 2 cores, torch 2.13.0+cpu"
    pinned = machine.signature(dict(facts, mkl_cbwr="AVX2"))
    assert pinned == "Demo CPU, AVX2 (MKL_CBWR=AVX2), 32 MiB LLC, 2 cores, torch 2.13.0+cpu"
    here = machine.describe()
    assert here["isa"] == torch.backends.cpu.get_cpu_capability() and here["torch"] == torch.__version__
    assert machine.signature() == machine.signature(here)

"""dit_lora.core.quiet: bitsandbytes' kernel note dropped at its logger, nothing else; the dtype keyword each library
takes without a deprecation warning."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings

import torch

from dit_lora.core import quiet


def test_the_bitsandbytes_kernel_note_is_dropped_and_its_other_messages_still_show(capsys):
    quiet.install()
    quiet.install()  # idempotent: one filter
    logger = logging.getLogger(quiet.BNB_CPU_LOGGER)
    assert sum(isinstance(f, quiet.DropMessage) for f in logger.filters) == 1
    handler = logging.StreamHandler(sys.stderr)
    logger.addHandler(handler)
    try:
        logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s. Please make sure you "
                       "already `pip install kernels`", "No module named 'kernels'")
        logger.warning("a real bitsandbytes problem")
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert "gemm_4bit_forward" not in err and "a real bitsandbytes problem" in err


def test_a_command_prints_no_third_party_noise_and_our_warnings_still_show():
    """`dit-lora models` in a fresh process imports PEFT (and so bitsandbytes) through the doctor's checks... here
    directly after the entry point's install: no kernel note, no torch_dtype deprecation; a UserWarning shows."""
    code = ("from dit_lora.core import quiet; quiet.install(); import peft, warnings; "
            "warnings.warn('a warning of ours', UserWarning)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "gemm_4bit_forward" not in run.stdout + run.stderr and "a warning of ours" in run.stderr
    # with torchao (the quant extra), which PEFT imports: its extensions this torch cannot load, torch's enum note
    assert "torchao/_C" not in run.stderr and "register_constant" not in run.stderr


def test_the_dtype_keyword_loads_a_diffusers_model_without_a_deprecation_warning(tiny_sana):
    from diffusers import SanaTransformer2DModel

    assert set(quiet.dtype_kwarg("transformers", torch.float32)) == {"dtype"}  # transformers >= 4.56
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = SanaTransformer2DModel.from_pretrained(tiny_sana, subfolder="transformer",
                                                       **quiet.dtype_kwarg("diffusers", torch.bfloat16))
    assert next(model.parameters()).dtype == torch.bfloat16
    assert not [w for w in caught if "torch_dtype" in str(w.message)]


def test_the_sana_loader_passes_no_deprecated_keyword(tiny_sana, monkeypatch):
    """The families' own loading (Sana's transformer, DC-AE and Gemma text encoder): no diffusers FutureWarning,
    and transformers (whose deprecation is a log line printed once per process) is given `dtype`."""
    import transformers

    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_family

    seen = []
    original = transformers.AutoModel.from_pretrained.__func__

    def recording(cls, *args, **kwargs):
        seen.append(sorted(kwargs))
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", classmethod(recording))
    cfg = TrainConfig.for_family("sana", pretrained_model_name_or_path=str(tiny_sana), train_data_dir=str(tiny_sana))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        get_family("sana").model.load_components(cfg, torch.device("cpu"))
    assert not [w for w in caught if "torch_dtype" in str(w.message)]
    assert seen and all("dtype" in keys and "torch_dtype" not in keys for keys in seen)


def test_accelerates_list_of_defaulted_launch_options_is_dropped(capsys):
    # `dit-lora launch recipes/sana_lora.py ...` (the README's quickstart) printed it on every run, saying
    # `--mixed_precision` was 'no' while the run trains in bf16
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    quiet.install()
    logger = logging.getLogger(quiet.ACCELERATE_LAUNCH_LOGGER)
    handler = logging.StreamHandler(sys.stderr)
    logger.addHandler(handler)
    try:
        _validate_launch_command(launch_command_parser().parse_args(["recipes/sana_lora.py"]))
        logger.warning("another accelerate launch warning")
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert "were not passed to `accelerate launch`" not in err and "another accelerate launch warning" in err

"""``--output_name``: the adapter, its ComfyUI export and its EMA file also written under the name (the same tensors),
diffusers' ``load_lora_weights(folder)`` still taking ``pytorch_lora_weights.safetensors``; an overwriting run under
another name removes the old copies; a user's own file of that name is refused before training."""

from __future__ import annotations

import pytest
import torch
from conformance import CONFIGS, demo_args, demo_root, train
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from dit_lora.core.errors import UserError

pytestmark = pytest.mark.slow


def _args(root, out, **extra):
    return demo_args("lumina2", CONFIGS / "lumina2" / "demo.yaml", root, out, inject_faults="", **extra)


def test_named_copies_are_written_replaced_and_a_users_file_is_refused(tmp_path_factory, tmp_path):
    root = demo_root("lumina2", tmp_path_factory)
    out = tmp_path / "out"
    train(["--demo", "true", *_args(root, out, output_name="my-style", use_ema="true")])
    trained = {p.name for p in out.glob("*.safetensors")}
    for source in ("pytorch_lora_weights", "pytorch_lora_weights_comfyui", "pytorch_lora_weights_ema"):
        copy = source.replace("pytorch_lora_weights", "my-style")
        assert {f"{source}.safetensors", f"{copy}.safetensors"} <= trained
        original, named = load_file(str(out / f"{source}.safetensors")), load_file(str(out / f"{copy}.safetensors"))
        assert original.keys() == named.keys() and all(torch.equal(original[k], named[k]) for k in original)
        with safe_open(str(out / f"{copy}.safetensors"), "pt") as f, safe_open(str(out / f"{source}.safetensors"), "pt") as g:
            assert f.metadata()["dit_lora_source"] == f"{source}.safetensors"
            assert {k: v for k, v in f.metadata().items() if not k.startswith("dit_lora_")} == {
                k: v for k, v in g.metadata().items() if not k.startswith("dit_lora_")}  # fmt: skip

    from diffusers import Lumina2Pipeline

    pipe = Lumina2Pipeline.from_pretrained(root / "tiny-lumina2")
    pipe.load_lora_weights(str(out))  # several .safetensors in the folder: diffusers takes its own name
    assert any("lora_A" in n for n, _ in pipe.transformer.named_parameters())

    train(["--demo", "true", *_args(root, out, output_name="other", overwrite_output_dir="true")])
    names = {p.name for p in out.glob("*.safetensors")}
    assert "other.safetensors" in names and "other_comfyui.safetensors" in names
    assert not any(n.startswith("my-style") for n in names) and "pytorch_lora_weights_ema.safetensors" not in names

    save_file({"w": torch.zeros(1)}, str(out / "mine.safetensors"))  # the user's own file
    with pytest.raises(UserError, match=r"--output_name mine: .*mine\.safetensors already exists and dit-lora did not write"):
        train(["--demo", "true", *_args(root, out, output_name="mine", overwrite_output_dir="true")])
    assert load_file(str(out / "mine.safetensors"))["w"].shape == (1,)  # left as it was

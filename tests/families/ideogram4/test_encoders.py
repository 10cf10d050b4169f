"""Ideogram 4's encoders against Ideogram4Pipeline's own code: the cached latents are what its decode undoes, and
the ragged caption features are its ``encode_prompt``'s real tokens, at any padding."""

from __future__ import annotations

import pytest
import torch


def _comps(parts):
    from dit_lora.contract.family import Components

    return Components(model=None, encoders={k: parts[k] for k in ("vae", "tokenizer", "text_encoder")})


def test_the_latents_are_what_the_pipelines_decode_undoes(parts):
    """The pipeline's decode (batch-norm denormalisation, then ``view(B, h, w, 2, 2, C).permute(0, 5, 1, 3, 2, 4)``)
    of the packed tokens gives back the VAE posterior's mode: the patch order and the statistics are the pipeline's."""
    from dit_lora.kit.tiny import shapes_pixels
    from dit_lora.families.ideogram4.encoders import packed_latents

    vae = parts["vae"]
    pixels = shapes_pixels(64, seed=1, n=2)
    latents = packed_latents(vae, pixels)
    assert latents.shape == (2, 16, 4, 4)  # 64 px: 8x smaller, then 2 x 2 patches of 4 channels
    z = latents.flatten(2).transpose(1, 2)  # the pipeline's (B, tokens, channels), row-major
    mean = vae.bn.running_mean.view(1, 1, -1)
    z = z * torch.sqrt(vae.bn.running_var + vae.config.batch_norm_eps).view(1, 1, -1) + mean
    z = z.view(2, 4, 4, 2, 2, 4).permute(0, 5, 1, 3, 2, 4).reshape(2, 4, 8, 8)
    with torch.no_grad():
        mode = vae.encode(pixels).latent_dist.mode()
    torch.testing.assert_close(z, mode, rtol=1e-5, atol=1e-5)
    assert bool(vae.bn.running_mean.abs().sum() > 0)  # the tiny VAE's statistics are not 0 and 1


def test_captions_keep_their_own_tokens_of_the_pipelines_features(parts):
    from diffusers import Ideogram4Pipeline

    from dit_lora.families.ideogram4.encoders import LENGTHS_KEY, Ideogram4Encoders, caption_tokens

    captions = ["a red circle", "a small blue square on a green background"]
    out = Ideogram4Encoders().encode_prompts(_comps(parts), captions)
    lengths = out[LENGTHS_KEY].tolist()
    pipe = Ideogram4Pipeline(scheduler=None, vae=None, transformer=None, unconditional_transformer=None,
                             tokenizer=parts["tokenizer"], text_encoder=parts["text_encoder"])  # fmt: skip
    features, _, _, indicator = pipe.encode_prompt(captions, grid_h=2, grid_w=2, max_sequence_length=64, device="cpu")
    assert lengths == (indicator == 3).sum(1).tolist() == [caption_tokens(parts["tokenizer"], c) for c in captions]
    assert lengths[0] < lengths[1] and out["prompt_embeds"].shape == (2, lengths[1], 13 * 8)
    for row, n in enumerate(lengths):
        # the pipeline left-pads to 64 here; the cache encodes at the batch's longest: the same features
        torch.testing.assert_close(out["prompt_embeds"][row, :n], features[row, 64 - n : 64], rtol=1e-5, atol=1e-6)
        assert not out["prompt_embeds"][row, n:].any()


def test_a_caption_longer_than_the_caption_length_is_refused_in_one_paragraph(parts):
    from dit_lora.contract.capabilities import TextSettings
    from dit_lora.core.errors import UserError
    from dit_lora.families.ideogram4.encoders import Ideogram4Encoders
    from dit_lora.families.ideogram4.state import run_state

    comps = _comps(parts)
    run_state(comps).text = TextSettings(max_sequence_length=12)
    with pytest.raises(UserError, match=r"longer than the caption length, 12 tokens.*--max_sequence_length"):
        Ideogram4Encoders().encode_prompts(comps, ["a red circle", "a small blue square on a green background"])


def test_a_long_caption_is_left_out_as_a_bad_sample_by_the_tokenizers_exact_count(parts):
    """The caption-length report counts what the pipeline encodes (the chat turn with each caption, exactly), and for
    Ideogram 4 (TextSettings.refused) a caption over the length is a sample the run leaves out, named with its token
    count (check-data blocks its row); the rest pass."""
    from types import SimpleNamespace

    from dit_lora.config import TrainConfig
    from dit_lora.contract.family import Components
    from dit_lora.data.captions import refused_captions, token_counter_from_components, truncation_line
    from dit_lora.families.ideogram4.encoders import Ideogram4Encoders, caption_tokens
    from dit_lora.families.ideogram4.state import Ideogram4Run

    captions = ["a red circle", " a small blue square\non a green background", "circle circle circle circle"]
    exact = [caption_tokens(parts["tokenizer"], c) for c in captions]
    cfg = TrainConfig.for_family("ideogram4", max_sequence_length=max(exact) - 1)
    state = Ideogram4Run(text=Ideogram4Encoders().text_settings(cfg))
    comps = Components(model=None, encoders={"tokenizer": parts["tokenizer"]}, state=state)
    counter = token_counter_from_components(comps)
    assert counter.count(captions) == exact and counter.refused
    samples = [SimpleNamespace(key=f"{i}.png", caption=c) for i, c in enumerate(captions)]
    longest = samples[exact.index(max(exact))].key
    assert refused_captions(samples, counter) == {longest: max(exact)}
    assert "which the pipeline refuses rather than cut, so a run leaves them out" in truncation_line(samples, counter)


@pytest.mark.slow
def test_a_run_quarantines_the_long_caption_and_trains_on_the_rest(tiny_ideogram4, tmp_path):
    import json
    import types

    from dit_lora.config.parser import parse_config
    from dit_lora.contract.spec import configure
    from dit_lora.core.errors import UserError
    from dit_lora.data.prepare import prepare_data
    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.registry import get_spec

    data = make_shapes_dataset(tmp_path / "data", n=4, size=64, seed=0)
    rows = [json.loads(line) for line in (data / "metadata.jsonl").read_text().splitlines()]
    rows[0]["text"] = "a red circle on a blue background with a small green square and a yellow triangle"
    (data / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    accelerator = types.SimpleNamespace(is_main_process=True, process_index=0, num_processes=1,
                                        wait_for_everyone=lambda: None)  # fmt: skip

    def prepare(fraction: str, out: str):
        cfg = parse_config(["--family", "ideogram4", "--pretrained_model_name_or_path", str(tiny_ideogram4),
                            "--train_data_dir", str(data), "--output_dir", str(tmp_path / out), "--resolution", "64",
                            "--max_sequence_length", "24", "--mixed_precision", "no", "--cache_dir",
                            str(tmp_path / "cache"), "--max_bad_samples_fraction", fraction])  # fmt: skip
        spec = get_spec("ideogram4")
        comps = spec.model.load_components(cfg, __import__("torch").device("cpu"))
        configure(spec, comps, cfg)
        return prepare_data(cfg, spec, comps, accelerator)

    import contextlib
    import io

    from dit_lora.commands.cli import main as cli_main

    said = io.StringIO()
    with contextlib.redirect_stdout(said), pytest.raises(SystemExit):  # check-data blocks its row, as the run leaves it out
        cli_main(["check-data", "--family", "ideogram4", "--pretrained_model_name_or_path", str(tiny_ideogram4),
                  "--train_data_dir", str(data), "--resolution", "64", "--max_sequence_length", "24"])  # fmt: skip
    row = next(line for line in said.getvalue().splitlines() if line.startswith("BLOCK"))
    assert rows[0]["file_name"] in row and "over --max_sequence_length (the pipeline refuses it)" in row
    assert "4 sample(s): 3 ok, 0 warning(s), 1 blocking" in said.getvalue()

    prepared = prepare("0.3", "out")
    assert len(prepared) == 3 and rows[0]["file_name"] not in [s.key for s in prepared.samples]
    assert [q["key"] for q in prepared.quarantine] == [rows[0]["file_name"]]
    assert "over the caption length 24 (the pipeline refuses it)" in prepared.quarantine[0]["reason"]
    with pytest.raises(UserError, match=r"1 of 4 .*--max_bad_samples_fraction"):
        prepare("0.05", "out2")


def test_a_long_validation_prompt_is_refused_by_its_name(parts):
    from dit_lora.contract.capabilities import TextSettings
    from dit_lora.core.errors import UserError
    from dit_lora.families.ideogram4.encoders import Ideogram4Encoders
    from dit_lora.families.ideogram4.state import run_state

    comps = _comps(parts)
    run_state(comps).text = TextSettings(max_sequence_length=12)
    with pytest.raises(UserError, match=r"--validation_prompt is longer than the caption length, 12 tokens"):
        Ideogram4Encoders().encode_prompts(comps, ["a small blue square on a green background"], with_negative=True)

"""What a model's tokenizer needs, judged from a folder, the Hub cache or the catalogue's record of a Hub id
(``dit_lora/setup/tokenizer_check.py``); the check that names a missing package is in
tests/modelfiles/test_tokenizer_files.py with the folder fixtures it shares."""

from __future__ import annotations

from dit_lora.commands import doctor
from dit_lora.setup.tokenizer_check import requirements


def test_a_hub_id_is_judged_from_the_catalogue_when_not_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert [p for p, _ in requirements("THUDM/CogVideoX-5b")] == ["sentencepiece", "protobuf"]
    assert requirements("Efficient-Large-Model/Sana_600M_1024px_diffusers") == []
    assert requirements("someone/unknown-model") is None


def test_the_catalogue_answers_only_for_the_folder_it_lists(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert requirements("THUDM/CogVideoX-5b", "") is None  # its spiece.model is in tokenizer/, not the root
    assert requirements("Qwen/Qwen2.5-VL-7B-Instruct", "") == []
    assert requirements("Qwen/Qwen2.5-VL-7B-Instruct", "tokenizer") is None
    checks = doctor.model_checks("THUDM/CogVideoX-5b")
    assert [c.name for c in checks] == ["tokenizer THUDM/CogVideoX-5b/tokenizer"]

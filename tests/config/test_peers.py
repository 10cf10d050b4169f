"""Other trainers' option names and their dit-lora counterparts."""

from dit_lora.config import owners
from dit_lora.config.peers import PEER_FLAGS, peer_hint


def test_every_counterpart_is_a_dit_lora_option_and_no_peer_name_is_one():
    names = set(owners.all_option_names())
    for name, peer in PEER_FLAGS.items():
        assert name not in names, f"{name} is a dit-lora option: drop it from PEER_FLAGS"
        assert peer.option is None or peer.option in names, peer.option
        assert peer.option is not None or peer.note, f"{name}: say why there is no counterpart"


def test_hints_name_the_counterpart_or_say_there_is_none():
    common = sorted(owners.common_names())
    assert "dit-lora's option is --rank" in peer_hint("--network_dim", common)
    assert "--lora_alpha" in peer_hint("network_alpha", common)
    assert "--num_train_epochs" in peer_hint("max_train_epochs", common)
    assert "--checkpointing_steps" in peer_hint("save_every_n_steps", common)
    assert "no dit-lora equivalent" in peer_hint("blocks_to_swap", common) and "issue 35" in peer_hint(
        "blocks_to_swap", common)
    assert "no dit-lora equivalent" in peer_hint("output_name", common)
    assert "--family wan" in peer_hint("discrete_flow_shift", common)
    assert peer_hint("resoluton", common) is None
